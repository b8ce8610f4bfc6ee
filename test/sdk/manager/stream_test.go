package manager_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/test/framework"
	"go.uber.org/goleak"
)

// The manager on the work stream, against the real baton-queue binary,
// which test/framework runs: it must wrap the run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(frameworkM{m}) }

type frameworkM struct{ m *testing.M }

func (f frameworkM) Run() int { return framework.RunTests(f.m) }

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
func start(t *testing.T, q *queueclient.Client, c manager.Controller, o manager.Options) (stop func()) {
	t.Helper()
	if c.Name == "" {
		c.Name = "things"
	}
	if c.PollWait == 0 {
		c.PollWait = 200 * time.Millisecond
	}
	m := manager.New(q, o)
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

// started returns how many calls of method (a QueueService method) the
// queue has started, from its gRPC server metrics.
func started(t *testing.T, q *framework.Queue, method string) int {
	t.Helper()
	resp, err := http.Get("http://" + q.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`grpc_server_started_total\{[^}]*grpc_method="` + method + `"[^}]*grpc_service="baton.queue.v1.QueueService"[^}]*\} (\d+)`)
	m := re.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func inspectState(t *testing.T, q *queueclient.Client, key string) queuev1.ItemState {
	t.Helper()
	it, err := q.Inspect(t.Context(), "things", key)
	if err != nil {
		t.Fatal(err)
	}
	return it.GetState()
}

// TestStreamIsTheDefault: against a queue that serves Work, the manager
// takes its keys from one stream, with no Lease, Ack or Extend call, and
// every outcome lands as with unary calls.
func TestStreamIsTheDefault(t *testing.T) {
	queue := framework.StartQueue(t, framework.QueueOptions{BackoffBase: time.Millisecond})
	q := queue.Client
	var calls atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		calls.Add(1)
		switch {
		case req.Key == "ns/flaky" && req.Attempt < 2:
			return reconcile.Result{}, context.DeadlineExceeded
		case req.Key == "ns/bad":
			return reconcile.Result{}, reconcile.Terminal(io.ErrUnexpectedEOF)
		}
		return reconcile.Result{}, nil
	})
	keys := []string{"ns/a", "ns/b", "ns/flaky", "ns/bad"}
	add(t, q, keys...)
	// The default lease: a heartbeat late on a busy machine must not lapse
	// one and add a reconcile to the count.
	stop := start(t, q, manager.Controller{Reconciler: rec, Concurrency: 3}, manager.Options{})
	eventually(t, "every key done", func() bool {
		for _, k := range keys[:3] {
			if inspectState(t, q, k) != queuev1.ItemState_ITEM_STATE_ABSENT {
				return false
			}
		}
		return inspectState(t, q, "ns/bad") == queuev1.ItemState_ITEM_STATE_PARKED
	})
	stop()
	if got := calls.Load(); got != 6 {
		t.Errorf("reconciles = %d, want 6 (a, b, bad once; flaky three times)", got)
	}
	if n := started(t, queue, "Work"); n != 1 {
		t.Errorf("Work streams started = %d, want 1", n)
	}
	for _, m := range []string{"Lease", "Ack", "Extend"} {
		if n := started(t, queue, m); n != 0 {
			t.Errorf("%s calls = %d, want none: the stream carries them", m, n)
		}
	}
}

// TestStreamBreakCancelsReconciles: the queue SIGKILLed under a reconcile
// takes the stream, and its lease, with it: the reconcile is cancelled and
// not acked, the manager opens a new stream once the queue is back, and
// the key (offered again after the restart) is reconciled to the end.
func TestStreamBreakCancelsReconciles(t *testing.T) {
	queue := framework.StartQueue(t, framework.QueueOptions{})
	q := queue.Client
	entered := make(chan struct{})
	var cancelled, calls atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-ctx.Done()
			cancelled.Add(1)
			return reconcile.Result{}, ctx.Err()
		}
		return reconcile.Result{}, nil
	})
	add(t, q, "ns/a")
	stop := start(t, q, manager.Controller{Reconciler: rec}, manager.Options{})
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no reconcile began")
	}
	queue.Kill()
	eventually(t, "the reconcile of the broken stream's lease cancelled", func() bool { return cancelled.Load() == 1 })
	queue.Start()
	eventually(t, "ns/a reconciled on a new stream", func() bool { return inspectState(t, q, "ns/a") == queuev1.ItemState_ITEM_STATE_ABSENT })
	stop()
	if got := calls.Load(); got != 2 {
		t.Errorf("reconciles = %d, want 2", got)
	}
	if n := started(t, queue, "Work"); n < 1 {
		t.Errorf("the restarted queue started %d Work streams, want one", n)
	}
}

// msgDraining is what the manager logs when it drains a stream at
// shutdown (manager/stream.go): the moment the test adds a key the stream
// must no longer push.
const msgDraining = "draining the work stream"

// logged collects the messages of a logger, for tests that wait for one.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

func (l *logged) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.msgs, msg)
}

// TestStreamGracefulShutdown: at shutdown the stream is drained: nothing
// more is pushed, a reconcile that finishes within the grace period is
// acked, and one that does not is cancelled and its lease handed back at
// once (pending, attempts + 1), not left to lapse.
func TestStreamGracefulShutdown(t *testing.T) {
	queue := framework.StartQueue(t, framework.QueueOptions{})
	q := queue.Client
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
	log := &logged{}
	stop := start(t, q, manager.Controller{Reconciler: rec, Concurrency: 2, LeaseDuration: time.Minute},
		manager.Options{GracePeriod: 500 * time.Millisecond, Logger: slog.New(log)})
	eventually(t, "both reconciling", func() bool { return entered.Load() == 2 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	eventually(t, "the stream drained", func() bool { return log.has(msgDraining) })
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
	if st := inspectState(t, q, "ns/quick"); st != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Errorf("ns/quick finished within the grace period but is %v", st)
	}
	it, err := q.Inspect(t.Context(), "things", "ns/stuck")
	if err != nil {
		t.Fatal(err)
	}
	if it.GetState() != queuev1.ItemState_ITEM_STATE_PENDING || it.GetAttempts() != 1 || it.GetLastError() != "work stream ended" {
		t.Errorf("ns/stuck is %v, want handed back: pending, attempt 1, work stream ended", it)
	}
	if st := inspectState(t, q, "ns/late"); st != queuev1.ItemState_ITEM_STATE_PENDING {
		t.Errorf("ns/late, added after the drain, is %v, want pending", st)
	}
}

// TestStreamLeaseLostCancels: a key forgotten while it is reconciled is
// LEASE_LOST to the next extend on the stream: the reconcile is cancelled
// and not acked.
func TestStreamLeaseLostCancels(t *testing.T) {
	queue := framework.StartQueue(t, framework.QueueOptions{})
	q := queue.Client
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		close(entered)
		<-ctx.Done()
		close(cancelled)
		return reconcile.Result{}, ctx.Err()
	})
	add(t, q, "ns/a")
	stop := start(t, q, manager.Controller{Reconciler: rec, LeaseDuration: 300 * time.Millisecond}, manager.Options{})
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
	st, err := q.Stats(t.Context(), "things")
	if err != nil {
		t.Fatal(err)
	}
	if st[0].GetAcksTotal() != 0 {
		t.Errorf("acks = %d: a lost lease must not be acked", st[0].GetAcksTotal())
	}
}

// TestStreamHeartbeatKeepsLongReconcile: a reconcile three lease durations
// long keeps its lease by extends on the stream, and is acked once.
func TestStreamHeartbeatKeepsLongReconcile(t *testing.T) {
	queue := framework.StartQueue(t, framework.QueueOptions{})
	q := queue.Client
	var calls atomic.Int32
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		calls.Add(1)
		select {
		case <-time.After(900 * time.Millisecond):
			return reconcile.Result{}, nil
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
	})
	add(t, q, "ns/slow")
	stop := start(t, q, manager.Controller{Reconciler: rec, LeaseDuration: 300 * time.Millisecond}, manager.Options{})
	eventually(t, "key done", func() bool { return inspectState(t, q, "ns/slow") == queuev1.ItemState_ITEM_STATE_ABSENT })
	stop()
	st, err := q.Stats(t.Context(), "things")
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 || st[0].GetLeaseExpirationsTotal() != 0 || st[0].GetAcksTotal() != 1 {
		t.Errorf("calls = %d, expirations = %d, acks = %d; want 1, 0, 1", calls.Load(), st[0].GetLeaseExpirationsTotal(), st[0].GetAcksTotal())
	}
}

// TestRequestCarriesPendingSince: a reconcile learns when its key became
// ready in the queue, on the stream and through unary calls alike: after
// the Add that made it ready, and before the reconcile began.
func TestRequestCarriesPendingSince(t *testing.T) {
	for _, unary := range []bool{false, true} {
		t.Run(map[bool]string{false: "stream", true: "unary"}[unary], func(t *testing.T) {
			queue := framework.StartQueue(t, framework.QueueOptions{})
			q := queue.Client
			type seen struct{ since, at time.Time }
			got := make(chan seen, 1)
			rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				select {
				case got <- seen{req.PendingSince, time.Now()}:
				default:
				}
				return reconcile.Result{}, nil
			})
			stop := start(t, q, manager.Controller{Reconciler: rec}, manager.Options{UnaryCalls: unary})
			defer stop()
			before := time.Now()
			add(t, q, "ns/a")
			select {
			case s := <-got:
				if s.since.Before(before) || s.since.After(s.at) {
					t.Errorf("PendingSince = %v, want between the Add (%v) and the reconcile's start (%v)", s.since, before, s.at)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no reconcile in 30 s")
			}
		})
	}
}
