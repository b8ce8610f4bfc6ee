package service_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/batonrun/baton/services/worker/service"
)

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReadiness(t *testing.T) {
	s := startStack(t)
	w := s.startWorker(s.workerConfig())
	waitFor(t, converge, "ready", func() bool { return status(t, "http://"+w.httpAddr+"/readyz") == http.StatusOK })
	if got := status(t, "http://"+w.httpAddr+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d", got)
	}

	// A worker whose queue does not answer is alive but not ready.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	cfg := s.workerConfig()
	cfg.QueueAddr = dead
	w2 := s.startWorker(cfg)
	if got := status(t, "http://"+w2.httpAddr+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz without a queue = %d, want 503", got)
	}
	if got := status(t, "http://"+w2.httpAddr+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz without a queue = %d, want 200", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*service.Config)
		ok     bool
	}{
		{"defaults", func(*service.Config) {}, true},
		{"subset", func(c *service.Config) { c.Controllers = "pods, jobs" }, true},
		{"unknown controller", func(c *service.Config) { c.Controllers = "pods,widgets" }, false},
		{"no controllers", func(c *service.Config) { c.Controllers = " , " }, false},
		{"no etcd", func(c *service.Config) { c.EtcdEndpoints = nil }, false},
		{"no queue", func(c *service.Config) { c.QueueAddr = "" }, false},
		{"zero concurrency", func(c *service.Config) { c.Concurrency = 0 }, false},
		{"tiny lease", func(c *service.Config) { c.LeaseDuration = time.Millisecond }, false},
		{"no observer reads etcd", func(c *service.Config) { c.ObserverAddr = "" }, true},
	}
	for _, tt := range tests {
		cfg := service.DefaultConfig()
		tt.change(&cfg)
		if err := cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
	}
}
