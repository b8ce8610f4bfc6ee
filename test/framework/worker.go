package framework

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// WorkerOptions configures StartWorker.
type WorkerOptions struct {
	// QueueAddr and EtcdEndpoints are required. ObserverAddr is where it
	// reads; empty means etcd directly.
	QueueAddr     string
	ObserverAddr  string
	EtcdEndpoints []string
	// Controllers is --controllers; empty keeps the binary's (all).
	Controllers string
	// Concurrency is --concurrency; 0 keeps the binary's.
	Concurrency int
	// LeaseDuration is --lease-duration; 0 keeps the binary's.
	LeaseDuration time.Duration
	// GracePeriod is --grace-period; 0 means 1 s.
	GracePeriod time.Duration
	// Worker is --worker, the name shown as lease holder; empty keeps the
	// binary's (hostname-pid).
	Worker string
	// NoWaitReady returns once it listens, before /readyz answers 200 (the
	// queue and etcd answer), e.g. with the queue down.
	NoWaitReady bool
	// TLS, if set, makes it dial the queue and the observer, and serve
	// its HTTP address, with its worker certificate.
	TLS *Certs
	// Args are further flags, e.g. Etcd.ClientFlags().
	Args []string
}

// Worker is a baton-worker process (the reference controllers). HTTPAddr
// (/metrics, /readyz) stays the same across restarts.
type Worker struct {
	*Process
	HTTPAddr string
}

// StartWorker builds and starts baton-worker and waits until its /readyz
// answers 200, unless NoWaitReady. It fails the test if it cannot.
func StartWorker(t testing.TB, o WorkerOptions) *Worker {
	t.Helper()
	if o.QueueAddr == "" || len(o.EtcdEndpoints) == 0 {
		t.Fatal("framework: StartWorker needs QueueAddr and EtcdEndpoints")
	}
	if o.GracePeriod == 0 {
		o.GracePeriod = testGracePeriod
	}
	args := []string{"--queue-addr", o.QueueAddr, "--observer-addr", o.ObserverAddr, "--etcd-endpoints", strings.Join(o.EtcdEndpoints, ",")}
	if o.Controllers != "" {
		args = append(args, "--controllers", o.Controllers)
	}
	if o.Concurrency != 0 {
		args = append(args, "--concurrency", strconv.Itoa(o.Concurrency))
	}
	if o.Worker != "" {
		args = append(args, "--worker", o.Worker)
	}
	args = durationFlag(args, "lease-duration", o.LeaseDuration)
	args = durationFlag(args, "grace-period", o.GracePeriod)
	spec := serviceSpec{
		name:        "baton-worker",
		flags:       func(_, h string) []string { return []string{"--http-addr", h} },
		noWaitReady: o.NoWaitReady,
	}
	if o.TLS != nil {
		args = append(args, o.TLS.Flags("worker")...)
		spec.tls = o.TLS.Source(t, "worker")
	}
	spec.args = append(args, o.Args...)
	s := startService(t, spec)
	w := &Worker{Process: s.Process}
	_, w.HTTPAddr = s.addrs()
	return w
}
