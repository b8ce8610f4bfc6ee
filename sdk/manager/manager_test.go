package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/prometheus/client_golang/prometheus"
)

// The manager against the real queue is tested in the module test/sdk,
// which may start baton-queue; these tests use fakeQueue.

// eventually polls cond until it holds or the test's deadline nears.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// start runs a manager with one controller until the test ends; it returns a
// function that cancels it and waits for Run to return.
func start(t *testing.T, q *queueclient.Client, c Controller, o Options) (stop func()) {
	t.Helper()
	if c.Name == "" {
		c.Name = "things"
	}
	if c.PollWait == 0 {
		c.PollWait = 200 * time.Millisecond
	}
	m := New(q, o)
	if err := m.Add(c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func add(t *testing.T, q *queueclient.Client, keys ...string) {
	t.Helper()
	if _, err := q.Add(t.Context(), "things", keys, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name string
		// rec is called with the number of earlier calls for the key.
		rec func(n int) (reconcile.Result, error)
		// wantCalls is how many reconciles happen before the key is gone.
		wantCalls  int
		wantResult string
	}{
		{"success", func(int) (reconcile.Result, error) { return reconcile.Result{}, nil }, 1, ResultSuccess},
		{"error is retried", func(n int) (reconcile.Result, error) {
			if n < 2 {
				return reconcile.Result{}, errors.New("boom")
			}
			return reconcile.Result{}, nil
		}, 3, ResultError},
		{"panic is retried", func(n int) (reconcile.Result, error) {
			if n == 0 {
				panic("kaboom")
			}
			return reconcile.Result{}, nil
		}, 2, ResultPanic},
		{"terminal is not retried", func(int) (reconcile.Result, error) {
			return reconcile.Result{}, reconcile.Terminal(errors.New("malformed"))
		}, 1, ResultTerminal},
		{"requeue after", func(n int) (reconcile.Result, error) {
			if n == 0 {
				return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return reconcile.Result{}, nil
		}, 2, ResultRequeueAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, q := startFakeQueue(t)
			var mu sync.Mutex
			var attempts []int
			reg := prometheus.NewRegistry()
			rec := reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
				mu.Lock()
				n := len(attempts)
				attempts = append(attempts, req.Attempt)
				mu.Unlock()
				return tt.rec(n)
			})
			stop := start(t, q, Controller{Reconciler: rec}, Options{Registerer: reg})
			add(t, q, "ns/a")
			eventually(t, "key acked away", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(attempts) >= tt.wantCalls && f.empty()
			})
			stop()
			mu.Lock()
			defer mu.Unlock()
			if len(attempts) != tt.wantCalls {
				t.Errorf("reconciles = %d, want %d", len(attempts), tt.wantCalls)
			}
			if tt.wantResult == ResultTerminal {
				if it := f.item("ns/a"); it == nil || it.state != queuev1.ItemState_ITEM_STATE_PARKED || !strings.Contains(it.lastError, "malformed") {
					t.Errorf("after a terminal error the key is %+v, want parked with its error", it)
				}
			}
			mfs, _ := reg.Gather()
			found := false
			for _, mf := range mfs {
				if mf.GetName() != "baton_worker_reconcile_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "result" && l.GetValue() == tt.wantResult && m.GetCounter().GetValue() >= 1 {
							found = true
						}
					}
				}
			}
			if !found {
				t.Errorf("no reconcile_total{result=%q} >= 1", tt.wantResult)
			}
			// Retries carry the failures so far.
			if tt.wantResult == ResultError && (attempts[1] != 1 || attempts[2] != 2) {
				t.Errorf("attempts = %v, want [0 1 2]", attempts)
			}
		})
	}
}

func TestConcurrencyBoundAndBatching(t *testing.T) {
	f, q := startFakeQueue(t)
	const workers, keys = 4, 40
	var inside, maxInside, calls atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		n := inside.Add(1)
		defer inside.Add(-1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		calls.Add(1)
		time.Sleep(10 * time.Millisecond)
		return reconcile.Result{}, nil
	})
	var ks []string
	for i := range keys {
		ks = append(ks, fmt.Sprintf("ns/k%d", i))
	}
	add(t, q, ks...)
	stop := start(t, q, Controller{Reconciler: rec, Concurrency: workers, AckDelay: 5 * time.Millisecond}, Options{})
	eventually(t, "all keys done", func() bool { return f.empty() })
	stop()
	if got := maxInside.Load(); got > workers || got < 2 {
		t.Errorf("max concurrent reconciles = %d, want 2..%d", got, workers)
	}
	if got := calls.Load(); got != keys {
		t.Errorf("reconciles = %d, want %d", got, keys)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaseCalls >= keys {
		t.Errorf("lease calls = %d for %d keys: leases are not batched", f.leaseCalls, keys)
	}
	if f.maxAcksPerCall < 2 {
		t.Errorf("max acks per call = %d: acks are not batched", f.maxAcksPerCall)
	}
}

func TestHeartbeatKeepsLongReconcile(t *testing.T) {
	f, q := startFakeQueue(t)
	var calls atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		calls.Add(1)
		select {
		case <-time.After(900 * time.Millisecond): // three lease durations
			return reconcile.Result{}, nil
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
	})
	add(t, q, "ns/slow")
	stop := start(t, q, Controller{Reconciler: rec, LeaseDuration: 300 * time.Millisecond}, Options{})
	eventually(t, "key done", func() bool { return f.empty() })
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if calls.Load() != 1 || f.refused != 0 || f.extendCalls == 0 {
		t.Errorf("calls = %d, refused acks = %d, extend calls = %d; want 1, 0, >0", calls.Load(), f.refused, f.extendCalls)
	}
}

func TestLeaseLostCancelsAndDoesNotAck(t *testing.T) {
	f, q := startFakeQueue(t)
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		close(entered)
		<-ctx.Done()
		close(cancelled)
		return reconcile.Result{}, ctx.Err()
	})
	add(t, q, "ns/a")
	stop := start(t, q, Controller{Reconciler: rec, LeaseDuration: 150 * time.Millisecond}, Options{})
	<-entered
	if _, err := q.Forget(t.Context(), "things", []string{"ns/a"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("reconcile not cancelled after its lease was lost")
	}
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acks) != 0 || f.refused != 0 {
		t.Errorf("acks = %d, refused = %d; a lost lease must not be acked", len(f.acks), f.refused)
	}
}

func TestReconcileTimeout(t *testing.T) {
	f, q := startFakeQueue(t)
	var calls atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if calls.Add(1) > 1 {
			return reconcile.Result{}, nil
		}
		<-ctx.Done()
		return reconcile.Result{}, ctx.Err()
	})
	add(t, q, "ns/a")
	stop := start(t, q, Controller{Reconciler: rec, ReconcileTimeout: 50 * time.Millisecond}, Options{})
	eventually(t, "key done", func() bool { return f.empty() })
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acks) != 2 || f.acks[0].GetFailure() == nil {
		t.Fatalf("acks = %v, want a failure then a success", f.acks)
	}
	if got := f.acks[0].GetFailure().GetError(); got != context.DeadlineExceeded.Error() {
		t.Errorf("failure error = %q", got)
	}
}

func TestGracefulShutdown(t *testing.T) {
	f, q := startFakeQueue(t)
	release := make(chan struct{})
	var entered atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		entered.Add(1)
		if req.Key == "ns/quick" {
			<-release
			return reconcile.Result{}, nil
		}
		<-ctx.Done() // "ns/stuck" only ends when the grace period is over
		return reconcile.Result{}, ctx.Err()
	})
	add(t, q, "ns/quick", "ns/stuck")
	stop := start(t, q, Controller{Reconciler: rec, Concurrency: 2}, Options{GracePeriod: 300 * time.Millisecond})
	eventually(t, "both reconciling", func() bool { return entered.Load() == 2 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// Leasing has stopped: a new key is not picked up.
	time.Sleep(50 * time.Millisecond)
	add(t, q, "ns/late")
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the grace period")
	}
	if entered.Load() != 2 {
		t.Errorf("reconciles = %d after shutdown began, want 2", entered.Load())
	}
	if it := f.item("ns/quick"); it != nil {
		t.Errorf("ns/quick finished within the grace period but was not acked: %+v", it)
	}
	if it := f.item("ns/stuck"); it == nil || it.state != queuev1.ItemState_ITEM_STATE_LEASED {
		t.Errorf("ns/stuck should be left leased to lapse, got %+v", it)
	}
}
