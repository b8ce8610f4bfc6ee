package replica

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"time"
)

// Publishing client addresses. A member knows its own client address (its
// --advertise-addr); the others learn it as etcd members learn each
// other's client URLs: once the member knows a leader and sees that the
// configuration's record of itself lacks that address, or holds another,
// it asks the leader (RaftService.Publish) to record it through the log,
// and tries again with backoff until the record holds it. The leader
// proposes it as a configuration change of its own, a ConfChangeUpdateNode
// whose context is the address (confctx.go): raft applies it as no change
// to the configuration, every member applies it to its members (so it is
// in every snapshot after), and, proposed like MemberAdd's and Replace's,
// one at a time, it never races them. A normal entry would have reached
// the state machine, which has no business with it, and a follower cannot
// propose anything itself (DisableProposalForwarding), hence the call.

// Backoff of a publication that failed (no leader that answers, a leader
// busy with another change), and how long one attempt may take.
const (
	publishMinBackoff = 100 * time.Millisecond
	publishMaxBackoff = 5 * time.Second
	publishTimeout    = 5 * time.Second
	// publishWarnEvery: the failures in a row after which, and every so
	// many after, the publisher says so at WARN.
	publishWarnEvery = 10
)

// SetClientAddr makes addr the client address this member publishes, when
// it is known only after New (the default --advertise-addr needs the bound
// port). Empty publishes nothing.
func (n *Node) SetClientAddr(addr string) {
	n.membersMu.Lock()
	n.clientAddr = addr
	n.membersMu.Unlock()
	n.kickPublisher()
}

// kickPublisher wakes the publisher to look again: the address, the
// leader or the members changed.
func (n *Node) kickPublisher() {
	select {
	case n.publishc <- struct{}{}:
	default: // it will look anyway
	}
}

// publisher publishes this member's client address whenever it is woken
// and the record lacks it, until the node stops.
func (n *Node) publisher(ctx context.Context) {
	defer close(n.publishDone)
	backoff := publishMinBackoff
	failures := 0
	for {
		var retry <-chan time.Time
		if err := n.publishOnce(ctx); err != nil && ctx.Err() == nil {
			failures++
			if failures%publishWarnEvery == 0 {
				n.log.Warn("this member's client address is not recorded yet: retrying", "failures", failures, "error", err)
			} else {
				n.log.Debug("publishing this member's client address failed: retrying", "in", backoff, "error", err)
			}
			retry = time.After(backoff)
			backoff = min(2*backoff, publishMaxBackoff)
		} else {
			failures, backoff = 0, publishMinBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-n.done:
			return
		case <-n.publishc:
		case <-retry:
		}
	}
}

// publishOnce asks the leader to record this member's client address if
// the configuration's record of it lacks it. It is nil when there is
// nothing to do: no address to publish, this member not (or no longer) in
// the configuration, the address recorded, or no leader known (a leader's
// arrival wakes the publisher).
func (n *Node) publishOnce(ctx context.Context) error {
	n.membersMu.Lock()
	want := n.clientAddr
	self, member := n.members[n.cfg.ID]
	n.membersMu.Unlock()
	if want == "" || !member || self.ClientAddr == want {
		return nil
	}
	st := n.Status()
	if st.Leader == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	var err error
	if st.IsLeader {
		err = n.recordClientAddr(ctx, n.cfg.ID, self.Name, want)
	} else {
		_, err = n.tr.Publish(ctx, st.Leader, &queuev1.PublishRequest{ClusterId: n.cfg.ClusterID, Id: n.cfg.ID, Name: self.Name, ClientAddr: want})
	}
	if err != nil {
		return fmt.Errorf("publish client address %s through leader %d: %w", want, st.Leader, err)
	}
	n.log.Info("published this member's client address", "client_addr", want, "leader", st.Leader)
	return nil
}

// answerPublish is the transport's Publish: the leader's side of a
// member's publication.
func (n *Node) answerPublish(ctx context.Context, req *queuev1.PublishRequest) (*queuev1.PublishResponse, error) {
	if req.GetClusterId() != n.cfg.ClusterID {
		return nil, status.Errorf(codes.FailedPrecondition, "replica: a publication of cluster %d reached member %d of cluster %d", req.GetClusterId(), n.cfg.ID, n.cfg.ClusterID)
	}
	err := n.recordClientAddr(ctx, req.GetId(), req.GetName(), req.GetClientAddr())
	switch {
	case err == nil:
		return &queuev1.PublishResponse{}, nil
	case errors.Is(err, limits.ErrInvalid):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrNotMember):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	// Not the leader, another change under way, the node stopped: the
	// member asks again.
	return nil, status.Error(codes.Unavailable, err.Error())
}

// recordClientAddr records, on the leader, addr as the client address of
// member id, named name, and returns once the change is applied here; if
// the record holds it already, at once. An id and name that are not a
// member's are ErrNotMember, an address others cannot dial
// limits.ErrInvalid.
func (n *Node) recordClientAddr(ctx context.Context, id uint64, name, addr string) error {
	if err := limits.CheckAddr("client_addr", addr); err != nil {
		return err
	}
	n.replaceMu.Lock()
	defer n.replaceMu.Unlock()
	n.membersMu.Lock()
	m, ok := n.members[id]
	n.membersMu.Unlock()
	switch {
	case !ok || m.Name != name:
		return fmt.Errorf("%w: no member is %s under id %d", ErrNotMember, name, id)
	case m.ClientAddr == addr:
		return nil
	}
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeUpdateNode, NodeID: id}}, Context: updateContext(name, addr)}
	if err := n.changeConf(ctx, cc); err != nil {
		return fmt.Errorf("record %s's client address %s: %w", name, addr, err)
	}
	n.log.Info("recorded a member's client address", "name", name, "id", id, "client_addr", addr)
	return nil
}
