package manager

// The work stream: by default a controller takes its keys from one
// QueueService Work stream (client/queue's Stream) instead of long-polled
// Lease calls. The queue pushes a lease the moment a key is ready and the
// stream holds fewer than Concurrency; each reconcile's outcome is acked
// on the stream as soon as it is known (the queue batches what arrives
// together), and the heartbeat extends every held lease on it.
//
// A stream that breaks (the queue restarted, leadership moved, the
// network) takes its leases with it: the queue hands them back at once.
// So the reconciles of those leases are cancelled and not acked, as for a
// lease lost to an Extend, and a new stream is opened with a backoff.
//
// At shutdown the stream is drained: the queue pushes nothing more (a
// lease already on its way is still reconciled), the reconciles in flight
// get the grace period to finish and ack, and the queue ends the stream
// once every lease is answered. After the grace period the stream is
// closed, which hands back what it still holds.
//
// Against a queue from before the stream (UNIMPLEMENTED) the controller
// runs on unary calls instead (runUnary).

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// msgDraining is logged when a controller drains its stream at shutdown
// (the module test/sdk waits for it to know the stream drained).
const msgDraining = "draining the work stream"

// runStream runs the controller on work streams until ctx is cancelled
// and its shutdown is done. It returns ErrWorkUnsupported, with no
// reconcile running, when the queue does not serve the stream.
func (r *runner) runStream(ctx context.Context) error {
	// Reconciles outlive ctx by up to the grace period (see runUnary).
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var work sync.WaitGroup
	defer work.Wait()
	workers := newPool(r.c.Concurrency, &work)
	defer workers.close() // before work.Wait: every stream has ended by then
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		// The stream outlives ctx by the drain at shutdown, so it lives
		// on workCtx; ctx only cuts its opening short.
		sctx, cancelStream := context.WithCancel(workCtx)
		detach := context.AfterFunc(ctx, cancelStream)
		s, err := r.q.Work(sctx, r.c.Name, queueclient.WorkOptions{
			Worker: r.worker, MaxInFlight: r.c.Concurrency, LeaseDuration: r.c.LeaseDuration,
		})
		if !detach() {
			cancelStream() // shutdown came first
			return nil
		}
		if errors.Is(err, queueclient.ErrWorkUnsupported) {
			cancelStream()
			return err
		}
		if err != nil {
			cancelStream()
			r.failures.Warn(cause("open", err), "opening the work stream failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		r.serve(ctx, workCtx, cancelWork, s, workers)
		cancelStream()
	}
	return nil
}

// session is one open stream and the leases it holds.
type session struct {
	s    *queueclient.Stream
	mu   sync.Mutex
	jobs map[string]*job // by key: pushed and not yet acked
}

// take removes key's job from the session and returns it, nil if none.
func (ss *session) take(key string) *job {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	j := ss.jobs[key]
	delete(ss.jobs, key)
	return j
}

// serve runs one stream until it ends, or, once ctx is cancelled, drains
// it within the grace period.
func (r *runner) serve(ctx, workCtx context.Context, cancelWork context.CancelFunc, s *queueclient.Stream, workers *pool) {
	defer s.Close()
	ss := &session{s: s, jobs: map[string]*job{}}
	ended := make(chan error, 1)
	go func() { ended <- r.receive(workCtx, ss, workers) }()
	stopBeats := make(chan struct{})
	var beats sync.WaitGroup
	beats.Go(func() { r.heartbeat(stopBeats, func() { r.extendStreamed(ss) }) })
	defer func() {
		close(stopBeats)
		beats.Wait()
	}()

	var err error
	select {
	case err = <-ended:
	case <-ctx.Done():
		err = r.drain(ss, ended, cancelWork)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		// The queue hands back what the stream held: those reconciles are
		// no longer this worker's to finish.
		ss.mu.Lock()
		n := len(ss.jobs)
		for k, j := range ss.jobs {
			j.lost.Store(true)
			j.cancel()
			delete(ss.jobs, k)
		}
		ss.mu.Unlock()
		if ctx.Err() == nil {
			r.failures.Warn(cause("stream", err), "the work stream ended; its reconciles are cancelled and a new stream opened", "err", err, "cancelled", n)
		}
	}
}

// drain asks the queue for no more leases and waits, within the grace
// period, for the stream's end: once the reconciles in flight are acked.
// After the grace period the reconciles are cancelled and the stream
// closed (its leases handed back).
func (r *runner) drain(ss *session, ended <-chan error, cancelWork context.CancelFunc) error {
	r.log.Info(msgDraining, "grace", r.grace)
	if err := ss.s.Drain(); err != nil {
		ss.s.Close() // broken already: wait for the receiver to see it
		return <-ended
	}
	t := time.NewTimer(r.grace)
	defer t.Stop()
	select {
	case err := <-ended:
		return err
	case <-t.C:
	}
	r.abandoned.Store(true)
	ss.mu.Lock()
	n := len(ss.jobs)
	ss.mu.Unlock()
	r.log.Warn("grace period over, handing back the stream's leases", "in_flight", n)
	cancelWork()
	ss.s.Close()
	return <-ended
}

// receive handles the queue's messages until the stream ends, and returns
// why (io.EOF: the queue ended it after a drain).
func (r *runner) receive(workCtx context.Context, ss *session, workers *pool) error {
	for {
		ev, err := ss.s.Recv()
		if err != nil {
			return err
		}
		switch {
		case ev.Lease != nil:
			l := *ev.Lease
			jctx, cancel := context.WithTimeout(workCtx, r.c.ReconcileTimeout)
			j := &job{lease: l, cancel: cancel}
			ss.mu.Lock()
			ss.jobs[l.Key] = j
			ss.mu.Unlock()
			workers.run(func() { r.processStreamed(jctx, ss, j) })
		case ev.Ack != nil:
			if ev.Ack.Status == queueclient.LeaseLost {
				r.log.Info("ack refused: lease lost", "key", ev.Ack.Key)
			}
		case ev.Extend != nil && ev.Extend.Status == queueclient.LeaseLost:
			if j := ss.take(ev.Extend.Key); j != nil {
				j.lost.Store(true)
				j.cancel()
				r.log.Warn("lease lost while reconciling; cancelled", "key", ev.Extend.Key)
			}
		}
	}
}

// processStreamed reconciles one pushed key and acks its outcome on the
// stream.
func (r *runner) processStreamed(ctx context.Context, ss *session, j *job) {
	out, ok := r.reconcile(ctx, j)
	ss.mu.Lock()
	held := ss.jobs[j.lease.Key] == j
	if held {
		delete(ss.jobs, j.lease.Key)
	}
	ss.mu.Unlock()
	if !ok || !held {
		return // lost with its stream, to an Extend, or abandoned
	}
	if err := ss.s.Ack(queueclient.Ack{Key: j.lease.Key, Token: j.lease.Token, Outcome: out}); err != nil {
		// The stream broke: the queue hands the lease back.
		r.log.Info("ack not sent: the work stream ended", "key", j.lease.Key, "err", err)
	}
}

// extendStreamed extends every lease the stream holds, on the stream; the
// queue answers a lost one there (receive cancels its reconcile).
func (r *runner) extendStreamed(ss *session) {
	ss.mu.Lock()
	refs := make([]queueclient.LeaseRef, 0, len(ss.jobs))
	for _, j := range ss.jobs {
		refs = append(refs, queueclient.LeaseRef{Key: j.lease.Key, Token: j.lease.Token})
	}
	ss.mu.Unlock()
	for _, ref := range refs {
		if err := ss.s.Extend(ref, r.c.LeaseDuration); err != nil {
			return // the stream broke: serve cancels its reconciles
		}
	}
}
