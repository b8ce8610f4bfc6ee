package service_test

import (
	"context"
	"net"
	"testing"
	"time"

	observerservice "github.com/batonrun/baton/services/observer/service"
)

// startObserver runs the real observer (its service.Run, built-in rules for
// the reference controllers) against the stack's etcd and queue, and returns
// its gRPC address: workers read through its cache.
func startObserver(t testing.TB, s *stack) string {
	t.Helper()
	cfg := observerservice.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.EtcdEndpoints, cfg.QueueAddr = s.etcd.Endpoints(), s.queueAddr
	cfg.GracePeriod, cfg.ProgressInterval = time.Second, 100*time.Millisecond
	addrs := make(chan string, 1)
	cfg.OnListen = func(g, _ net.Addr) { addrs <- g.String() }
	runBackground(t, "observer", func(ctx context.Context) error { return observerservice.Run(ctx, cfg, nil) })
	select {
	case a := <-addrs:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("observer did not start")
		return ""
	}
}
