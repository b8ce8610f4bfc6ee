package experiment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/sdk/reconcile"
)

// BurstOptions sets the speeds of one burst.
type BurstOptions struct {
	// Discover is how many changes per second are written to etcd.
	Discover float64
	// Execute is how many reconciles per second the one worker finishes:
	// each reconcile reads its object and then works until 1/Execute has
	// passed since the previous one ended (see pacer).
	Execute float64
	// Duration is how long changes keep arriving.
	Duration time.Duration
	// Keys, if positive, makes the changes cycle over that many objects, so
	// the same object changes again before it is reconciled; 0 makes every
	// change a new object.
	Keys int
}

// Validate names the first bad option.
func (o BurstOptions) Validate() error {
	switch {
	case o.Discover <= 0:
		return errors.New("discover: must be a positive rate")
	case o.Execute <= 0:
		return errors.New("execute: must be a positive rate")
	case o.Duration <= 0:
		return errors.New("duration: must be positive")
	case o.Duration > 10*time.Minute:
		return errors.New("duration: at most 10m")
	case o.Keys < 0:
		return errors.New("keys: must not be negative")
	case o.Discover*o.Duration.Seconds() > 100_000:
		return errors.New("discover × duration: at most 100,000 changes")
	}
	return nil
}

// BurstArm is one architecture's row of the investigation's table.
type BurstArm struct {
	// Architecture is "direct reaction" or "baton".
	Architecture string `json:"architecture"`
	// Changes is how many changes were written to etcd (every one a watch
	// event: discovered).
	Changes int `json:"changes"`
	// WindowSeconds is how long the run lasted: the duration, or longer if
	// etcd took longer to accept the writes.
	WindowSeconds float64 `json:"window_seconds"`
	// DiscoveredPerSecond is Changes / WindowSeconds.
	DiscoveredPerSecond float64 `json:"discovered_per_second"`
	// Completed is how many reconciles finished by the end of the window
	// (the one in flight then is allowed to finish).
	Completed int `json:"completed"`
	// CompletedPerSecond is Completed / WindowSeconds.
	CompletedPerSecond float64 `json:"completed_per_second"`
	// Backlog is the work discovered and not done when the run ended.
	Backlog int `json:"backlog"`
	// HeldBy says who holds the backlog: "nobody" or "the queue".
	HeldBy string `json:"held_by"`
	// HandlerSaw (direct reaction) is how many watch events the handler had
	// taken by the end: it takes the next one only after reconciling.
	HandlerSaw int `json:"handler_saw,omitempty"`
	// Observed (Baton) is how many watch events the observer received for
	// the changes (its Status' events_total under the prefix).
	Observed int `json:"observed,omitempty"`
	// Announced (Baton) is how many keys the observer sent in its Adds
	// (the queue's adds_total), ObserverMerged how many changes its outbox
	// merged into a key still waiting there first (Observed − Announced),
	// and Queued how many of the Adds made new work.
	Announced      int `json:"announced,omitempty"`
	ObserverMerged int `json:"observer_merged,omitempty"`
	Queued         int `json:"queued,omitempty"`
	// Collapsed is how many changes made no new work: merged by the
	// observer, or collapsed by the queue into a key already waiting (its
	// collapsed_total). Queued + Collapsed = Observed.
	Collapsed int `json:"collapsed"`
	// QueueDepth (Baton) is the queue's depth after the run, from Stats.
	QueueDepth *Depth `json:"queue_depth,omitempty"`
}

// BurstResult is one run of the burst experiment.
type BurstResult struct {
	Experiment string       `json:"experiment"`
	RunID      string       `json:"run_id"`
	Options    BurstOptions `json:"-"`
	Discover   float64      `json:"discover_per_second"`
	Execute    float64      `json:"execute_per_second"`
	Duration   float64      `json:"duration_seconds"`
	Keys       int          `json:"keys"`
	Queue      string       `json:"queue"`
	Direct     BurstArm     `json:"direct_reaction"`
	Baton      BurstArm     `json:"baton"`
}

// Burst writes Discover changes per second to etcd for Duration and lets one
// worker reconcile at Execute per second, first through direct reaction,
// then through Baton's observer and queue, and reports who holds the
// backlog.
func Burst(ctx context.Context, e Env, o BurstOptions) (_ *BurstResult, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	w := watchOf(QueueBurst)
	if err := checkRule(ctx, e, w); err != nil {
		return nil, err
	}
	if err := checkIdle(ctx, e.Queue, QueueBurst); err != nil {
		return nil, err
	}
	run := newRunID()
	res := &BurstResult{Experiment: "burst", RunID: run, Options: o, Discover: o.Discover, Execute: o.Execute,
		Duration: o.Duration.Seconds(), Keys: o.Keys, Queue: QueueBurst}
	defer finish(e, run, w, &err)
	if res.Direct, err = burstDirect(ctx, e, o, Unwatched+run+"/direct/", run); err != nil {
		return nil, fmt.Errorf("direct reaction: %w", err)
	}
	if res.Baton, err = burstBaton(ctx, e, o, w, run); err != nil {
		return nil, fmt.Errorf("baton: %w", err)
	}
	return res, nil
}

// pacer holds a worker to the execution rate: each reconcile ends one
// period after the later of its own start and the previous reconcile's end.
// The time a worker spends between reconciles (leasing, acking, reading)
// comes out of the period instead of adding to it, so back-to-back work
// finishes at the rate asked for, as long as that overhead fits in a period.
type pacer struct {
	period time.Duration
	next   time.Time
}

// workFor reads the object at key and then works until the pacer's next
// slot: one reconcile at the execution rate. Only one goroutine uses a pacer.
func workFor(ctx context.Context, c *clientv3.Client, key string, p *pacer) error {
	start := time.Now()
	if _, err := c.Get(ctx, key); err != nil {
		return err
	}
	end := p.next.Add(p.period)
	if p.next.Before(start) {
		end = start.Add(p.period)
	}
	p.next = end
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// burstWrites is one discovery phase: n changes written at rate.
type burstWrites struct {
	written atomic.Int64
	lastRev atomic.Int64
	err     error
}

// write puts o.Discover·o.Duration changes under prefix at the discovery
// rate and returns when all are written. Writes run concurrently (up to 64
// in flight) so that etcd's commit latency does not set the rate.
func (w *burstWrites) write(ctx context.Context, c *clientv3.Client, prefix, namespace string, o BurstOptions) {
	n := int(o.Discover * o.Duration.Seconds())
	if n < 1 {
		n = 1
	}
	sem := make(chan struct{}, 64)
	var (
		wg   sync.WaitGroup
		once sync.Once
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for i := 0; i < n && wctx.Err() == nil; {
		due := min(n, int(time.Since(start).Seconds()*o.Discover)+1)
		for ; i < due && wctx.Err() == nil; i++ {
			name := fmt.Sprintf("obj-%06d", i)
			if o.Keys > 0 {
				name = fmt.Sprintf("obj-%06d", i%o.Keys)
			}
			value := marshalObject("Experiment", namespace, name, map[string]any{"seq": i})
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				resp, err := c.Put(wctx, prefix+name, value)
				if err != nil {
					once.Do(func() { w.err = fmt.Errorf("write %s: %w", prefix+name, err); cancel() })
					return
				}
				w.written.Add(1)
				for {
					old := w.lastRev.Load()
					if resp.Header.Revision <= old || w.lastRev.CompareAndSwap(old, resp.Header.Revision) {
						break
					}
				}
			})
		}
		select {
		case <-wctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
	wg.Wait()
}

// burstDirect is the direct-reaction run: the watch handler reconciles each
// event before it takes the next.
func burstDirect(ctx context.Context, e Env, o BurstOptions, prefix, run string) (BurstArm, error) {
	arm := BurstArm{Architecture: "direct reaction", HeldBy: "nobody"}
	rev, err := revisionNow(ctx, e.Etcd)
	if err != nil {
		return arm, err
	}
	pace := &pacer{period: time.Duration(float64(time.Second) / o.Execute)}
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	wch := e.Etcd.Watch(hctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	var (
		stopping        atomic.Bool
		saw, completed  atomic.Int64
		handlerErr      error
		handlerFinished = make(chan struct{})
	)
	go func() {
		defer close(handlerFinished)
		for resp := range wch {
			for _, ev := range resp.Events {
				if stopping.Load() {
					return
				}
				saw.Add(1)
				// The reconcile runs on ctx, not hctx: the one in flight
				// when the run ends may finish.
				if err := workFor(ctx, e.Etcd, string(ev.Kv.Key), pace); err != nil {
					handlerErr = err
					return
				}
				completed.Add(1)
			}
		}
	}()

	start := time.Now()
	var w burstWrites
	w.write(ctx, e.Etcd, prefix, run, o)
	if w.err != nil {
		return arm, w.err
	}
	if rest := o.Duration - time.Since(start); rest > 0 {
		sleepCtx(ctx, rest)
	}
	window := time.Since(start)
	stopping.Store(true)
	hcancel()
	<-handlerFinished
	if handlerErr != nil && ctx.Err() == nil {
		return arm, handlerErr
	}
	arm.Changes = int(w.written.Load())
	arm.WindowSeconds = round2(window.Seconds())
	arm.DiscoveredPerSecond = round2(float64(arm.Changes) / window.Seconds())
	arm.Completed = int(completed.Load())
	arm.CompletedPerSecond = round2(float64(arm.Completed) / window.Seconds())
	arm.Backlog = arm.Changes - arm.Completed
	arm.HandlerSaw = int(saw.Load())
	return arm, ctx.Err()
}

// burstBaton is the Baton run: the changes go under w's prefix, where the
// observer announces each changed object's key to the queue, and a worker
// leases, reconciles and acks at the execution rate.
func burstBaton(ctx context.Context, e Env, o BurstOptions, w Watch, run string) (BurstArm, error) {
	arm := BurstArm{Architecture: "baton", HeldBy: "the queue"}
	prefix := w.Prefix + run + "/"
	rev, err := revisionNow(ctx, e.Etcd)
	if err != nil {
		return arm, err
	}
	if err := waitCaughtUp(ctx, e, w, rev); err != nil {
		return arm, err
	}
	before, err := stats(ctx, e.Queue, QueueBurst)
	if err != nil {
		return arm, err
	}
	obsBefore, err := viewObserver(ctx, e, w)
	if err != nil {
		return arm, err
	}
	// One worker (Concurrency 1) calls the reconciler, so one pacer serves.
	pace := &pacer{period: time.Duration(float64(time.Second) / o.Execute)}
	var completed atomic.Int64
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		name := strings.TrimPrefix(req.Key, run+"/")
		if err := workFor(ctx, e.Etcd, prefix+name, pace); err != nil {
			return reconcile.Result{}, err
		}
		completed.Add(1)
		return reconcile.Result{}, nil
	})
	wk, err := startWorker(ctx, e, QueueBurst, workerName(run), rec)
	if err != nil {
		return arm, err
	}

	start := time.Now()
	var wr burstWrites
	wr.write(ctx, e.Etcd, prefix, run, o)
	if wr.err != nil {
		_ = wk.stop()
		return arm, wr.err
	}
	if rest := o.Duration - time.Since(start); rest > 0 {
		sleepCtx(ctx, rest)
	}
	window := time.Since(start)
	if err := wk.stop(); err != nil {
		return arm, err
	}
	// Discovery never waited on the worker; let the observer finish
	// announcing the changes etcd has committed before reading the queue.
	if err := waitAnnounced(ctx, e, w, wr.lastRev.Load(), 60*time.Second); err != nil {
		return arm, err
	}
	after, err := stats(ctx, e.Queue, QueueBurst)
	if err != nil {
		return arm, err
	}
	obsAfter, err := viewObserver(ctx, e, w)
	if err != nil {
		return arm, err
	}
	d := depthOf(after)
	arm.Changes = int(wr.written.Load())
	arm.WindowSeconds = round2(window.Seconds())
	arm.DiscoveredPerSecond = round2(float64(arm.Changes) / window.Seconds())
	arm.Completed = int(completed.Load())
	arm.CompletedPerSecond = round2(float64(arm.Completed) / window.Seconds())
	arm.Backlog = int(d.Total())
	arm.QueueDepth = &d
	arm.Observed = int(obsAfter.events() - obsBefore.events())
	arm.Announced = int(after.GetAddsTotal() - before.GetAddsTotal())
	queueCollapsed := int(after.GetCollapsedTotal() - before.GetCollapsedTotal())
	arm.ObserverMerged = arm.Observed - arm.Announced
	arm.Queued = arm.Announced - queueCollapsed
	arm.Collapsed = arm.ObserverMerged + queueCollapsed
	return arm, nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
