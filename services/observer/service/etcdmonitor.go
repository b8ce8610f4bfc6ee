package service

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// etcdConnectParams replace gRPC's default reconnect backoff for the etcd
// client. The default starts at 1 s and grows 1.6 times an attempt up to
// 120 s, so after an outage of some seconds the client tried again only
// seconds after etcd was back, and the observer stayed unready (and its
// watches stopped) 15 to 40 s longer than etcd did. Capped at 1 s, the
// client reconnects within about a second of etcd answering; an attempt to
// a down etcd is a refused connection or a bounded timeout, so trying once
// a second costs etcd nothing.
var etcdConnectParams = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	// How long one connection attempt may take (TCP and TLS): the default
	// 20 s would keep a connection to an unreachable address pending that
	// long before the next attempt.
	MinConnectTimeout: 5 * time.Second,
}

// etcdMonitor reads from etcd every interval and logs when etcd stops
// answering (WARN) and when it answers again (INFO, with how long it was
// gone). clientv3 retries and reconnects silently (its own logger is
// discarded for its noise), and the watches only say that they broke, so
// without it an outage leaves no clear trace in the log.
type etcdMonitor struct {
	etcd      *clientv3.Client
	endpoints []string
	log       *slog.Logger
	interval  time.Duration // between probes
	timeout   time.Duration // for one probe

	down  bool      // the last probe failed
	since time.Time // when the first failed probe started
}

func newEtcdMonitor(etcd *clientv3.Client, endpoints []string, log *slog.Logger) *etcdMonitor {
	return &etcdMonitor{etcd: etcd, endpoints: endpoints, log: log, interval: 500 * time.Millisecond, timeout: time.Second}
}

// run probes until ctx ends.
func (m *etcdMonitor) run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		m.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe makes one linearizable read (the one readiness makes): it needs a
// member with a leader, as the observer's writes and watches do.
func (m *etcdMonitor) probe(ctx context.Context) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, m.timeout)
	_, err := m.etcd.Get(pctx, readyzKey, clientv3.WithCountOnly())
	cancel()
	if ctx.Err() != nil {
		return // stopping, not an outage
	}
	switch {
	case err != nil && !m.down:
		m.down, m.since = true, start
		m.log.Warn("etcd unreachable; the cache keeps answering reads at its last revision, changes are not observed until etcd is back",
			"endpoints", m.endpoints, "error", err)
	case err == nil && m.down:
		m.down = false
		m.log.Info("etcd reachable again", "endpoints", m.endpoints, "down_for", time.Since(m.since).Round(time.Millisecond))
	}
}
