package experiment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/reconcile"
)

// FailureOptions sets the failure experiment.
type FailureOptions struct {
	// Replicas is how many pods the set needs (3).
	Replicas int
	// Failures is how many reconcile attempts have a write refused: in each
	// of the first Failures attempts, the attempt's second pod creation is
	// refused, so it creates one pod and fails.
	Failures int
}

// Validate names the first bad option.
func (o FailureOptions) Validate() error {
	switch {
	case o.Replicas < 2 || o.Replicas > 100:
		return errors.New("replicas: must be 2 to 100 (a failure needs a second write)")
	case o.Failures < 1 || o.Failures > 10:
		return errors.New("failures: must be 1 to 10")
	case o.Failures > o.Replicas-1:
		return fmt.Errorf("failures: at most replicas-1 (%d): each failed attempt creates one pod", o.Replicas-1)
	}
	return nil
}

// FailureStep is one reconcile attempt of the Baton run.
type FailureStep struct {
	// Attempt counts from 1.
	Attempt int `json:"attempt"`
	// AtMS is when it started, in milliseconds after the set was created.
	AtMS float64 `json:"at_ms"`
	// Item is the key's queue item as Inspect showed it when the attempt
	// started (LEASED; attempts = failures so far; last_error = the
	// previous failure).
	Item       ItemView `json:"inspect"`
	PodsBefore int      `json:"pods_before"`
	PodsAfter  int      `json:"pods_after"`
	// Error is the attempt's error; empty when it succeeded.
	Error string `json:"error,omitempty"`
}

// FailureArm is one architecture's outcome.
type FailureArm struct {
	Architecture string `json:"architecture"`
	// Attempts is how many reconciles ran.
	Attempts int `json:"attempts"`
	// Pods is how many of the Replicas pods exist at the end.
	Pods int `json:"pods"`
	// Error is the direct-reaction handler's error, logged and gone.
	Error string `json:"error,omitempty"`
	// RemainingWork says who still holds the unfinished work.
	RemainingWork string `json:"remaining_work"`
	// Steps (Baton) is every attempt, and Final the key's item after the
	// last one.
	Steps []FailureStep `json:"steps,omitempty"`
	Final *ItemView     `json:"final_inspect,omitempty"`
}

// FailureResult is one run of the failure experiment.
type FailureResult struct {
	Experiment string     `json:"experiment"`
	RunID      string     `json:"run_id"`
	Queue      string     `json:"queue"`
	Key        string     `json:"key"`
	Replicas   int        `json:"replicas"`
	Failures   int        `json:"injected_failures"`
	Direct     FailureArm `json:"direct_reaction"`
	Baton      FailureArm `json:"baton"`
	// DirectCheckedAfterMS is how long after the direct handler returned its
	// pods were counted (at least as long as Baton took to converge).
	DirectCheckedAfterMS float64 `json:"direct_checked_after_ms"`
}

// errRefused is the injected fault: the write the API server would refuse
// while it is unavailable.
var errRefused = errors.New("write refused: the API server is unavailable (fault injected by the experiment)")

// podSet is a reconciler of one invariant, "the set has Replicas pods",
// whose first Failures attempts each have their second write refused.
type podSet struct {
	etcd     *clientv3.Client
	prefix   string // the arm's prefix; pods live under prefix+"pods/"
	replicas int
	failures int

	mu    sync.Mutex
	calls int
}

// reconcile creates the missing pods, one compare-and-swap create each.
func (p *podSet) reconcile(ctx context.Context) error {
	p.mu.Lock()
	p.calls++
	attempt := p.calls
	p.mu.Unlock()
	writes := 0
	for i := range p.replicas {
		key := fmt.Sprintf("%spods/web-%d", p.prefix, i)
		resp, err := p.etcd.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count > 0 {
			continue
		}
		writes++
		if attempt <= p.failures && writes == 2 {
			return fmt.Errorf("create pod web-%d: %w", i, errRefused)
		}
		pod := marshalObject("Pod", "experiments", fmt.Sprintf("web-%d", i), map[string]any{"image": "nginx:1.27"})
		if _, err := p.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, pod)).Commit(); err != nil {
			return fmt.Errorf("create pod web-%d: %w", i, err)
		}
	}
	return nil
}

func (p *podSet) attempts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *podSet) pods(ctx context.Context) (int, error) {
	resp, err := p.etcd.Get(ctx, p.prefix+"pods/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// Failure creates a set that needs Replicas pods, reconciled by a
// reconciler whose write is refused half-way, once through direct reaction
// and once through Baton, and reports how many pods each ends with.
func Failure(ctx context.Context, e Env, o FailureOptions) (_ *FailureResult, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	w := watchOf(QueueFailure)
	if err := checkRule(ctx, e, w); err != nil {
		return nil, err
	}
	if err := checkIdle(ctx, e.Queue, QueueFailure); err != nil {
		return nil, err
	}
	run := newRunID()
	// The Baton arm's set is the one object the observer watches; the
	// direct arm's set and both arms' pods are unwatched.
	directSet, batonSet := Unwatched+run+"/direct/sets/web", w.Prefix+run+"/web"
	directPrefix, batonPrefix := Unwatched+run+"/direct/", Unwatched+run+"/baton/"
	qkey := run + "/web"
	res := &FailureResult{Experiment: "failure", RunID: run, Queue: QueueFailure, Key: qkey, Replicas: o.Replicas, Failures: o.Failures,
		Direct: FailureArm{Architecture: "direct reaction"}, Baton: FailureArm{Architecture: "baton"}}
	defer finish(e, run, w, &err)
	rev, err := revisionNow(ctx, e.Etcd)
	if err != nil {
		return nil, err
	}
	direct := &podSet{etcd: e.Etcd, prefix: directPrefix, replicas: o.Replicas, failures: o.Failures}
	baton := &podSet{etcd: e.Etcd, prefix: batonPrefix, replicas: o.Replicas, failures: o.Failures}

	// Direct reaction: one event, one reconcile; an error is logged and the
	// handler returns.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	type handled struct {
		err error
		at  time.Time
	}
	directDone := make(chan handled, 1)
	wch := e.Etcd.Watch(hctx, directSet, clientv3.WithRev(rev+1))
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					err := direct.reconcile(ctx)
					e.log().Debug("direct reaction handler returned", "err", err)
					select {
					case directDone <- handled{err: err, at: time.Now()}:
					default:
					}
				}
			}
		}
	}()

	// Baton: the observer Adds the set's key; the worker retries it until
	// the reconcile succeeds, and records Inspect at each attempt.
	var (
		mu      sync.Mutex
		steps   []FailureStep
		created time.Time
	)
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		item, err := e.Queue.Inspect(ctx, QueueFailure, req.Key)
		if err != nil {
			return reconcile.Result{}, err
		}
		before, err := baton.pods(ctx)
		if err != nil {
			return reconcile.Result{}, err
		}
		mu.Lock()
		at := time.Since(created)
		mu.Unlock()
		recErr := baton.reconcile(ctx)
		after, err := baton.pods(ctx)
		if err != nil {
			return reconcile.Result{}, err
		}
		step := FailureStep{Attempt: baton.attempts(), AtMS: float64(at.Microseconds()) / 1000, Item: viewOf(item), PodsBefore: before, PodsAfter: after}
		if recErr != nil {
			step.Error = recErr.Error()
		}
		mu.Lock()
		steps = append(steps, step)
		mu.Unlock()
		return reconcile.Result{}, recErr
	})
	wk, err := startWorker(ctx, e, QueueFailure, workerName(run), rec)
	if err != nil {
		return nil, err
	}
	defer func() { _ = wk.stop() }()

	set := func(name string) string {
		return marshalObject("PodSet", run, name, map[string]any{"replicas": o.Replicas})
	}
	mu.Lock()
	created = time.Now()
	mu.Unlock()
	if _, err := e.Etcd.Put(ctx, directSet, set("web")); err != nil {
		return nil, err
	}
	if _, err := e.Etcd.Put(ctx, batonSet, set("web")); err != nil {
		return nil, err
	}

	var d handled
	select {
	case d = <-directDone:
	case <-time.After(30 * time.Second):
		return nil, errors.New("after 30s: the direct-reaction handler did not run")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if d.err != nil {
		res.Direct.Error = d.err.Error()
	}
	var last *queuev1.Item
	err = waitFor(ctx, 60*time.Second, "Baton to create every pod and the queue to forget the key", func() (bool, error) {
		it, err := e.Queue.Inspect(ctx, QueueFailure, qkey)
		if err != nil {
			return false, err
		}
		if it.GetState() == queuev1.ItemState_ITEM_STATE_PARKED {
			return false, fmt.Errorf("the queue parked %s after %d failed attempts (it runs with --max-attempts); run with fewer --failures", qkey, it.GetAttempts())
		}
		last = it
		if it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
			return false, nil
		}
		n, err := baton.pods(ctx)
		return n >= o.Replicas, err
	})
	if errors.Is(err, errTimeout) && baton.attempts() == 0 && last.GetState() == queuev1.ItemState_ITEM_STATE_ABSENT {
		// The key never reached the queue.
		v, verr := viewObserver(ctx, e, w)
		if verr != nil {
			return nil, errors.Join(err, verr)
		}
		return nil, fmt.Errorf("%w: the observer never announced %s (%s); is it watching this etcd and announcing to this queue?", err, qkey, v.describe(w))
	}
	if err != nil {
		return nil, err
	}
	final, err := e.Queue.Inspect(ctx, QueueFailure, qkey)
	if err != nil {
		return nil, err
	}
	fv := viewOf(final)
	res.Baton.Final = &fv
	if err := wk.stop(); err != nil {
		return nil, err
	}
	// Give direct reaction a fair chance to heal: nothing in it will, but
	// count its pods only after a second of quiet.
	sleepCtx(ctx, time.Second-time.Since(d.at))
	res.DirectCheckedAfterMS = float64(time.Since(d.at).Milliseconds())
	if res.Direct.Pods, err = direct.pods(ctx); err != nil {
		return nil, err
	}
	res.Direct.Attempts = direct.attempts()
	if res.Direct.Pods < o.Replicas {
		res.Direct.RemainingWork = fmt.Sprintf("nobody (%d of %d pods missing)", o.Replicas-res.Direct.Pods, o.Replicas)
	} else {
		res.Direct.RemainingWork = "none"
	}
	if res.Baton.Pods, err = baton.pods(ctx); err != nil {
		return nil, err
	}
	res.Baton.Attempts = baton.attempts()
	res.Baton.RemainingWork = "none left (the queue held it until success)"
	mu.Lock()
	res.Baton.Steps = append([]FailureStep(nil), steps...)
	mu.Unlock()
	return res, nil
}
