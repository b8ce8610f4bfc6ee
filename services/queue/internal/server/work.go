package server

// The work stream (QueueService Work): a worker's one long-lived stream on
// one queue. Three goroutines serve it:
//
//   - the receiver reads what the worker sends into a channel;
//   - the applier takes everything waiting there at once and applies runs
//     of acks as one broker Ack (one lock, one record frame, one share of
//     a group commit), so a busy stream batches itself the way the worker
//     SDK's ack loop batches unary Acks. An ack of success is answered as
//     soon as it is applied; the others, and any ack refused (LEASE_LOST),
//     once their records are durable or the refusal is confirmed
//     (docs/design.md allows the first alone: losing it only offers the
//     key once more; a refusal from the memory of a leader deposed without
//     knowing it would make the worker drop a lease the new leader holds). A lease's slot is freed once its ack is answered,
//     not when it is applied, so the next lease never overtakes the
//     answer that made room for it. Extends are applied in runs as one
//     broker Extend;
//   - the pusher leases as many keys as the stream has free slots
//     (max_in_flight less the leases it was pushed and that are not yet
//     answered) and sends them, waiting in the broker like a long-polled
//     Lease for keys to become ready and on the applier for free slots.
//
// The handler waits for the first of them to end the stream, stops the
// others, and hands back every lease the stream still holds (broker
// Release: pending at once, attempts + 1), so a worker that goes away
// costs its keys no more than the moment it took to notice.
//
// A bad message ends the stream with INVALID_ARGUMENT naming it; the
// messages before it were applied and answered, it and those after it
// were not. Drain (from the worker) stops the pushes and ends the stream
// with OK once nothing is held; the queue shutting down does the same,
// ending it UNAVAILABLE, so the worker opens another (on another member,
// or once this one is back).

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"io"
	"sync"
	"time"
)

// workInbox is how many messages the receiver reads ahead of the applier:
// enough for a batch to build up while the applier waits for a commit.
const workInbox = 1024

// releaseTimeout bounds the hand-back of a stream's leases when it ends.
const releaseTimeout = 10 * time.Second

// errShuttingDown ends the streams of a queue that is stopping, once
// they hold nothing.
var errShuttingDown = status.Error(codes.Unavailable, "work: the queue is shutting down: every lease of this stream is answered; open another stream")

// heldLease is a lease a stream holds.
type heldLease struct {
	key   string
	token uint64
}

// workStream is one open stream.
type workStream struct {
	b      *broker.Broker
	stream queuev1.QueueService_WorkServer
	queue  string
	worker string
	holder *string
	max    int
	d      time.Duration

	sendMu sync.Mutex // gRPC allows one SendMsg at a time

	// pushCtx ends the pusher's wait for keys: at drain, or when the
	// stream ends. A grant already made is still returned, and sent.
	pushCtx    context.Context
	stopPushes context.CancelFunc

	mu sync.Mutex
	// held are the leases pushed and not yet answered. A key may be in it
	// twice: once its ack is applied, the key may be leased again (into a
	// free slot) before that ack is answered.
	held     map[heldLease]struct{}
	drain    bool          // no more pushes: the worker drained, or the queue stops
	stopping bool          // the queue stops: the stream ends UNAVAILABLE once empty
	recvErr  error         // why the receiver stopped (io.EOF: the worker closed its side)
	freed    chan struct{} // a slot freed: wakes the pusher
	finished chan error    // the first goroutine to end the stream
	finish   sync.Once
}

func (s *server) Work(stream queuev1.QueueService_WorkServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil // closed before it opened: nothing to do
	}
	if err != nil {
		return err
	}
	w, err := s.openWork(stream, first)
	if err != nil {
		return err
	}
	// The header says the stream is open: a client waits for it to tell a
	// queue that serves Work from one that answers UNIMPLEMENTED.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	s.streams.add(w)
	defer s.streams.remove(w)
	return w.run()
}

// openWork checks the first message, which must be a valid open, and
// whether this member can serve the stream.
func (s *server) openWork(stream queuev1.QueueService_WorkServer, first *queuev1.WorkRequest) (*workStream, error) {
	open := first.GetOpen()
	if open == nil {
		return nil, status.Errorf(codes.InvalidArgument, "work: the first message must be open, not %s", requestKind(first))
	}
	n, d, err := leaseParams(open.GetQueue(), open.GetWorker(), "max_in_flight", open.GetMaxInFlight(), open.GetLeaseDuration())
	if err != nil {
		return nil, err
	}
	if err := s.b.Err(); err != nil {
		return nil, ToStatus(err)
	}
	if !s.b.Leading() {
		return nil, ToStatus(broker.ErrNotLeader)
	}
	return &workStream{
		b: s.b, stream: stream, queue: open.GetQueue(), worker: open.GetWorker(), holder: holderOf(stream.Context()),
		max: n, d: d, held: map[heldLease]struct{}{}, freed: make(chan struct{}, 1), finished: make(chan error, 1),
	}, nil
}

// requestKind names a WorkRequest's message for an error.
func requestKind(m *queuev1.WorkRequest) string {
	switch m.GetRequest().(type) {
	case *queuev1.WorkRequest_Open:
		return "open"
	case *queuev1.WorkRequest_Ack:
		return "ack"
	case *queuev1.WorkRequest_Extend:
		return "extend"
	case *queuev1.WorkRequest_Drain:
		return "drain"
	}
	return "an empty message"
}

// run serves the stream until it ends, then hands back what it holds.
func (w *workStream) run() error {
	ctx, cancel := context.WithCancel(w.stream.Context())
	w.pushCtx, w.stopPushes = context.WithCancel(ctx)
	inbox := make(chan *queuev1.WorkRequest, workInbox)
	var wg sync.WaitGroup
	go w.receive(ctx, inbox) // ends with the stream, once the handler returns
	wg.Go(func() { w.apply(ctx, inbox) })
	wg.Go(func() { w.push() })
	var err error
	select {
	case err = <-w.finished:
	case <-ctx.Done():
		// The worker went away (or the server is stopping for good): what
		// it sent and the applier has not taken is dropped with it.
		err = status.FromContextError(ctx.Err()).Err()
	}
	cancel()
	wg.Wait()
	w.release()
	return err
}

// end ends the stream with err (nil: OK); the first call wins.
func (w *workStream) end(err error) {
	w.finish.Do(func() { w.finished <- err })
}

// send sends one response.
func (w *workStream) send(m *queuev1.WorkResponse) error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	return w.stream.Send(m)
}

// wake tells the pusher that a slot may be free, or that it must stop.
func (w *workStream) wake() {
	select {
	case w.freed <- struct{}{}:
	default:
	}
}

// receive reads the worker's messages into inbox until the stream ends,
// then closes it: the applier applies what was read before it ends the
// stream, so the acks a worker sent just before it closed its side (or
// lost its connection) are applied rather than their leases handed back.
func (w *workStream) receive(ctx context.Context, inbox chan<- *queuev1.WorkRequest) {
	for {
		m, err := w.stream.Recv()
		if err != nil {
			w.mu.Lock()
			w.recvErr = err
			w.mu.Unlock()
			close(inbox)
			return
		}
		select {
		case inbox <- m:
		case <-ctx.Done():
			return
		}
	}
}

// apply applies the worker's messages in order, each run of acks or of
// extends at once. When the worker's side is done it ends the stream:
// with OK if the worker closed it, else with the receiver's error.
func (w *workStream) apply(ctx context.Context, inbox <-chan *queuev1.WorkRequest) {
	batch := make([]*queuev1.WorkRequest, 0, 64)
	for {
		select {
		case m, ok := <-inbox:
			if !ok {
				w.mu.Lock()
				err := w.recvErr
				w.mu.Unlock()
				if errors.Is(err, io.EOF) {
					err = nil
				}
				w.end(err)
				return
			}
			batch = append(batch[:0], m)
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < limits.MaxBatch {
			select {
			case m, ok := <-inbox:
				if !ok {
					break more // the next turn ends the stream
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		if err := w.applyBatch(ctx, batch); errors.Is(err, errDrained) {
			w.end(nil)
			return
		} else if err != nil {
			w.end(err)
			return
		}
		clear(batch)
	}
}

// applyBatch applies consecutive messages: each maximal run of acks as one
// Ack, each run of extends of one duration as one Extend.
func (w *workStream) applyBatch(ctx context.Context, batch []*queuev1.WorkRequest) error {
	for i := 0; i < len(batch); {
		switch batch[i].GetRequest().(type) {
		case *queuev1.WorkRequest_Ack:
			j := i
			for j < len(batch) && batch[j].GetAck() != nil {
				j++
			}
			if err := w.acks(ctx, batch[i:j]); err != nil {
				return err
			}
			i = j
		case *queuev1.WorkRequest_Extend:
			j := i + 1
			for j < len(batch) && batch[j].GetExtend() != nil && sameDuration(batch[j].GetExtend(), batch[i].GetExtend()) {
				j++
			}
			if err := w.extends(ctx, batch[i:j]); err != nil {
				return err
			}
			i = j
		case *queuev1.WorkRequest_Drain:
			if w.stopPushing(false) {
				return errDrained
			}
			i++
		default:
			return status.Errorf(codes.InvalidArgument, "work: %s after the stream is open: only ack, extend and drain may follow open", requestKind(batch[i]))
		}
	}
	return nil
}

// errDrained ends a stream whose worker drained it, with OK.
var errDrained = errors.New("work: drained")

func sameDuration(a, b *queuev1.WorkExtend) bool {
	return a.GetLeaseDuration().AsDuration() == b.GetLeaseDuration().AsDuration()
}

// acks applies a run of ack messages as one broker Ack. Messages up to a
// bad one are applied; the bad one ends the stream.
func (w *workStream) acks(ctx context.Context, run []*queuev1.WorkRequest) error {
	items := make([]broker.AckItem, 0, len(run))
	var bad error
	for _, m := range run {
		it, err := ackItem("ack", m.GetAck())
		if err != nil {
			bad = err
			break
		}
		items = append(items, it)
	}
	if len(items) > 0 {
		if err := w.applyAcks(ctx, items); err != nil {
			return err
		}
	}
	return bad
}

// applyAcks applies items and answers them, the accepted successes at
// once and the others once durable (or, refused, confirmed), freeing the slot of each lease the stream was
// pushed once its answer is sent: a lease is held until its ack is
// answered (docs/design.md), so with max_in_flight 1 the answer comes
// before the next lease. A failure once they are applied ends the stream
// holding none of items: their leases are no longer live, so the
// hand-back has nothing of theirs to give back.
func (w *workStream) applyAcks(ctx context.Context, items []broker.AckItem) error {
	ok, durable, err := w.b.AckNoWait(w.queue, w.holder, items)
	if err != nil {
		return ToStatus(err)
	}
	now := make([]broker.AckItem, 0, len(items))
	var (
		later   []broker.AckItem
		okLater []bool
	)
	for i, it := range items {
		if !ok[i] || it.Outcome != (workqueue.Outcome{}) {
			later = append(later, it)
			okLater = append(okLater, ok[i])
			continue
		}
		if err := w.sendAck(it.Key, true); err != nil {
			w.forget(items)
			return err
		}
		now = append(now, it)
	}
	// The pusher may fill these slots while the others wait for the disk.
	w.answered(now)
	if len(later) > 0 {
		if err := durable(ctx); err != nil {
			w.forget(later)
			return ToStatus(err)
		}
		for i, it := range later {
			if err := w.sendAck(it.Key, okLater[i]); err != nil {
				w.forget(later)
				return err
			}
		}
		w.answered(later)
	}
	w.endIfDrained() // after the answers: ending the stream drops what is unsent
	return nil
}

func (w *workStream) sendAck(key string, ok bool) error {
	return w.send(&queuev1.WorkResponse{Response: &queuev1.WorkResponse_AckResult{AckResult: &queuev1.AckResult{Key: key, Status: ackStatus(ok)}}})
}

// answered frees the slots of the leases among items this stream holds,
// once their answers are sent: an answered ack ends the worker's hold
// whatever its status.
func (w *workStream) answered(items []broker.AckItem) {
	if w.forget(items) {
		w.wake()
	}
}

// forget drops the leases among items from what the stream holds, and
// reports whether it held any. Alone (without answered's wake) it is for
// a stream that is ending: nothing more is to be pushed into it.
func (w *workStream) forget(items []broker.AckItem) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.held)
	for _, it := range items {
		delete(w.held, heldLease{it.Key, it.Token})
	}
	return len(w.held) < n
}

// endIfDrained ends a stream that pushes no more once it holds nothing:
// with OK after the worker's drain, UNAVAILABLE when the queue stops.
func (w *workStream) endIfDrained() {
	w.mu.Lock()
	drained, stopping := w.drain && len(w.held) == 0, w.stopping
	w.mu.Unlock()
	switch {
	case drained && stopping:
		w.end(errShuttingDown)
	case drained:
		w.end(nil)
	}
}

// extends applies a run of extends of one duration as one broker Extend.
func (w *workStream) extends(ctx context.Context, run []*queuev1.WorkRequest) error {
	d, err := duration("extend.lease_duration", run[0].GetExtend().GetLeaseDuration(), limits.MaxLease)
	if err != nil {
		return err
	}
	refs := make([]broker.AckItem, 0, len(run))
	var bad error
	for _, m := range run {
		l := m.GetExtend().GetLease()
		if !limits.ValidKey(l.GetKey()) {
			bad = invalid(fmt.Errorf("extend: %w", limits.CheckKey("lease.key", l.GetKey())))
			break
		}
		refs = append(refs, broker.AckItem{Key: l.GetKey(), Token: l.GetToken()})
	}
	if len(refs) > 0 {
		exp, err := w.b.Extend(ctx, w.queue, w.holder, refs, d)
		if err != nil {
			return ToStatus(err)
		}
		var lost []broker.AckItem
		for i, r := range refs {
			res := &queuev1.ExtendResult{Key: r.Key, Status: ackStatus(exp[i] != 0)}
			if exp[i] != 0 {
				res.ExpiresAt = ts(exp[i])
			} else {
				lost = append(lost, r)
			}
			if err := w.send(&queuev1.WorkResponse{Response: &queuev1.WorkResponse_ExtendResult{ExtendResult: res}}); err != nil {
				return err
			}
		}
		// A lost lease is no longer the worker's to ack: its slot is free.
		w.answered(lost)
		w.endIfDrained()
	}
	return bad
}

// push leases keys into the stream's free slots until it ends.
func (w *workStream) push() {
	for {
		free := w.waitFree()
		if free == 0 {
			return
		}
		grants, err := w.b.LeaseStream(w.pushCtx, w.queue, broker.LeaseOptions{Worker: w.worker, Holder: w.holder, Max: free, Duration: w.d})
		if err != nil {
			if w.pushCtx.Err() == nil {
				w.end(ToStatus(err))
			}
			return
		}
		w.mu.Lock()
		for _, g := range grants {
			w.held[heldLease{g.Key, g.Token}] = struct{}{}
		}
		w.mu.Unlock()
		rev := w.b.Revision(w.queue) // as Lease's: after the grants
		for _, g := range grants {
			if err := w.send(&queuev1.WorkResponse{Response: &queuev1.WorkResponse_Lease{Lease: lease(g, rev)}}); err != nil {
				w.end(err)
				return
			}
		}
		if len(grants) == 0 && w.pushCtx.Err() == nil {
			// Only a queue that is shutting down answers a stream's wait
			// with nothing.
			w.stopPushing(true)
			return
		}
	}
}

// waitFree waits until the stream has a free slot and returns how many,
// or 0 once it must push no more.
func (w *workStream) waitFree() int {
	for {
		select {
		case <-w.b.Draining():
			w.stopPushing(true)
			return 0
		case <-w.pushCtx.Done():
			return 0
		default:
		}
		w.mu.Lock()
		free := w.max - len(w.held)
		w.mu.Unlock()
		if free > 0 {
			return free
		}
		select {
		case <-w.freed:
		case <-w.b.Draining():
		case <-w.pushCtx.Done():
		}
	}
}

// stopPushing stops the pushes, for a worker's drain or, when stopping,
// for the queue's shutdown, and ends the stream at once if it holds
// nothing (reporting that for a drain); otherwise the ack that answers
// its last lease ends it.
func (w *workStream) stopPushing(stopping bool) (empty bool) {
	w.mu.Lock()
	w.drain = true
	w.stopping = w.stopping || stopping
	empty = len(w.held) == 0
	w.mu.Unlock()
	w.stopPushes()
	if empty && stopping {
		w.end(errShuttingDown)
	}
	return empty
}

// release hands back every lease the stream still holds.
func (w *workStream) release() {
	w.mu.Lock()
	items := make([]broker.AckItem, 0, len(w.held))
	for l := range w.held {
		items = append(items, broker.AckItem{Key: l.key, Token: l.token})
	}
	clear(w.held)
	w.mu.Unlock()
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// Errors are the broker's to report: a member that no longer leads has
	// nothing to hand back (its successor offers every key again), and a
	// store that failed stops the process.
	_, _ = w.b.Release(ctx, w.queue, w.holder, items)
}

// lease converts a grant for the wire.
func lease(g workqueue.Grant, minRev int64) *queuev1.Lease {
	return &queuev1.Lease{Key: g.Key, Token: g.Token, Attempt: g.Attempt, MinRevision: minRev,
		ExpiresAt: timestamppb.New(time.Unix(0, g.ExpiresAt)), PendingSince: timestamppb.New(time.Unix(0, g.PendingSince))}
}
