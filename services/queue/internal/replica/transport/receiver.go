package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/batonrun/baton/services/queue/internal/format"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3"
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
		learning, label, reason, err := r.check(req)
		if err != nil {
			t.dropIn(ctx, label, reason, len(req.Messages), err, "from", req.GetFrom())
			return status.Error(codes.FailedPrecondition, err.Error())
		}
		if t.cfg.Heard != nil {
			t.cfg.Heard(req.GetFrom(), format.Level(req.GetFormatLevel()), req.GetStopping())
		}
		label = peerLabel(req.GetFrom())
		for _, b := range req.GetMessages() {
			var m raftpb.Message
			if err := m.Unmarshal(b); err != nil {
				t.dropIn(ctx, label, reasonMalformed, 1, fmt.Errorf("transport: %d bytes that are not a raft message: %w", len(b), err))
				continue
			}
			if reason, err := checkType(m.Type); err != nil {
				t.dropIn(ctx, label, reason, 1, err)
				continue
			}
			// The batch said where it was going; each message must agree,
			// or a sender's bug would step this node with another
			// member's traffic.
			if m.To != t.cfg.ID {
				t.dropIn(ctx, label, reasonWrongTo, 1, fmt.Errorf("transport: a %v to member %d reached member %d", m.Type, m.To, t.cfg.ID))
				continue
			}
			if m.From != req.GetFrom() {
				t.dropIn(ctx, label, reasonWrongFrom, 1, fmt.Errorf("transport: a %v from member %d in a batch from %d", m.Type, m.From, req.GetFrom()))
				continue
			}
			if learning {
				if !fromLeader(m.Type) {
					t.dropIn(ctx, unknownLabel, reasonUnknownSender, 1, fmt.Errorf("transport: a %v from member %d, which is not among member %d's peers", m.Type, m.From, t.cfg.ID))
					continue
				}
				if l, reason, err := r.learn(req.GetFrom(), req.GetFromAddr()); err != nil {
					t.dropIn(ctx, l, reason, 1, err)
					continue
				}
			}
			t.recv(ctx, m)
			t.m.received.WithLabelValues(label).Inc()
		}
	}
}

// checkType refuses a message type that has no business on the network: one
// raftpb does not have, and one raft only sends itself (raft.IsLocalMsg:
// MsgHup, MsgBeat, MsgUnreachable, MsgSnapStatus, MsgCheckQuorum and the
// storage messages), which raft.Node.Step would ignore anyway and
// RawNode.Step refuses. It returns the reason to count a refusal under.
func checkType(typ raftpb.MessageType) (reason string, err error) {
	if _, ok := raftpb.MessageType_name[int32(typ)]; !ok {
		return reasonUnknownType, fmt.Errorf("transport: message type %d is not one of raft's", int32(typ))
	}
	if raft.IsLocalMsg(typ) {
		return reasonLocalType, fmt.Errorf("transport: a %v, which raft sends only to itself, came over the network", typ)
	}
	return "", nil
}

// Senders a member does not know. A member's configuration is what its
// log holds; a member that was down, or whose log was cut short, while a
// member was added has not reached that change yet, and if the added
// member now leads, only it can bring the log there. So a batch from a
// sender outside the configuration is taken if it says where the sender
// listens (from_addr): the messages a leader sends (fromLeader) reach
// raft, which follows a leader by term, not by membership, and the sender
// becomes a learnt peer, so that raft's answers reach it; anything else
// from it is dropped. Applying the change that added it makes it a peer of
// the configuration (AddPeer). A member removed from the configuration is
// never learnt, and at most maxLearnt are, so a sender claiming ids
// cannot grow the transport (who may send at all is the server's
// authorization).

// maxLearnt bounds the peers learnt from their batches.
const maxLearnt = 8

// fromLeader reports whether a leader sends typ to a follower.
func fromLeader(typ raftpb.MessageType) bool {
	switch typ {
	case raftpb.MsgApp, raftpb.MsgHeartbeat, raftpb.MsgSnap, raftpb.MsgReadIndexResp:
		return true
	}
	return false
}

// check refuses a batch that is not for this member from a member of its
// configuration or a sender it may learn, returning the label and reason
// to count it under. learning: the sender is not of the configuration,
// and only its leader's messages are taken.
func (r *receiver) check(req *queuev1.SendRequest) (learning bool, label, reason string, err error) {
	t := r.t
	from := req.GetFrom()
	configured, learnt, removed := t.standing(from)
	switch {
	case req.GetClusterId() != t.cfg.ClusterID:
		return false, unknownLabel, reasonOtherCluster, fmt.Errorf("transport: a batch of cluster %d reached member %d of cluster %d: the sender belongs to another queue (a member restored from a backup, or forced with --force-new-cluster, among the members of the queue it came from; or a member pointed at the wrong peers), which this one never joins", req.GetClusterId(), t.cfg.ID, t.cfg.ClusterID)
	case !configured && !learnt && (removed || checkPeer(t.cfg.ID, from, req.GetFromAddr()) != nil):
		return false, unknownLabel, reasonUnknownSender, fmt.Errorf("transport: member %d does not have %d among its peers", t.cfg.ID, from)
	case req.GetTo() != t.cfg.ID:
		return false, peerLabel(from), reasonWrongMember, fmt.Errorf("transport: a batch for member %d reached member %d: its address in %d's configuration is stale", req.GetTo(), t.cfg.ID, from)
	}
	return !configured, "", "", nil
}

// learn makes the sender of a leader's message a learnt peer, if it is
// not a peer yet.
func (r *receiver) learn(from uint64, addr string) (label, reason string, err error) {
	if err := r.t.learn(from, addr); err != nil {
		return unknownLabel, reasonUnknownSender, err
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
