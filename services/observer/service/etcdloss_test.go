package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd goes away and comes back: the observer says so at WARN when it
// goes, at INFO with the outage's length when it is back, and /readyz is
// ready again within 2 s of etcd answering.
func TestEtcdLossIsLoggedAndReadinessFollowsWithin2s(t *testing.T) {
	srv := startEtcd(t)
	q := startQueue(t)
	logs := newLogCapture(t)
	o := startObserverLog(t, srv.Endpoints(), q.addr, nil, logs.logger())
	waitFor(t, 30*time.Second, "observer to be ready", func() (bool, string) {
		err := probeReady(t.Context(), o.httpAddr)
		return err == nil, fmt.Sprint(err)
	})

	srv.Stop()
	logs.waitLog(t, 10*time.Second, slog.LevelWarn, "etcd unreachable", map[string]string{"error": "*"})
	waitFor(t, 10*time.Second, "observer to report not ready", func() (bool, string) {
		return probeReady(t.Context(), o.httpAddr) != nil, "still ready"
	})
	// The outage lasts long enough for gRPC's default reconnect backoff (1 s,
	// growing 1.6 times an attempt up to 120 s) to space its attempts more
	// than 2 s apart. The sleep makes the outage; nothing waits on it.
	time.Sleep(10 * time.Second)
	if got := logs.find(slog.LevelInfo, "etcd reachable again", nil); len(got) > 0 {
		t.Fatalf("recovery logged while etcd is down: %v", got)
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}

	// A fresh client, whose backoff has not grown, tells when etcd answers.
	cli := newEtcdClient(t, srv.Endpoints())
	var answered time.Time
	waitFor(t, 30*time.Second, "etcd to answer a Get", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		answered = time.Now()
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, 60*time.Second, "observer to be ready again", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err := probeReady(ctx, o.httpAddr)
		return err == nil, fmt.Sprint(err)
	})
	if lag := time.Since(answered); lag > 2*time.Second {
		t.Errorf("/readyz answered 200 %v after etcd answered a Get, want within 2s", lag.Round(time.Millisecond))
	}
	rec := logs.waitLog(t, 10*time.Second, slog.LevelInfo, "etcd reachable again", map[string]string{"down_for": "*"})
	d, err := time.ParseDuration(rec.Attrs["down_for"])
	if err != nil || d < 10*time.Second {
		t.Errorf("recovery line %v: down_for should be the outage (at least 10s)", rec)
	}
}
