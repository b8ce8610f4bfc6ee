package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
)

// BatonStream adapts a baton-queue client to Queue through the work stream
// (QueueService Work, client/queue's Stream), as the worker SDK takes its
// keys: each worker name gets one stream of its own, opened by its first
// Lease, on which the queue pushes leases as keys become ready, up to
// max_in_flight held at once. Lease takes what the stream was pushed
// (waiting up to wait for the first); Ack sends one ack message per key on
// the worker's stream and returns without waiting for the answers, as the
// worker SDK acks on the stream (and as NATS's adapter acks: the client's
// default Ack, unconfirmed). The stream's reader takes the answers; a
// LEASE_LOST one fails the worker's next call, as a refused ack fails
// Baton's.
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
	leases chan queueclient.Lease // pushed, not yet taken by Lease
	done   chan struct{}          // closed when the reader stops; err says why
	err    error

	mu      sync.Mutex
	refused error // an ack answered LEASE_LOST, not yet reported
}

// failed returns a refused ack answered since the last call, if any.
func (w *workStream) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.refused
	w.refused = nil
	return err
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
	inFlight = min(max(inFlight, 1), limits.MaxBatch)
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
	w := &workStream{s: s, leases: make(chan queueclient.Lease, inFlight), done: make(chan struct{})}
	go w.read()
	if b.streams == nil {
		b.streams = map[string]*workStream{}
	}
	b.streams[worker] = w
	return w, nil
}

// read receives until the stream ends. The leases channel cannot fill:
// the stream holds at most max_in_flight leases, and it has that room.
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
		case ev.Ack != nil && ev.Ack.Status != queueclient.OK:
			w.mu.Lock()
			if w.refused == nil {
				w.refused = fmt.Errorf("ack of %s refused: %v", ev.Ack.Key, ev.Ack.Status)
			}
			w.mu.Unlock()
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
	if err := w.failed(); err != nil {
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
// unanswered (see BatonStream); a refusal already answered is an error.
func (b *BatonStream) Ack(ctx context.Context, _ string, ls []Leased) error {
	for _, l := range ls {
		h := l.handle.(streamLease)
		if err := h.w.failed(); err != nil {
			return err
		}
		if err := h.w.s.Ack(queueclient.Ack{Key: l.Key, Token: h.token, Outcome: queueclient.Success()}); err != nil {
			select {
			case <-h.w.done:
				return h.w.err
			default:
				return err
			}
		}
	}
	return nil
}

// Leave implements Leaver: worker's stream is closed on its side, so the
// queue applies the acks it sent (unanswered) and hands back at once the
// leases it was pushed and Lease has not taken, then ends it.
func (b *BatonStream) Leave(worker string) {
	b.mu.Lock()
	w := b.streams[worker]
	delete(b.streams, worker)
	b.mu.Unlock()
	if w == nil {
		return
	}
	if w.s.CloseSend() == nil {
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
		}
	}
	w.s.Close()
	<-w.done
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
