package manager

// Unary calls: a controller's keys from long-polled Lease calls, their
// outcomes coalesced into Ack calls, their leases kept by Extend calls;
// what a runner does when told to (Options.UnaryCalls) or when the queue
// does not serve the work stream.

import (
	"context"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
)

// runUnary runs the controller with Lease, Ack and Extend calls.
func (r *runner) runUnary(ctx context.Context) {
	// Reconciles outlive ctx by up to the grace period, so their contexts
	// derive from one that only the end of the grace period cancels.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	stopBg := r.stop
	var bg sync.WaitGroup
	bg.Go(func() { r.heartbeat(stopBg, r.extendUnary) })
	ackDone := make(chan struct{})
	go func() { defer close(ackDone); r.ackLoop(stopBg) }()

	var work sync.WaitGroup
	workers := newPool(r.c.Concurrency, &work)
	r.lease(ctx, workCtx, workers)
	workers.close()

	// Shutdown: wait for in-flight reconciles within the grace period.
	done := make(chan struct{})
	go func() { work.Wait(); close(done) }()
	t := time.NewTimer(r.grace)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		r.abandoned.Store(true)
		r.mu.Lock()
		n := len(r.inflight)
		r.mu.Unlock()
		r.log.Warn("grace period over, leaving leases to lapse", "in_flight", n)
		cancelWork()
	}
	close(stopBg) // the ack loop flushes what it holds, then returns
	<-ackDone
	bg.Wait()
}

// lease is the leasing loop: it holds one slot per worker goroutine and asks
// the queue for as many keys as it has free slots.
func (r *runner) lease(ctx, workCtx context.Context, workers *pool) {
	slots := make(chan struct{}, r.c.Concurrency)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		n := 1
	more:
		for n < r.c.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		leases, err := r.q.Lease(ctx, r.c.Name, queueclient.LeaseOptions{
			Worker: r.worker, MaxItems: n, Duration: r.c.LeaseDuration, Wait: r.c.PollWait,
		})
		for range n - len(leases) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.failures.Warn(cause("lease", err), "lease failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, l := range leases {
			jctx, cancel := context.WithTimeout(workCtx, r.c.ReconcileTimeout)
			j := &job{lease: l, cancel: cancel}
			r.mu.Lock()
			r.inflight[l.Key] = j
			r.mu.Unlock()
			workers.run(func() {
				defer func() { <-slots }()
				r.process(jctx, j)
			})
		}
	}
}

// process reconciles one leased key and hands its outcome to the ack loop.
func (r *runner) process(ctx context.Context, j *job) {
	out, ok := r.reconcile(ctx, j)
	if !ok {
		r.forget(j)
		return
	}
	select {
	case r.acks <- ack{job: j, outcome: out}:
	case <-r.stop:
		// The ack loop has finished (grace period over): let it lapse.
		r.forget(j)
	}
}

// ackLoop coalesces outcomes into Ack calls until stop is closed, then acks
// what remains queued and returns.
func (r *runner) ackLoop(stop <-chan struct{}) {
	var batch []ack
	for {
		select {
		case a := <-r.acks:
			batch = append(batch[:0], a)
		case <-stop:
			// Everything that will ever send has finished (or been
			// abandoned and does not send).
			var rest []ack
			for {
				select {
				case a := <-r.acks:
					rest = append(rest, a)
				default:
					if len(rest) > 0 {
						r.send(rest)
					}
					return
				}
			}
		}
		t := time.NewTimer(r.c.AckDelay)
	collect:
		for len(batch) < limits.MaxBatch {
			select {
			case a := <-r.acks:
				batch = append(batch, a)
			case <-t.C:
				break collect
			}
		}
		t.Stop()
		r.send(batch)
	}
}

// send acks one batch. An Ack that fails after the client's retries is
// logged; the leases then lapse and the keys are offered again, which is
// safe because reconciles are level-based.
func (r *runner) send(batch []ack) {
	acks := make([]queueclient.Ack, len(batch))
	for i, a := range batch {
		acks[i] = queueclient.Ack{Key: a.job.lease.Key, Token: a.job.lease.Token, Outcome: a.outcome}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	results, err := r.q.Ack(ctx, r.c.Name, acks)
	cancel()
	if err != nil {
		r.failures.Warn(cause("ack", err), "ack failed; leases will lapse", "keys", len(acks), "err", err)
	}
	for i, a := range batch {
		if i < len(results) && results[i].Status == queueclient.LeaseLost {
			r.log.Info("ack refused: lease lost", "key", a.job.lease.Key)
		}
		r.forget(a.job)
	}
}

// extendUnary extends every held lease in one Extend call, and cancels the
// reconciles of those the queue says are lost.
func (r *runner) extendUnary() {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.inflight))
	for _, j := range r.inflight {
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	refs := make([]queueclient.LeaseRef, len(jobs))
	for i, j := range jobs {
		refs[i] = queueclient.LeaseRef{Key: j.lease.Key, Token: j.lease.Token}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.c.LeaseDuration/3)
	results, err := r.q.Extend(ctx, r.c.Name, refs, r.c.LeaseDuration)
	cancel()
	if err != nil {
		r.failures.Warn(cause("extend", err), "extend failed", "keys", len(refs), "err", err)
		return
	}
	for i, res := range results {
		if i < len(jobs) && res.Status == queueclient.LeaseLost {
			j := jobs[i]
			j.lost.Store(true)
			j.cancel()
			r.log.Warn("lease lost while reconciling; cancelled", "key", j.lease.Key)
		}
	}
}
