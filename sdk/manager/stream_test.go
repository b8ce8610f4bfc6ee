package manager

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/batonrun/baton/sdk/reconcile"
)

// The manager on the work stream against the real baton-queue is tested in
// the module test/sdk (manager/stream_test.go).

// TestFallsBackWithoutWork: against a queue without the work stream (the
// fake answers UNIMPLEMENTED, as a queue from before it does), the manager
// leases with unary calls.
func TestFallsBackWithoutWork(t *testing.T) {
	f, q := startFakeQueue(t)
	var calls atomic.Int32
	rec := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		calls.Add(1)
		return reconcile.Result{}, nil
	})
	add(t, q, "ns/a")
	stop := start(t, q, Controller{Reconciler: rec}, Options{})
	eventually(t, "key done", func() bool { return f.empty() })
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if calls.Load() != 1 || f.leaseCalls == 0 || f.ackCalls == 0 {
		t.Errorf("reconciles %d, Lease calls %d, Ack calls %d: want the key reconciled over unary calls", calls.Load(), f.leaseCalls, f.ackCalls)
	}
}
