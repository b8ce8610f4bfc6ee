// Package experiment runs the experiments that end Baton's two founding
// investigations ("The Dispatcher Who Tried to Do Everything" and "The
// Hidden Worker") against a live etcd, queue and observer, so the numbers
// they print are measured, not simulated:
//
//   - Burst: changes arrive faster than reconciles finish. Who holds the
//     backlog?
//   - Repeat: one object changes several times before a worker is free. How
//     many reconciles?
//   - Failure: a reconcile fails half-way. Does the work survive?
//
// Each runs the same workload twice: through a direct-reaction baseline (a
// handler that reconciles on every etcd watch event, in-process, with no
// queue) and through Baton (the running observer turns the watch events into
// queue Adds, and a reconciler run by the worker SDK's manager leases from
// the real queue and acks).
//
// # Where they write
//
// The Baton arm of each experiment writes under the prefix of its Watch,
// /registry/<queue>/<run>/<name>, which the observer must send to the
// experiment's queue keyed <run>/<name> (Watches lists the three rules,
// services/experiment/rules.yaml holds them for the observer's --rules).
// Everything else (the direct-reaction arm's objects, the failure
// experiment's pods) lives under Unwatched + <run>/, which no rule may watch.
// The reference controllers never see any of it. Every run deletes its
// objects and forgets its queue keys when it ends, also when it fails.
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
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/reconcile"
)

// Unwatched is where the experiments keep what must reach no queue: the
// direct-reaction arm's objects and the failure experiment's pods, under
// Unwatched + <run>/. No observer rule may watch it.
const Unwatched = "/registry/experiments/"

// The experiments' queues: named apart from the reference controllers'
// (replicasets, deployments, jobs, statefulsets, pods).
const (
	QueueBurst   = "experiment-burst"
	QueueRepeat  = "experiment-repeat"
	QueueFailure = "experiment-failure"
)

// RulesFile is the observer's rules file that holds Watches, as the
// repository ships it (with builtin: true, so the reference controllers
// keep theirs).
const RulesFile = "services/experiment/rules.yaml"

// Watch is a rule an experiment needs the observer to have: every change
// under Prefix announced to Queue, keyed by the object's namespace/name
// (for the experiments, <run>/<name>).
//
// The observer learns them from a rules file today (RulesFile). Each Prefix
// is /registry/<Queue>/, the prefix of a kind whose resource is the queue's
// name, so that once the observer also executes the declarations workers
// publish under /baton/rules/<queue> (client/kinds), an experiment can
// declare its own watch instead: publish kinds.Declaration{Queue: Queue,
// For: kinds.Kind{Kind: ..., Resource: Queue}} and wait until the
// observer's Status lists the rule, which checkRule already looks for.
type Watch struct {
	Queue  string
	Prefix string
}

func watchOf(queue string) Watch { return Watch{Queue: queue, Prefix: "/registry/" + queue + "/"} }

// Watches returns the rules of the three experiments, one per queue.
func Watches() []Watch {
	return []Watch{watchOf(QueueBurst), watchOf(QueueRepeat), watchOf(QueueFailure)}
}

// Env is what an experiment runs against.
type Env struct {
	Etcd     *clientv3.Client
	Queue    *queueclient.Client
	Observer *observerclient.Client
	// ObserverAddr names the observer in errors.
	ObserverAddr string
	// Log receives progress at debug level and cleanup failures as
	// warnings; nil discards.
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

// ErrNoRule means the observer has no rule that sends an experiment's
// prefix to its queue, so the Baton arm would never see a change.
var ErrNoRule = errors.New("the observer lacks the experiment's rule")

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

// checkRule refuses to start unless the observer's Status lists w among the
// rules in force.
func checkRule(ctx context.Context, e Env, w Watch) error {
	st, err := e.Observer.Status(ctx)
	if err != nil {
		return err
	}
	for _, r := range st.GetRules() {
		if r.GetQueue() == w.Queue && r.GetPrefix() == w.Prefix && r.GetOwnerKind() == "" {
			return nil
		}
	}
	at := "its Status lists"
	if e.ObserverAddr != "" {
		at = "the observer at " + e.ObserverAddr + " lists"
	}
	return fmt.Errorf("%w: %s no rule sending %s to queue %s; start it with --rules %s (make run and docker compose do), or add that rule to its rules file",
		ErrNoRule, at, w.Prefix, w.Queue, RulesFile)
}

// stats returns queue's counters; a queue never used has all zeros.
func stats(ctx context.Context, q *queueclient.Client, queue string) (*queuev1.QueueStats, error) {
	all, err := q.Stats(ctx, queue)
	if queueclient.IsNotFound(err) {
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

// observerView is the part of the observer's Status about one Watch: its
// prefix's watch (nil when the observer does not watch it) and its queue's
// outbox (nil when empty or absent).
type observerView struct {
	prefix *observerv1.PrefixStatus
	outbox *observerv1.OutboxStatus
}

func viewObserver(ctx context.Context, e Env, w Watch) (observerView, error) {
	st, err := e.Observer.Status(ctx)
	if err != nil {
		return observerView{}, err
	}
	var v observerView
	for _, p := range st.GetPrefixes() {
		if p.GetPrefix() == w.Prefix {
			v.prefix = p
		}
	}
	for _, o := range st.GetOutboxes() {
		if o.GetQueue() == w.Queue {
			v.outbox = o
		}
	}
	return v, nil
}

// events is how many watch events the observer has had under the prefix.
func (v observerView) events() uint64 { return v.prefix.GetEventsTotal() }

// describe says where the observer stands about w, for errors.
func (v observerView) describe(w Watch) string {
	if v.prefix == nil {
		return fmt.Sprintf("the observer does not watch %s", w.Prefix)
	}
	s := fmt.Sprintf("its cache of %s is at revision %d of %d, %d keys wait in its outbox for %s",
		w.Prefix, v.prefix.GetObservedRevision(), v.prefix.GetHeadRevision(), v.outbox.GetSize(), w.Queue)
	if le := v.outbox.GetLastError(); le != "" {
		s += ", its last Add failed: " + le
	}
	return s
}

// waitAnnounced waits until the observer has announced to w.Queue every
// change under w.Prefix up to etcd revision rev: its cache of the prefix
// reflects rev (the observer puts a change into its outbox before its
// observed revision moves past it), and the queue's outbox is empty. An
// observer that does not watch w.Prefix announces nothing, so there is
// nothing to wait for.
func waitAnnounced(ctx context.Context, e Env, w Watch, rev int64, d time.Duration) error {
	var last observerView
	err := waitFor(ctx, d, "the observer to announce revision "+fmt.Sprint(rev), func() (bool, error) {
		v, err := viewObserver(ctx, e, w)
		if err != nil {
			return false, err
		}
		last = v
		return v.prefix == nil || (v.prefix.GetObservedRevision() >= rev && v.outbox.GetSize() == 0), nil
	})
	if err != nil && ctx.Err() == nil && errors.Is(err, errTimeout) {
		return fmt.Errorf("after %s the observer has not announced every change under %s up to revision %d to queue %s (%s); is it watching this etcd and announcing to this queue?",
			d, w.Prefix, rev, w.Queue, last.describe(w))
	}
	return err
}

// CleanupError is a run's failure to delete its objects or forget its
// keys: what it names is left for `batonctl experiment clean`.
type CleanupError struct{ Err error }

func (e *CleanupError) Error() string { return "cleanup: " + e.Err.Error() }
func (e *CleanupError) Unwrap() error { return e.Err }

// finish cleans up after run, when the experiment returns. A cleanup that
// fails is joined to the run's error as a *CleanupError, or, when the run
// succeeded (its result is still worth showing), logged as a warning.
func finish(e Env, run string, w Watch, err *error) {
	cerr := cleanup(e, run, w)
	if cerr == nil {
		return
	}
	if *err != nil {
		*err = errors.Join(*err, &CleanupError{Err: cerr})
		return
	}
	e.log().Warn("experiment cleanup failed; `batonctl experiment clean` removes what is left", "run", run, "err", cerr)
}

// waitCaughtUp waits, before an experiment counts the observer's watch
// events, until the observer's watch of w.Prefix has reached etcd revision
// rev: an observer that has just started lists the prefix and replays its
// history first, and a change it learns that way is announced but is no
// watch event.
func waitCaughtUp(ctx context.Context, e Env, w Watch, rev int64) error {
	return waitAnnounced(ctx, e, w, rev, 30*time.Second)
}

// cleanupTimeout bounds a run's cleanup and Clean's wait for the observer.
const cleanupTimeout = 30 * time.Second

// cleanup deletes a run's objects and forgets its keys in w.Queue. The
// observer announces each deleted object of the Baton arm (a reconciler's cue
// to clean up after it), so the keys are forgotten only once it has. It runs
// on a fresh context so that an interrupted run (Ctrl-C) still cleans up.
func cleanup(e Env, run string, w Watch) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	if _, err := e.Etcd.Delete(ctx, Unwatched+run+"/", clientv3.WithPrefix()); err != nil {
		errs = append(errs, fmt.Errorf("delete %s: %w", Unwatched+run+"/", err))
	}
	resp, err := e.Etcd.Delete(ctx, w.Prefix+run+"/", clientv3.WithPrefix())
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("delete %s: %w", w.Prefix+run+"/", err))
	case resp.Deleted > 0:
		if err := waitAnnounced(ctx, e, w, resp.Header.Revision, cleanupTimeout); err != nil {
			errs = append(errs, fmt.Errorf("%w (keys it announces later stay in queue %s until `batonctl experiment clean`)", err, w.Queue))
		}
	}
	if _, err := forget(ctx, e.Queue, w.Queue, run+"/"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// forget forgets every key of queue that starts with keyPrefix ("" for
// all) and returns how many the queue held.
func forget(ctx context.Context, q *queueclient.Client, queue, keyPrefix string) (int, error) {
	items, err := q.List(ctx, queue, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 1000)
	if queueclient.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var keys []string
	for _, it := range items {
		if strings.HasPrefix(it.GetKey(), keyPrefix) {
			keys = append(keys, it.GetKey())
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	return q.Forget(ctx, queue, keys)
}

// Cleaned counts what Clean removed.
type Cleaned struct {
	// Objects counts the objects deleted, and ObjectsUnder them by prefix
	// (Unwatched and each Watch's).
	Objects      int64            `json:"objects"`
	ObjectsUnder map[string]int64 `json:"objects_by_prefix"`
	Keys         map[string]int   `json:"queue_keys"`
}

// Prefixes returns every prefix the experiments write under: Unwatched,
// then each Watch's.
func Prefixes() []string {
	out := []string{Unwatched}
	for _, w := range Watches() {
		out = append(out, w.Prefix)
	}
	return out
}

// Clean removes what runs that could not clean up (killed with SIGKILL, say)
// left behind: every object under Prefixes and, once the observer has
// announced their deletion, every key of the experiments' queues. It must
// not run while an experiment runs, whose objects and keys it would remove
// too.
func Clean(ctx context.Context, e Env) (*Cleaned, error) {
	out := &Cleaned{ObjectsUnder: map[string]int64{}, Keys: map[string]int{}}
	var errs []error
	resp, err := e.Etcd.Delete(ctx, Unwatched, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w", Unwatched, err)
	}
	out.ObjectsUnder[Unwatched] = resp.Deleted
	out.Objects += resp.Deleted
	for _, w := range Watches() {
		resp, err := e.Etcd.Delete(ctx, w.Prefix, clientv3.WithPrefix())
		if err != nil {
			return out, fmt.Errorf("delete %s: %w", w.Prefix, err)
		}
		out.ObjectsUnder[w.Prefix] = resp.Deleted
		out.Objects += resp.Deleted
		if resp.Deleted > 0 {
			if err := waitAnnounced(ctx, e, w, resp.Header.Revision, cleanupTimeout); err != nil {
				errs = append(errs, fmt.Errorf("%w (keys it announces later stay in queue %s; run clean again then)", err, w.Queue))
			}
		}
		n, err := forget(ctx, e.Queue, w.Queue, "")
		out.Keys[w.Queue] = n
		if err != nil {
			return out, err
		}
	}
	return out, errors.Join(errs...)
}

// object is the JSON the experiments store: a small object in Baton's
// object layout whose spec.seq says which change it is.
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
	resp, err := c.Get(ctx, Unwatched, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read etcd revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// AddOutcome is what the queue answered one Add.
type AddOutcome struct {
	Keys      int `json:"keys"`
	Queued    int `json:"queued"`
	Collapsed int `json:"collapsed"`
}

// errTimeout marks waitFor's deadline passing.
var errTimeout = errors.New("timed out")

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
			return fmt.Errorf("after %s: %s: %w", d, what, errTimeout)
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

// workerName is what a run's worker calls itself to the queue.
func workerName(run string) string { return "baton-experiment-" + run }

// round2 keeps two decimals: measured rates on a shared machine mean no more.
func round2(x float64) float64 { return math.Round(x*100) / 100 }
