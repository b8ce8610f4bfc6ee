package server

// ClusterService. On a queue of one member (baton-queue without
// --initial-cluster) the answers mean what cluster.proto says they do with
// three members, so that batonctl, dashboards and scripts work with
// either:
//
//   - the member is the leader of its own term, the store's epoch, which
//     already does what a term will: it rises at every start and fences
//     every token of an earlier one;
//   - its applied index, and its commit index (a majority of one), is the
//     number of operations its store has made durable since it started;
//   - it has no peer address, because it has no peers;
//   - membership cannot change: MemberAdd and MemberRemove check their
//     arguments as they will, then refuse with FAILED_PRECONDITION and
//     change nothing.
//
// On a replicated queue the members are the node's configuration;
// MemberAdd and MemberRemove change it on the leader (replica.Node's
// AddMember and RemoveMember), and a follower hands them to the leader's
// peer listener as it hands on QueueService calls (forward.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/batonrun/baton/services/queue/internal/format"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Self is this process as a member of the queue.
type Self struct {
	// Name is --name.
	Name string
	// ClientAddr returns --advertise-addr, or its default derived from the
	// bound gRPC address (known only once the listener is open, before
	// the first call is served).
	ClientAddr func() string
	// Peers are the initial members of a replicated queue
	// (--initial-cluster), this one included; nil for a single member.
	// The members now are the node's (replica.Node.Members).
	Peers []Peer
	// Leader returns the ClusterService of the leader's peer listener, nil
	// while this member leads or knows no leader, or for a single member.
	Leader func() queuev1.ClusterServiceClient
}

// Peer is a member of a replicated queue as --initial-cluster names it.
type Peer struct {
	Name     string
	PeerAddr string
	ID       uint64 // its Raft id
}

type cluster struct {
	queuev1.UnimplementedClusterServiceServer
	b    *broker.Broker
	self Self
}

var _ queuev1.ClusterServiceServer = (*cluster)(nil)

// NewCluster returns the ClusterService of a queue of one member, self,
// over b.
func NewCluster(b *broker.Broker, self Self) queuev1.ClusterServiceServer {
	return &cluster{b: b, self: self}
}

// member describes this process. The applied index is read before the
// term: a new epoch never lowers it, so the pair never goes backwards.
func (c *cluster) member() *queuev1.Member {
	applied := c.b.Durable()
	return &queuev1.Member{
		Name:         c.self.Name,
		ClientAddr:   c.self.ClientAddr(),
		Leader:       true,
		Term:         c.b.Epoch(),
		AppliedIndex: applied,
		FormatLevel:  uint32(format.BuildLevel),
	}
}

func (c *cluster) MemberList(context.Context, *queuev1.MemberListRequest) (*queuev1.MemberListResponse, error) {
	if c.b.Member() == nil {
		return &queuev1.MemberListResponse{Members: []*queuev1.Member{c.member()}}, nil
	}
	return &queuev1.MemberListResponse{Members: c.replicated()}, nil
}

func (c *cluster) Status(context.Context, *queuev1.StatusRequest) (*queuev1.StatusResponse, error) {
	node := c.b.Member()
	if node == nil {
		m := c.member()
		return &queuev1.StatusResponse{Member: m, LeaderName: m.GetName(), CommitIndex: m.GetAppliedIndex(), MemberCount: 1, ClusterFormatLevel: m.GetFormatLevel()}, nil
	}
	st := node.Status()
	members := c.replicated()
	resp := &queuev1.StatusResponse{CommitIndex: st.Commit, MemberCount: uint32(len(members))}
	if st.IsLeader {
		resp.ClusterFormatLevel = uint32(node.ClusterLevel())
	}
	for _, m := range members {
		if m.GetName() == c.self.Name {
			resp.Member = m
		}
		if m.GetLeader() {
			resp.LeaderName = m.GetName()
		}
	}
	return resp, nil
}

// replicated lists the members of a replicated queue as this one sees
// them (its configuration: a member that rejoined after losing its disk
// is there under its new Raft id): the leader it knows, every member's
// client address as the members published it (replica's publish.go), and
// its own term and applied index (another member's it does not know, so
// they are 0).
func (c *cluster) replicated() []*queuev1.Member {
	return c.described(c.b.Member().Members())
}

func (c *cluster) MemberAdd(ctx context.Context, req *queuev1.MemberAddRequest) (*queuev1.MemberAddResponse, error) {
	if err := limits.CheckMemberName("name", req.GetName()); err != nil {
		return nil, invalid(err)
	}
	if err := limits.CheckAddr("peer_addr", req.GetPeerAddr()); err != nil {
		return nil, invalid(err)
	}
	if a := req.GetClientAddr(); a != "" {
		if err := limits.CheckAddr("client_addr", a); err != nil {
			return nil, invalid(err)
		}
	}
	node := c.b.Member()
	if node == nil {
		return nil, c.alone("member %q was not added", req.GetName())
	}
	if l, fctx := c.forward(ctx); l != nil {
		return l.MemberAdd(fctx, req)
	}
	_, members, err := node.AddMember(ctx, req.GetName(), req.GetPeerAddr(), req.GetClientAddr())
	if err != nil {
		return nil, membershipStatus(err, "member %q was not added", req.GetName())
	}
	return &queuev1.MemberAddResponse{Members: c.described(members)}, nil
}

func (c *cluster) MemberRemove(ctx context.Context, req *queuev1.MemberRemoveRequest) (*queuev1.MemberRemoveResponse, error) {
	if err := limits.CheckMemberName("name", req.GetName()); err != nil {
		return nil, invalid(err)
	}
	node := c.b.Member()
	if node == nil {
		return nil, c.alone("member %q was not removed", req.GetName())
	}
	if l, fctx := c.forward(ctx); l != nil {
		return l.MemberRemove(fctx, req)
	}
	members, err := node.RemoveMember(ctx, req.GetName())
	if err != nil {
		return nil, membershipStatus(err, "member %q was not removed", req.GetName())
	}
	return &queuev1.MemberRemoveResponse{Members: c.described(members)}, nil
}

func (c *cluster) MoveLeader(ctx context.Context, req *queuev1.MoveLeaderRequest) (*queuev1.MoveLeaderResponse, error) {
	if to := req.GetTo(); to != "" {
		if err := limits.CheckMemberName("to", to); err != nil {
			return nil, invalid(err)
		}
	}
	node := c.b.Member()
	if node == nil {
		return nil, queueclient.Refusal(codes.FailedPrecondition, queueclient.ReasonNotReplicated,
			fmt.Sprintf("leadership was not moved: this queue is one member, %q, started without --initial-cluster; it has no other member to lead", c.self.Name))
	}
	if l, fctx := c.forward(ctx); l != nil {
		return l.MoveLeader(fctx, req)
	}
	leader, err := node.MoveLeader(ctx, req.GetTo())
	switch {
	case errors.Is(err, replica.ErrAlreadyLeader):
		// What was asked for holds already: a no-op, answered as one.
		return &queuev1.MoveLeaderResponse{LeaderName: req.GetTo(), Unchanged: true}, nil
	case errors.Is(err, replica.ErrNoTarget), errors.Is(err, replica.ErrNotVoter), errors.Is(err, replica.ErrTargetStopping), errors.Is(err, replica.ErrTargetUnreachable):
		return nil, status.Errorf(codes.FailedPrecondition, "leadership was not moved: %v", err)
	case errors.Is(err, replica.ErrTransferAborted):
		return nil, status.Errorf(codes.Aborted, "leadership was not moved: %v; try again, or name another member", err)
	case err != nil:
		target := "to the member furthest along"
		if req.GetTo() != "" {
			target = "to " + req.GetTo()
		}
		return nil, membershipStatus(err, "leadership was not moved %s", target)
	}
	return &queuev1.MoveLeaderResponse{LeaderName: leader}, nil
}

// snapshotChunk is the most of a backup one SnapshotResponse carries.
const snapshotChunk = 1 << 20

func (c *cluster) Snapshot(_ *queuev1.SnapshotRequest, stream queuev1.ClusterService_SnapshotServer) error {
	ctx := stream.Context()
	if l, fctx := c.forward(ctx); l != nil {
		up, err := l.Snapshot(fctx, &queuev1.SnapshotRequest{})
		if err != nil {
			return err
		}
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
	// The whole file first: the backup's moment is the broker's, and its
	// answer waits for the commit of what it copied; nothing is sent of a
	// backup that is then refused.
	var buf bytes.Buffer
	if _, err := c.b.Backup(ctx, &buf); err != nil {
		return ToStatus(err)
	}
	for b := buf.Bytes(); len(b) > 0; {
		n := min(len(b), snapshotChunk)
		if err := stream.Send(&queuev1.SnapshotResponse{Data: b[:n]}); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// forward returns the leader's ClusterService and the context to call it
// with when this member should hand a change on, nil when it answers
// itself: it leads, knows no leader (the node then refuses NOT_LEADER),
// or the call was handed on already.
func (c *cluster) forward(ctx context.Context) (queuev1.ClusterServiceClient, context.Context) {
	if c.self.Leader == nil || forwarded(ctx) {
		return nil, nil
	}
	l := c.self.Leader()
	if l == nil {
		return nil, nil
	}
	return l, handOn(ctx)
}

// described lists members as replicated says. This member's own client
// address is the one it has now, which the configuration holds only once
// its publication is applied.
func (c *cluster) described(members []replica.Member) []*queuev1.Member {
	st := c.b.Member().Status()
	out := make([]*queuev1.Member, 0, len(members))
	for _, p := range members {
		m := &queuev1.Member{Name: p.Name, PeerAddr: p.Addr, ClientAddr: p.ClientAddr, Leader: p.ID == st.Leader, Learner: p.Learner,
			FormatLevel: uint32(c.b.Member().MemberLevel(p.ID))}
		if active, known := st.Active[p.ID]; st.IsLeader && known {
			m.Unreachable = !active
		}
		if p.Name == c.self.Name {
			m.ClientAddr, m.Term, m.AppliedIndex = c.self.ClientAddr(), st.Term, st.Applied
		}
		out = append(out, m)
	}
	return out
}

// membershipStatus translates a refused membership change; what says
// what was not done.
func membershipStatus(err error, what, name string) error {
	var nl *replica.NotLeaderError
	prefix := fmt.Sprintf(what, name)
	switch {
	case errors.Is(err, replica.ErrMemberExists):
		return status.Errorf(codes.AlreadyExists, "%s: %v; nothing changed", prefix, err)
	case errors.Is(err, replica.ErrNotMember):
		return status.Errorf(codes.NotFound, "%s: %v; nothing changed", prefix, err)
	case errors.Is(err, replica.ErrLastVoter), errors.Is(err, replica.ErrRemoveLeader):
		return status.Errorf(codes.FailedPrecondition, "%s: %v; nothing changed (stop the leader: another member takes over within an election timeout and can remove it)", prefix, err)
	case errors.As(err, &nl):
		return queueclient.Refusal(codes.Unavailable, queueclient.ReasonNotLeader, fmt.Sprintf("%s: this member does not lead the queue now: nothing changed; retry on any member: %v", prefix, err))
	}
	return ToStatus(err)
}

// alone is the refusal of a membership change on a queue of one member:
// what was not done, and why.
func (c *cluster) alone(format, name string) error {
	return queueclient.Refusal(codes.FailedPrecondition, queueclient.ReasonNotReplicated,
		fmt.Sprintf(format+": this queue is one member, %q, started without --initial-cluster, and membership changes need a replicated queue; nothing changed",
			name, c.self.Name))
}
