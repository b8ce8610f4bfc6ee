package serve

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadyMetric: baton_ready follows Options.Ready without anyone asking
// /readyz, both ways, so an alert can tell a member that is up from one
// that is ready.
func TestReadyMetric(t *testing.T) {
	var notReady atomic.Pointer[error]
	down := errors.New("store full")
	notReady.Store(&down)
	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Name: "test", HTTPAddr: "127.0.0.1:0", GracePeriod: time.Second,
			Ready: func(context.Context) error {
				if err := notReady.Load(); err != nil {
					return *err
				}
				return nil
			},
			OnListen: func(_, h net.Addr) { addr <- h.String() }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var h string
	select {
	case h = <-addr:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10 s")
	}
	// The readiness check runs once a second: allow a few.
	waitValue := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		var got string
		for time.Now().Before(deadline) {
			if got = scrapeSample(t, h, ReadyMetric); got == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s is %q after 10 s, want %q", ReadyMetric, got, want)
	}
	waitValue("0")
	notReady.Store(nil)
	waitValue("1")
	notReady.Store(&down)
	waitValue("0")
}

// scrapeSample returns the value of the sample of metric name (without
// labels) on h's /metrics, or "" when there is none.
func scrapeSample(t *testing.T, h, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + h + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ""
}
