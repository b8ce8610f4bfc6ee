package queue

// The work stream (QueueService Work, docs/design.md): a worker's one
// long-lived stream per queue. The queue pushes leases as keys become
// ready, up to MaxInFlight held at once, and answers the acks and extends
// sent on the same stream; when the stream ends, the leases it held are
// pending again at once. Opening a stream is retried as any call is
// (UNAVAILABLE moves to the next member of a list); a stream that breaks
// is not reopened here, since its leases are gone with it: the caller
// decides what to do with the work it had started (the worker SDK cancels
// it) and opens another.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrWorkUnsupported is returned by Work when the queue does not serve the
// work stream (a version from before it): use Lease, Ack and Extend.
var ErrWorkUnsupported = errors.New("queue: the queue does not serve the work stream")

// WorkOptions qualify a work stream.
type WorkOptions struct {
	// Worker names the holder (shown by Inspect).
	Worker string
	// MaxInFlight is the most leases the stream holds at once (0 means 1,
	// at most limits.MaxBatch): a lease is held from its push until its ack is
	// answered, or an extend of it is answered LEASE_LOST.
	MaxInFlight int
	// LeaseDuration is each lease's (0 means the server's default).
	LeaseDuration time.Duration
}

// Stream is one open work stream. Recv may be called from one goroutine
// while Ack, Extend and Drain are called from others.
type Stream struct {
	queue  string
	ws     queuev1.QueueService_WorkClient
	cancel context.CancelFunc
	sendMu sync.Mutex // gRPC allows one SendMsg at a time
}

// Work opens a work stream on queue. It returns once the queue has
// accepted the open; ErrWorkUnsupported (with the UNIMPLEMENTED status)
// from a queue without it, and an INVALID_ARGUMENT for bad options. The
// stream lasts until ctx ends, Close is called, or the queue ends it.
func (c *Client) Work(ctx context.Context, queue string, o WorkOptions) (*Stream, error) {
	open := &queuev1.WorkOpen{Queue: queue, Worker: o.Worker, MaxInFlight: uint32(o.MaxInFlight)}
	if o.LeaseDuration > 0 {
		open.LeaseDuration = durationpb.New(o.LeaseDuration)
	}
	s, err := call(ctx, c, func(ctx context.Context) (*Stream, error) { return c.openWork(ctx, queue, open) })
	if status.Code(err) == codes.Unimplemented {
		return nil, fmt.Errorf("work on %s: %w: %w", queue, ErrWorkUnsupported, err)
	}
	if err != nil {
		return nil, fmt.Errorf("work on %s: %w", queue, err)
	}
	return s, nil
}

// openWork opens one stream and waits for the queue's header, which it
// sends once the open is accepted.
func (c *Client) openWork(ctx context.Context, queue string, open *queuev1.WorkOpen) (*Stream, error) {
	sctx, cancel := context.WithCancel(ctx)
	ws, err := c.rpc.Work(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	fail := func() error {
		// The stream ended: its status says why.
		_, err := ws.Recv()
		cancel()
		if err == nil || errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the queue ended the work stream as it opened")
		}
		return err
	}
	if err := ws.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: open}}); err != nil {
		return nil, fail()
	}
	md, err := ws.Header()
	if err != nil || md == nil {
		return nil, fail()
	}
	return &Stream{queue: queue, ws: ws, cancel: cancel}, nil
}

// Event is one message of the queue on a work stream: exactly one field
// is set.
type Event struct {
	// Lease is a key pushed to this worker.
	Lease *Lease
	// Ack answers an ack: OK, or LeaseLost (nothing changed).
	Ack *Result
	// Extend answers an extend: OK with the new expiry, or LeaseLost.
	Extend *Result
}

// Recv returns the queue's next message. It returns io.EOF when the queue
// ended the stream with OK (after Drain, once every lease is answered);
// any other error means the stream is broken and the leases it held are
// handed back.
func (s *Stream) Recv() (Event, error) {
	m, err := s.ws.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("work on %s: %w", s.queue, typed(err))
	}
	switch r := m.GetResponse().(type) {
	case *queuev1.WorkResponse_Lease:
		l := leaseOf(r.Lease)
		return Event{Lease: &l}, nil
	case *queuev1.WorkResponse_AckResult:
		return Event{Ack: &Result{Key: r.AckResult.GetKey(), Status: toStatus(r.AckResult.GetStatus())}}, nil
	case *queuev1.WorkResponse_ExtendResult:
		res := &Result{Key: r.ExtendResult.GetKey(), Status: toStatus(r.ExtendResult.GetStatus())}
		if res.Status == OK {
			res.ExpiresAt = r.ExtendResult.GetExpiresAt().AsTime()
		}
		return Event{Extend: res}, nil
	}
	// A kind of message newer than this client: skip it.
	return s.Recv()
}

func (s *Stream) send(m *queuev1.WorkRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.ws.Send(m); err != nil {
		return fmt.Errorf("work on %s: %w", s.queue, err)
	}
	return nil
}

// Ack sends the outcome of a lease; Recv returns its answer. An ack of
// success may be answered before it is durable (losing it only offers the
// key once more); other outcomes are answered once durable.
func (s *Stream) Ack(a Ack) error {
	return s.send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Ack{Ack: a.proto()}})
}

// Extend asks for a lease to last d from now (0 means the server's
// default); Recv returns the answer.
func (s *Stream) Extend(r LeaseRef, d time.Duration) error {
	ext := &queuev1.WorkExtend{Lease: &queuev1.LeaseRef{Key: r.Key, Token: r.Token}}
	if d > 0 {
		ext.LeaseDuration = durationpb.New(d)
	}
	return s.send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Extend{Extend: ext}})
}

// Drain asks the queue to push no more leases: Recv returns io.EOF once
// every lease the stream holds is answered.
func (s *Stream) Drain() error {
	return s.send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Drain{Drain: &queuev1.WorkDrain{}}})
}

// CloseSend says the worker sends nothing more: the queue applies what it
// sent (acks included), hands back the leases the stream still holds, and
// ends the stream with OK (Recv returns io.EOF). A worker that leaves
// without waiting for its acks' answers ends its stream so.
func (s *Stream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.ws.CloseSend()
}

// Close ends the stream: the queue hands back the leases it still holds.
func (s *Stream) Close() { s.cancel() }
