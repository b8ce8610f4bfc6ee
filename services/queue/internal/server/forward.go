package server

// Forwarding: any member of a replicated queue answers every QueueService
// call. A member that does not lead hands the call, as it came, to the
// leader's peer listener and returns the leader's answer, status and all;
// the caller's deadline goes with it. The caller was authorized where it
// arrived (by its own certificate, against that member's policy), and the
// leader's peer listener admits the members alone (queue-peer), so the
// leader trusts what a member hands on and authorizes nothing again.
//
// Three metadata keys (services/runtime/limits names them) travel with a
// forwarded call:
//
//   - baton-forwarded marks it: a member never hands on a forwarded call,
//     so leadership moving while the call is on its way ends in one
//     NOT_LEADER (the client retries) rather than a loop;
//   - baton-forwarded-holder is the caller's identity (its certificate's
//     CN), to which the leader binds the leases it hands out, as if the
//     caller had come itself; absent when the caller had none;
//   - baton-forwarded-conn is the caller's connection at this member.
//
// The leader believes them on its peer listener alone, whose limiter
// trusts forwarded calls (limits.ForwardedCaller), and there only from a
// queue-peer: on a client listener they are ignored, whatever roles the
// caller's certificate has, so no worker can claim another's leases by
// setting them.
//
// # One connection, every client
//
// A member forwards all its clients' calls over its one connection to the
// leader's peer listener. Nothing there may be a budget that all of them
// share, or one client within its own bounds could fill it for the rest
// (say, by holding a thousand idle work streams). So:
//
//   - each client is bounded where it connects: the waiting-Lease limits
//     of this member's client listener run before the call is forwarded,
//     and its connection's streams are this member's MaxConcurrentStreams;
//   - the leader counts a forwarded waiting Lease or work stream against
//     the client the metadata names, its identity and its connection at
//     this member, never against this member's connection, so one
//     client's refusal names that client;
//   - the peer listener lets a connection open any number of calls
//     (serve.PeerMaxConcurrentStreams), so a client's idle streams do not
//     queue another's calls, unary or stream, behind them on the shared
//     connection. HTTP/2 streams that wait cost nothing on the wire, and
//     flow control is per stream: a stream nobody reads holds its own
//     window only.
//
// One connection per client identity was the other way. It costs a
// handshake and a connection at the leader for every identity that comes
// through a follower, to be bounded and closed when idle, and still falls
// short: an identity's waiting Leases may be as many as a connection's
// streams (1024 each, by default), so an identity at its bound would
// queue its own Acks behind them, where each of its own connections
// keeps room for them.
//
// While this member leads, or knows no leader, it answers itself: a
// leader serves the call, and without one the broker answers NOT_LEADER
// and the client retries.

import (
	"context"
	"errors"
	"fmt"
	"io"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	serverlimits "github.com/batonrun/baton/services/runtime/limits"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
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
// forwarded, with the caller's identity as its holder and its connection.
// Only these travel: the caller's own metadata stays here.
func handOn(ctx context.Context) context.Context {
	md := metadata.Pairs(serverlimits.ForwardedKey, "1")
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		md.Set(serverlimits.ForwardedConnKey, p.Addr.String())
	}
	if h := holderOf(ctx); h != nil {
		md.Set(serverlimits.HolderMetadata(*h))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// forwarded reports whether the call was handed on by a member: it came
// to the peer listener, from a member.
func forwarded(ctx context.Context) bool {
	_, ok := serverlimits.ForwardedCaller(ctx)
	return ok
}

// forwardedHolder is the holder a member handed on with the call, if the
// call was handed on: ok is false for any other call, whose caller's own
// certificate is its identity.
func forwardedHolder(ctx context.Context) (holder *string, ok bool) {
	c, ok := serverlimits.ForwardedCaller(ctx)
	if !ok {
		return nil, false
	}
	return c.Holder, true // nil: the caller had no identity
}

func (f *forwarding) Add(ctx context.Context, req *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Add(fctx, req))
	}
	return f.self.Add(ctx, req)
}

func (f *forwarding) Lease(ctx context.Context, req *queuev1.LeaseRequest) (*queuev1.LeaseResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Lease(fctx, req))
	}
	return f.self.Lease(ctx, req)
}

func (f *forwarding) Ack(ctx context.Context, req *queuev1.AckRequest) (*queuev1.AckResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Ack(fctx, req))
	}
	return f.self.Ack(ctx, req)
}

func (f *forwarding) Extend(ctx context.Context, req *queuev1.ExtendRequest) (*queuev1.ExtendResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Extend(fctx, req))
	}
	return f.self.Extend(ctx, req)
}

func (f *forwarding) Forget(ctx context.Context, req *queuev1.ForgetRequest) (*queuev1.ForgetResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Forget(fctx, req))
	}
	return f.self.Forget(ctx, req)
}

func (f *forwarding) Inspect(ctx context.Context, req *queuev1.InspectRequest) (*queuev1.InspectResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Inspect(fctx, req))
	}
	return f.self.Inspect(ctx, req)
}

func (f *forwarding) List(ctx context.Context, req *queuev1.ListRequest) (*queuev1.ListResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.List(fctx, req))
	}
	return f.self.List(ctx, req)
}

func (f *forwarding) Stats(ctx context.Context, req *queuev1.StatsRequest) (*queuev1.StatsResponse, error) {
	if c, fctx := f.to(ctx); c != nil {
		return relay(c.Stats(fctx, req))
	}
	return f.self.Stats(ctx, req)
}

// relay returns the leader's answer to a forwarded call, translating
// what this member's connection to the leader said (hop).
func relay[T any](v T, err error) (T, error) { return v, hop(err) }

// hop keeps the leader's statuses as they came and names the one failure
// that is this member's own: not reaching the leader it knows, which has
// stopped or is being replaced (the dial's "connection refused", a
// connection that broke mid-call). gRPC answers that UNAVAILABLE with no
// details, where every UNAVAILABLE the queue itself answers carries its
// reason, so the two are told apart by that. The call may have reached
// the leader before the connection broke, so it is LEADERSHIP_LOST: an
// Add may be retried, a lease the old leader granted is gone.
func hop(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || len(st.Details()) > 0 {
		return err
	}
	return queueclient.Refusal(codes.Unavailable, queueclient.ReasonLeadershipLost,
		fmt.Sprintf("this member could not reach the leader it knew (stopped, or leadership is moving): %s; the call may or may not have reached it: an Add may be retried, a lease it granted is gone; retry on any member", st.Message()))
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
		return hop(err)
	}
	if err := up.Send(first); err != nil {
		_, err = up.Recv() // the leader's status says why
		return hop(err)
	}
	md, err := up.Header()
	if err != nil {
		return hop(err)
	}
	if md == nil {
		// Ended without a header: the leader refused the open.
		_, err = up.Recv()
		return hop(err)
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
			return hop(err)
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}
