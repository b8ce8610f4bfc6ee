package manager

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonrun/baton/sdk/reconcile"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// TestRepeatedFailuresAreLoggedOncePerCause: a queue that refuses every
// Lease (RESOURCE_EXHAUSTED, as at its limit of waiting Leases) makes the
// controller retry with a backoff, and the log gets one line of it, not
// one per retry.
func TestRepeatedFailuresAreLoggedOncePerCause(t *testing.T) {
	f, q := startFakeQueue(t)
	f.mu.Lock()
	f.refuseLeases = status.Error(codes.ResourceExhausted, "too many waiting Leases on connection 127.0.0.1:1: 256 in flight (limit 256)")
	f.mu.Unlock()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	rec := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	stop := start(t, q, Controller{Reconciler: rec}, Options{Logger: log})
	eventually(t, "five refused Leases", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.leaseCalls >= 5
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "lease failed"); n != 1 {
		t.Errorf("%d lines of the refused Leases, want 1:\n%s", n, buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
