package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// BatonStream adapts a baton-queue client to Queue through the work stream
// (QueueService Work, client/queue's Stream), as the worker SDK takes its
// keys: each worker name gets one stream of its own, opened by its first
// Lease, on which the queue pushes leases as keys become ready, up to
// max_in_flight held at once. Lease takes what the stream was pushed
// (waiting up to wait for the first); Ack sends one ack message per key on
// the worker's stream and returns once the queue has answered every one
// (an ack of success may be answered before it is durable: losing it only
// offers the key once more). A LEASE_LOST answer is an error, as in Baton.
//
// A stream's max_in_flight is MaxInFlight, or if that is 0 the max of the
// Lease call that opens it: in workload 1 (Cycle) the batch, so a worker
// holds at most one round's keys. Leases pushed to a worker that no longer
// leases would sit in its stream, owed to others: Leave (called by Cycle as
// each caller finishes) closes the worker's stream, which hands them back at
// once, as a worker that stops does.
type BatonStream struct {
	Client      *queueclient.Client
	Name        string
	MaxInFlight int           // per stream; 0: the max of its first Lease
	LeaseFor    time.Duration // each pushed lease's duration; 0 is a minute

	mu      sync.Mutex
	streams map[string]*workStream
	closed  bool
}

// workStream is one worker's open stream and what its reader received.
type workStream struct {
	s      *queueclient.Stream
	leases chan queueclient.Lease  // pushed, not yet taken by Lease
	acks   chan queueclient.Result // ack answers, not yet taken by Ack
	done   chan struct{}           // closed when the reader stops; err says why
	err    error
	ackMu  sync.Mutex // one Ack at a time: the answers it waits for are the next ones
}

// stream returns worker's stream, opening it if it has none.
func (b *BatonStream) stream(ctx context.Context, worker string, first int) (*workStream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("baton work stream: closed")
	}
	if w := b.streams[worker]; w != nil {
		return w, nil
	}
	inFlight := b.MaxInFlight
	if inFlight <= 0 {
		inFlight = first
	}
	inFlight = min(max(inFlight, 1), queueclient.MaxBatch)
	d := b.LeaseFor
	if d == 0 {
		d = time.Minute
	}
	// The stream outlives the call that opens it: it lasts until Leave or
	// Close (Stream.Close cancels it).
	s, err := b.Client.Work(context.WithoutCancel(ctx), b.Name, queueclient.WorkOptions{Worker: worker, MaxInFlight: inFlight, LeaseDuration: d})
	if err != nil {
		return nil, err
	}
	w := &workStream{s: s, leases: make(chan queueclient.Lease, inFlight), acks: make(chan queueclient.Result, inFlight), done: make(chan struct{})}
	go w.read()
	if b.streams == nil {
		b.streams = map[string]*workStream{}
	}
	b.streams[worker] = w
	return w, nil
}

// read receives until the stream ends. Neither channel can fill: the
// stream holds at most max_in_flight leases, each pushed once and answered
// once, and both channels have that room.
func (w *workStream) read() {
	defer close(w.done)
	for {
		ev, err := w.s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("baton work stream: ended by the queue")
			}
			w.err = err
			return
		}
		switch {
		case ev.Lease != nil:
			w.leases <- *ev.Lease
		case ev.Ack != nil:
			w.acks <- *ev.Ack
		}
	}
}

// streamLease is a Leased's handle: the stream that holds the lease.
type streamLease struct {
	w     *workStream
	token uint64
}

// Add implements Queue (a unary Add, as the observer makes).
func (b *BatonStream) Add(ctx context.Context, keys []string) error {
	_, err := b.Client.Add(ctx, b.Name, keys, queueclient.AddOptions{})
	return err
}

// Lease implements Queue: up to max of the leases pushed to worker's
// stream, waiting up to wait for the first and then taking only those
// already there.
func (b *BatonStream) Lease(ctx context.Context, worker string, max int, wait time.Duration) ([]Leased, error) {
	w, err := b.stream(ctx, worker, max)
	if err != nil {
		return nil, err
	}
	take := func(l queueclient.Lease) Leased { return Leased{Key: l.Key, handle: streamLease{w: w, token: l.Token}} }
	var out []Leased
	select {
	case l := <-w.leases:
		out = append(out, take(l))
	default:
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case l := <-w.leases:
			out = append(out, take(l))
		case <-t.C:
			return nil, nil
		case <-w.done:
			return nil, w.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for len(out) < max {
		select {
		case l := <-w.leases:
			out = append(out, take(l))
		default:
			return out, nil
		}
	}
	return out, nil
}

// Ack implements Queue: the acks go on the streams that hold the leases,
// and it returns once each is answered; a refused ack is an error.
func (b *BatonStream) Ack(ctx context.Context, _ string, ls []Leased) error {
	var order []*workStream
	by := map[*workStream][]queueclient.Ack{}
	for _, l := range ls {
		h := l.handle.(streamLease)
		if _, ok := by[h.w]; !ok {
			order = append(order, h.w)
		}
		by[h.w] = append(by[h.w], queueclient.Ack{Key: l.Key, Token: h.token, Outcome: queueclient.Success()})
	}
	for _, w := range order {
		if err := b.ackOn(ctx, w, by[w]); err != nil {
			return err
		}
	}
	return nil
}

func (b *BatonStream) ackOn(ctx context.Context, w *workStream, acks []queueclient.Ack) error {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	broken := func(err error) error {
		// Answers still owed would be taken as the next Ack's: the stream
		// is of no more use.
		w.s.Close()
		return err
	}
	for _, a := range acks {
		if err := w.s.Ack(a); err != nil {
			return broken(err)
		}
	}
	var refused error
	for range acks {
		select {
		case r := <-w.acks:
			if r.Status != queueclient.OK && refused == nil {
				refused = fmt.Errorf("ack of %s refused: %v", r.Key, r.Status)
			}
		case <-w.done:
			return w.err
		case <-ctx.Done():
			return broken(ctx.Err())
		}
	}
	return refused
}

// Leave implements Leaver: worker's stream is closed, and the queue hands
// back at once the leases it was pushed and Lease has not taken.
func (b *BatonStream) Leave(worker string) {
	b.mu.Lock()
	w := b.streams[worker]
	delete(b.streams, worker)
	b.mu.Unlock()
	if w != nil {
		w.s.Close()
		<-w.done
	}
}

// Unfinished is the queue's pending, leased and delayed keys.
func (b *BatonStream) Unfinished(ctx context.Context) (int64, error) {
	return Baton{Client: b.Client, Name: b.Name}.Unfinished(ctx)
}

// Close implements Queue: it closes every stream (the server's owner
// closes the client).
func (b *BatonStream) Close() error {
	b.mu.Lock()
	b.closed = true
	ws := b.streams
	b.streams = nil
	b.mu.Unlock()
	for _, w := range ws {
		w.s.Close()
		<-w.done
	}
	return nil
}
