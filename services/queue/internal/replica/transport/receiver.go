package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unknownLabel is the peer label of batches whose sender this member does
// not know: a label per claimed id would let a misconfigured member grow
// the metric without bound.
const unknownLabel = "unknown"

// receiver is RaftService: the receiving side of every peer's stream.
type receiver struct {
	queuev1.UnimplementedRaftServiceServer
	t *Transport
}

var errClosed = status.Error(codes.Unavailable, "transport: this member's Raft transport is closed")

// Send receives one sender's stream.
func (r *receiver) Send(st queuev1.RaftService_SendServer) error {
	return r.serve(st.Context(), func(ctx context.Context) error { return r.receive(ctx, st) },
		func() error { return st.SendAndClose(&queuev1.SendResponse{}) })
}

// serve runs a client stream's reading on a goroutine Close waits for, so
// that Close can end the call (by returning here, which ends the stream
// and with it that goroutine's Recv) without owning the gRPC server, and
// no recv runs after Close. Once read succeeds, answer closes the stream:
// only here, never on the reading goroutine, since the stream may not be
// written once the handler has returned.
func (r *receiver) serve(stream context.Context, read func(context.Context) error, answer func() error) error {
	t := r.t
	ctx, cancel := context.WithCancel(stream)
	defer cancel()
	defer context.AfterFunc(t.ctx, cancel)()
	done := make(chan error, 1)
	t.mu.RLock()
	started := t.goroutine(func() { done <- read(ctx) })
	t.mu.RUnlock()
	if !started {
		return errClosed
	}
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		return answer()
	case <-ctx.Done():
		if t.ctx.Err() != nil {
			return errClosed
		}
		return status.FromContextError(ctx.Err()).Err()
	}
}

// receive reads batches until the sender closes the stream (nil), the
// stream breaks, or a batch is refused (FAILED_PRECONDITION).
func (r *receiver) receive(ctx context.Context, st queuev1.RaftService_SendServer) error {
	t := r.t
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if label, reason, err := r.check(req); err != nil {
			t.m.dropped(label, inbound, reason, len(req.Messages))
			t.log.Warn("raft stream refused", "from", req.GetFrom(), "err", err)
			return status.Error(codes.FailedPrecondition, err.Error())
		}
		label := peerLabel(req.GetFrom())
		for _, b := range req.GetMessages() {
			var m raftpb.Message
			if err := m.Unmarshal(b); err != nil {
				t.m.dropped(label, inbound, reasonMalformed, 1)
				continue
			}
			// The batch said where it was going; each message must agree,
			// or a sender's bug would step this node with another
			// member's traffic.
			if m.To != t.cfg.ID {
				t.m.dropped(label, inbound, reasonWrongTo, 1)
				continue
			}
			if m.From != req.GetFrom() {
				t.m.dropped(label, inbound, reasonWrongFrom, 1)
				continue
			}
			t.recv(ctx, m)
			t.m.received.WithLabelValues(label).Inc()
		}
	}
}

// check refuses a batch that is not for this member from a member of its
// configuration, returning the label and reason to count it under.
func (r *receiver) check(req *queuev1.SendRequest) (label, reason string, err error) {
	t := r.t
	switch {
	case req.GetClusterId() != t.cfg.ClusterID:
		return unknownLabel, reasonOtherCluster, fmt.Errorf("transport: a batch of cluster %d reached member %d of cluster %d", req.GetClusterId(), t.cfg.ID, t.cfg.ClusterID)
	case !t.knows(req.GetFrom()):
		return unknownLabel, reasonUnknownSender, fmt.Errorf("transport: member %d does not have %d among its peers", t.cfg.ID, req.GetFrom())
	case req.GetTo() != t.cfg.ID:
		return peerLabel(req.GetFrom()), reasonWrongMember, fmt.Errorf("transport: a batch for member %d reached member %d: its address in %d's configuration is stale", req.GetTo(), t.cfg.ID, req.GetFrom())
	}
	return "", "", nil
}

// Join hands the request to Config.Join, which checks its cluster id.
func (r *receiver) Join(ctx context.Context, req *queuev1.JoinRequest) (*queuev1.JoinResponse, error) {
	t := r.t
	if t.cfg.Join == nil {
		return nil, status.Error(codes.Unimplemented, "transport: this member takes no joins")
	}
	return t.cfg.Join(ctx, req)
}

// Publish hands the request to Config.Publish.
func (r *receiver) Publish(ctx context.Context, req *queuev1.PublishRequest) (*queuev1.PublishResponse, error) {
	t := r.t
	if t.cfg.Publish == nil {
		return nil, status.Error(codes.Unimplemented, "transport: this member takes no publications")
	}
	return t.cfg.Publish(ctx, req)
}
