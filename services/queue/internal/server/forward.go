package server

// Forwarding: any member of a replicated queue answers every QueueService
// call. A member that does not lead hands the call, as it came, to the
// leader's peer listener and returns the leader's answer, status and all;
// the caller's deadline goes with it. The caller was authorized where it
// arrived (by its own certificate, against that member's policy), and the
// leader's peer listener admits the members alone (queue-peer), so the
// leader trusts what a member hands on and authorizes nothing again.
//
// Two metadata keys travel with a forwarded call:
//
//   - baton-forwarded marks it: a member never hands on a forwarded call,
//     so leadership moving while the call is on its way ends in one
//     NOT_LEADER (the client retries) rather than a loop;
//   - baton-forwarded-holder is the caller's identity (its certificate's
//     CN), to which the leader binds the leases it hands out, as if the
//     caller had come itself; absent when the caller had none. The leader
//     takes it only from a queue-peer (holderOf), so no worker can claim
//     another's leases by setting it.
//
// While this member leads, or knows no leader, it answers itself: a
// leader serves the call, and without one the broker answers NOT_LEADER
// and the client retries.

import (
	"context"
	"errors"
	"io"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/metadata"
)

// The metadata keys of a forwarded call.
const (
	mdForwarded = "baton-forwarded"
	mdHolder    = "baton-forwarded-holder"
)

// Leader returns a client of the leader's peer listener, or nil while this
// member leads or knows no leader.
type Leader func() queuev1.QueueServiceClient

type forwarding struct {
	queuev1.UnimplementedQueueServiceServer
	self   queuev1.QueueServiceServer
	leader Leader
}

// Forwarding wraps self, this member's QueueService, so that a member that
// does not lead hands each call to the leader.
func Forwarding(self queuev1.QueueServiceServer, leader Leader) queuev1.QueueServiceServer {
	return &forwarding{self: self, leader: leader}
}

// to returns the leader's client and the context to call it with, or nil
// when this member answers the call itself.
func (f *forwarding) to(ctx context.Context) (queuev1.QueueServiceClient, context.Context) {
	if forwarded(ctx) {
		return nil, nil
	}
	c := f.leader()
	if c == nil {
		return nil, nil
	}
	return c, handOn(ctx)
}

// handOn is the context a call is handed to the leader with: marked
// forwarded, with the caller's identity as its holder.
func handOn(ctx context.Context) context.Context {
	md := metadata.Pairs(mdForwarded, "1")
	if h := holderOf(ctx); h != nil {
		md.Set(mdHolder, *h)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// forwarded reports whether the call was handed on by a member.
func forwarded(ctx context.Context) bool {
	// ValueFromIncomingContext allocates nothing for a key that is absent,
	// the case of every call that is not handed on.
	return len(metadata.ValueFromIncomingContext(ctx, mdForwarded)) > 0
}

// forwardedHolder is the holder a member handed on with the call, if the
// call comes from a member: ok is false for any other caller, whose own
// certificate is its identity.
func forwardedHolder(ctx context.Context) (holder *string, ok bool) {
	if !forwarded(ctx) {
		return nil, false
	}
	id, verified := tlsfiles.IdentityFromPeer(ctx)
	if !verified || !id.HasRole(tlsfiles.RoleQueuePeer) {
		return nil, false
	}
	if v := metadata.ValueFromIncomingContext(ctx, mdHolder); len(v) > 0 {
		h := v[0]
		return &h, true
	}
	return nil, true // the caller had no identity
}

func (f *forwarding) Add(ctx context.Context, req *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Add(fctx, req)
	}
	return f.self.Add(ctx, req)
}

func (f *forwarding) Lease(ctx context.Context, req *queuev1.LeaseRequest) (*queuev1.LeaseResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Lease(fctx, req)
	}
	return f.self.Lease(ctx, req)
}

func (f *forwarding) Ack(ctx context.Context, req *queuev1.AckRequest) (*queuev1.AckResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Ack(fctx, req)
	}
	return f.self.Ack(ctx, req)
}

func (f *forwarding) Extend(ctx context.Context, req *queuev1.ExtendRequest) (*queuev1.ExtendResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Extend(fctx, req)
	}
	return f.self.Extend(ctx, req)
}

func (f *forwarding) Forget(ctx context.Context, req *queuev1.ForgetRequest) (*queuev1.ForgetResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Forget(fctx, req)
	}
	return f.self.Forget(ctx, req)
}

func (f *forwarding) Inspect(ctx context.Context, req *queuev1.InspectRequest) (*queuev1.InspectResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Inspect(fctx, req)
	}
	return f.self.Inspect(ctx, req)
}

func (f *forwarding) List(ctx context.Context, req *queuev1.ListRequest) (*queuev1.ListResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.List(fctx, req)
	}
	return f.self.List(ctx, req)
}

func (f *forwarding) Stats(ctx context.Context, req *queuev1.StatsRequest) (*queuev1.StatsResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return c.Stats(fctx, req)
	}
	return f.self.Stats(ctx, req)
}

// Work hands a work stream to the leader: the stream to the leader is
// opened with the worker's open, and then carries every message both ways
// as it came, until either side ends it. The leader's end (its status)
// is this stream's, so a worker whose stream ends because leadership
// moved opens another, as it would after any UNAVAILABLE.
func (f *forwarding) Work(stream queuev1.QueueService_WorkServer) error {
	c, fctx := f.to(stream.Context())
	if c == nil {
		return f.self.Work(stream)
	}
	// The first message first: under a policy that binds the worker's
	// role to some queues, it is what authorizes the stream (authz), and
	// nothing may be sent before it.
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(fctx)
	defer cancel()
	up, err := c.Work(ctx)
	if err != nil {
		return err
	}
	if err := up.Send(first); err != nil {
		_, err = up.Recv() // the leader's status says why
		return err
	}
	md, err := up.Header()
	if err != nil {
		return err
	}
	if md == nil {
		// Ended without a header: the leader refused the open.
		_, err = up.Recv()
		return err
	}
	if err := stream.SendHeader(md); err != nil {
		return err
	}
	go func() {
		// The worker's messages to the leader, until the worker is done;
		// a worker that goes away cancels the leader's stream, which
		// ends the loop below.
		for {
			m, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					_ = up.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := up.Send(m); err != nil {
				return // the leader's end reaches the loop below
			}
		}
	}()
	for {
		m, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}
