// Package experiment runs the experiments that end Baton's two founding
// investigations ("The Dispatcher Who Tried to Do Everything" and "The
// Hidden Worker") against a live etcd and a live queue, so the numbers they
// print are measured, not simulated:
//
//   - Burst: changes arrive faster than reconciles finish. Who holds the
//     backlog?
//   - Repeat: one object changes several times before a worker is free. How
//     many reconciles?
//   - Failure: a reconcile fails half-way. Does the work survive?
//
// Each runs the same workload twice: through a direct-reaction baseline (a
// handler that reconciles on every etcd watch event, in-process, with no
// queue) and through Baton (an announcer that turns watch events into queue
// Adds, as the observer does, and a reconciler run by the worker SDK's
// manager, which leases from the real queue and acks).
//
// The experiments write only under Prefix and use only their own queues
// (QueueBurst, QueueRepeat, QueueFailure), so the reference controllers never
// see them; every run deletes its objects and forgets its queue keys when it
// ends, also when it fails.
package experiment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/worker/manager"
	"github.com/batonrun/baton/services/worker/reconcile"
)

// Prefix is where the experiments write their objects. No built-in observer
// rule watches it, so no reference controller reacts to them.
const Prefix = "/registry/experiments/"

// The experiments' queues: named apart from the reference controllers'
// (replicasets, deployments, jobs, statefulsets, pods).
const (
	QueueBurst   = "experiment-burst"
	QueueRepeat  = "experiment-repeat"
	QueueFailure = "experiment-failure"
)

// Env is what an experiment runs against.
type Env struct {
	Etcd  *clientv3.Client
	Queue *queueclient.Client
	// Log receives progress at debug level; nil discards.
	Log *slog.Logger
}

func (e Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// newRunID names one run; objects and queue keys carry it, so a run's
// cleanup touches nothing else.
func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "x" + hex.EncodeToString(b)
}

// ErrQueueBusy means an experiment's queue already holds keys: another run
// is in progress, or a killed run left keys behind.
var ErrQueueBusy = errors.New("queue busy")

// checkIdle refuses to start when queue holds keys, since the experiment
// reads the queue's depth and counters as its own.
func checkIdle(ctx context.Context, q *queueclient.Client, queue string) error {
	st, err := stats(ctx, q, queue)
	if err != nil {
		return err
	}
	if n := st.GetPending() + st.GetDelayed() + st.GetLeased() + st.GetParked(); n > 0 {
		return fmt.Errorf("%w: queue %s holds %d keys (another run of this experiment, or one that was killed); see `batonctl queue list %s`, and `batonctl experiment clean` to drop a killed run's leftovers",
			ErrQueueBusy, queue, n, queue)
	}
	return nil
}

// stats returns queue's counters; a queue never used has all zeros.
func stats(ctx context.Context, q *queueclient.Client, queue string) (*queuev1.QueueStats, error) {
	all, err := q.Stats(ctx, queue)
	if status.Code(errors.Unwrap(err)) == codes.NotFound || status.Code(err) == codes.NotFound {
		return &queuev1.QueueStats{Queue: queue}, nil
	}
	if err != nil {
		return nil, err
	}
	for _, s := range all {
		if s.GetQueue() == queue {
			return s, nil
		}
	}
	return &queuev1.QueueStats{Queue: queue}, nil
}

// Depth is a queue's unfinished keys by state.
type Depth struct {
	Pending uint64 `json:"pending"`
	Delayed uint64 `json:"delayed"`
	Leased  uint64 `json:"leased"`
	Parked  uint64 `json:"parked"`
}

// Total is every unfinished key.
func (d Depth) Total() uint64 { return d.Pending + d.Delayed + d.Leased + d.Parked }

func depthOf(s *queuev1.QueueStats) Depth {
	return Depth{Pending: s.GetPending(), Delayed: s.GetDelayed(), Leased: s.GetLeased(), Parked: s.GetParked()}
}

// cleanup deletes a run's objects and forgets its queue keys: those it
// announced and any other of the run's keys the queue still lists. It runs
// on a fresh context so that an interrupted run (Ctrl-C) still cleans up.
func cleanup(e Env, run, queue string, keys []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if _, err := e.Etcd.Delete(ctx, Prefix+run+"/", clientv3.WithPrefix()); err != nil {
		errs = append(errs, fmt.Errorf("delete %s: %w", Prefix+run+"/", err))
	}
	items, err := e.Queue.List(ctx, queue, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 1000)
	if err != nil && status.Code(errors.Unwrap(err)) != codes.NotFound && status.Code(err) != codes.NotFound {
		errs = append(errs, err)
	}
	for _, it := range items {
		if strings.HasPrefix(it.GetKey(), run+"/") {
			keys = append(keys, it.GetKey())
		}
	}
	if len(keys) > 0 {
		if _, err := e.Queue.Forget(ctx, queue, keys); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cleaned counts what Clean removed.
type Cleaned struct {
	Objects int64          `json:"objects"`
	Keys    map[string]int `json:"queue_keys"`
}

// Clean removes what runs that could not clean up (killed with SIGKILL, say)
// left behind: every object under Prefix and every key of the experiments'
// queues. It must not run while an experiment runs, whose objects and keys it
// would remove too.
func Clean(ctx context.Context, e Env) (*Cleaned, error) {
	out := &Cleaned{Keys: map[string]int{}}
	resp, err := e.Etcd.Delete(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w", Prefix, err)
	}
	out.Objects = resp.Deleted
	for _, q := range []string{QueueBurst, QueueRepeat, QueueFailure} {
		items, err := e.Queue.List(ctx, q, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 1000)
		if status.Code(errors.Unwrap(err)) == codes.NotFound || status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return out, err
		}
		keys := make([]string, len(items))
		for i, it := range items {
			keys[i] = it.GetKey()
		}
		n, err := e.Queue.Forget(ctx, q, keys)
		out.Keys[q] = n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// object is the JSON the experiments store: a small object in DESIGN.md's
// shape whose spec.seq says which change it is.
type object struct {
	Kind     string         `json:"kind"`
	Metadata map[string]any `json:"metadata"`
	Spec     map[string]any `json:"spec"`
}

func marshalObject(kind, namespace, name string, spec map[string]any) string {
	b, _ := json.Marshal(object{Kind: kind, Metadata: map[string]any{"name": name, "namespace": namespace}, Spec: spec})
	return string(b)
}

// seqOf reads spec.seq from a stored object (-1 when absent).
func seqOf(value []byte) int64 {
	var o struct {
		Spec struct {
			Seq *int64 `json:"seq"`
		} `json:"spec"`
	}
	if json.Unmarshal(value, &o) != nil || o.Spec.Seq == nil {
		return -1
	}
	return *o.Spec.Seq
}

// revisionNow returns etcd's current revision, from which a watch sees
// every later change.
func revisionNow(ctx context.Context, c *clientv3.Client) (int64, error) {
	resp, err := c.Get(ctx, "/registry/experiments", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read etcd revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// announcer stands in for the observer: it watches prefix and announces
// every changed object's queue key to queue with Add — all the keys of one
// watch response in one call, as the observer batches, or one Add per event
// when perEvent is set. It never waits on a worker.
type announcer struct {
	q        *queueclient.Client
	perEvent bool

	events    atomic.Int64 // watch events received
	announced atomic.Int64 // keys sent in Adds
	queued    atomic.Int64
	collapsed atomic.Int64
	rev       atomic.Int64 // the newest revision announced

	cancel context.CancelFunc

	mu   sync.Mutex
	adds []AddOutcome
	keys map[string]bool
	err  error
	done chan struct{}
}

// AddOutcome is what one Add answered.
type AddOutcome struct {
	Keys      int `json:"keys"`
	Queued    int `json:"queued"`
	Collapsed int `json:"collapsed"`
}

func startAnnouncer(ctx context.Context, e Env, prefix string, fromRev int64, queue string, keyOf func(string) string, perEvent bool) *announcer {
	ctx, cancel := context.WithCancel(ctx)
	a := &announcer{q: e.Queue, perEvent: perEvent, keys: map[string]bool{}, done: make(chan struct{}), cancel: cancel}
	a.rev.Store(fromRev - 1)
	wch := e.Etcd.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev))
	go func() {
		defer close(a.done)
		for resp := range wch {
			if err := resp.Err(); err != nil {
				a.fail(fmt.Errorf("watch %s: %w", prefix, err))
				return
			}
			var batch []string
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				a.events.Add(1)
				batch = append(batch, keyOf(string(ev.Kv.Key)))
			}
			groups := [][]string{batch}
			if a.perEvent {
				groups = groups[:0]
				for _, k := range batch {
					groups = append(groups, []string{k})
				}
			}
			for _, g := range groups {
				if len(g) == 0 {
					continue
				}
				res, err := a.q.Add(ctx, queue, g, queueclient.AddOptions{Source: "batonctl-experiment"})
				if err != nil {
					if ctx.Err() == nil {
						a.fail(err)
					}
					return
				}
				a.announced.Add(int64(len(g)))
				a.queued.Add(int64(res.Queued))
				a.collapsed.Add(int64(res.Collapsed))
				a.mu.Lock()
				a.adds = append(a.adds, AddOutcome{Keys: len(g), Queued: res.Queued, Collapsed: res.Collapsed})
				for _, k := range g {
					a.keys[k] = true
				}
				a.mu.Unlock()
			}
			a.rev.Store(resp.Header.Revision)
		}
	}()
	return a
}

// stop stops watching and returns once no Add is in flight.
func (a *announcer) stop() {
	a.cancel()
	<-a.done
}

func (a *announcer) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
}

// failed returns the error that stopped the announcer, if any.
func (a *announcer) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// announcedKeys returns every distinct key announced so far.
func (a *announcer) announcedKeys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.keys))
	for k := range a.keys {
		out = append(out, k)
	}
	return out
}

func (a *announcer) outcomes() []AddOutcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]AddOutcome(nil), a.adds...)
}

// waitFor polls cond every few milliseconds until it holds, ctx ends or
// d passes; what names the condition in the error.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", d, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(3 * time.Millisecond):
		}
	}
}

// worker runs one reconciler under the worker SDK's manager, leasing from
// queue, until stop is called.
type worker struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startWorker(ctx context.Context, e Env, queue, name string, r reconcile.Reconciler) (*worker, error) {
	m := manager.New(e.Queue, manager.Options{Worker: name, GracePeriod: 10 * time.Second, Logger: e.log()})
	// A short long-poll keeps shutdown quick; one key at a time is the
	// execution rate the experiment sets.
	if err := m.Add(manager.Controller{Name: queue, Reconciler: r, Concurrency: 1, PollWait: 2 * time.Second}); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- m.Run(wctx) }()
	return w, nil
}

// stop stops leasing, lets the reconcile in flight finish and ack, and
// returns when the manager has shut down.
func (w *worker) stop() error {
	w.once.Do(func() {
		w.cancel()
		w.err = <-w.done
	})
	return w.err
}

// queueKey maps an experiment object's etcd key to its queue key,
// "<run>/<name>", the namespace/name shape the reference controllers use.
func queueKey(runID string) func(string) string {
	return func(etcdKey string) string {
		return runID + "/" + etcdKey[strings.LastIndex(etcdKey, "/")+1:]
	}
}

// round2 keeps two decimals: measured rates on a shared machine mean no more.
func round2(x float64) float64 { return math.Round(x*100) / 100 }
