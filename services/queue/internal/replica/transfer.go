package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
)

// ErrTransferAborted is TransferLeadership's when raft gave the transfer
// up (the member asked did not take leadership within an election
// timeout) and this member still leads.
var ErrTransferAborted = errors.New("replica: the leadership transfer was abandoned; this member still leads")

// transferCall is one TransferLeadership waiting for the loop.
type transferCall struct {
	to   uint64
	done chan error // buffered 1
}

// TransferLeadership hands this member's leadership to the voter to: raft
// brings to's log up to date, then tells it to campaign at once, which it
// wins without waiting out an election timeout. Meanwhile raft drops
// proposals, so Enqueue refuses them (ErrNotLeader, nothing in line), and
// a proposal caught in between makes the state machine resync (loop.go).
// It returns once this member no longer leads and knows which member does
// (the new leader's first heartbeat follows its election at once), or with
// ErrTransferAborted once raft gives the transfer up (after an election
// timeout), or ctx's error.
func (n *Node) TransferLeadership(ctx context.Context, to uint64) error {
	c := &transferCall{to: to, done: make(chan error, 1)}
	select {
	case n.transferc <- c:
	case <-n.done:
		return n.Err()
	case <-ctx.Done():
		return fmt.Errorf("replica: transfer leadership: %w", ctx.Err())
	}
	if err := <-c.done; err != nil {
		return err
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		st := n.Status()
		switch {
		case !st.IsLeader && st.Leader != 0:
			return nil
		case st.IsLeader && !st.Transferring:
			return ErrTransferAborted
		}
		select {
		case <-t.C:
		case <-n.done:
			return n.Err()
		case <-ctx.Done():
			return fmt.Errorf("replica: transfer leadership: %w", ctx.Err())
		}
	}
}

// transfer starts a transfer on the loop.
func (n *Node) transfer(c *transferCall) {
	bs := n.rn.BasicStatus()
	switch {
	case bs.RaftState != raft.StateLeader:
		c.done <- &NotLeaderError{Leader: bs.Lead}
		return
	case c.to == n.cfg.ID || !slices.Contains(n.confState.Voters, c.to):
		c.done <- fmt.Errorf("replica: transfer leadership to %x: not another voter of the queue", c.to)
		return
	}
	n.rn.TransferLeader(c.to)
	if n.rn.BasicStatus().LeadTransferee != c.to {
		c.done <- fmt.Errorf("replica: transfer leadership to %x: raft did not start it", c.to)
		return
	}
	// At once, not at the next Ready: Enqueue refuses from now on.
	n.statusMu.Lock()
	n.status.Transferring = true
	n.statusMu.Unlock()
	n.log.Info("handing leadership over", "to", c.to, "term", bs.Term)
	c.done <- nil
}

// MoveLeader's refusals besides ErrNotMember.
var (
	// ErrNoTarget: MoveLeader named nobody, and no other voter can take
	// leadership.
	ErrNoTarget = errors.New("replica: no other voting member to hand leadership to")
	// ErrNotVoter: the member named is a learner, which cannot lead.
	ErrNotVoter = errors.New("replica: the member named does not vote")
	// ErrAlreadyLeader: the member named is this one, the leader. Nothing
	// was done; the caller's wish holds already.
	ErrAlreadyLeader = errors.New("replica: the member named leads already")
)

// MoveLeader hands leadership to the voter named to, or, with to empty, to
// the voter whose log is furthest along (the one that catches up first),
// and returns the name of the member that leads once this one no longer
// does. A name no member has is ErrNotMember; a learner is ErrNotVoter;
// this member's own name is ErrAlreadyLeader (nothing is done); no other
// voter at all is ErrNoTarget. See TransferLeadership for the rest.
func (n *Node) MoveLeader(ctx context.Context, to string) (string, error) {
	st := n.Status()
	if !st.IsLeader {
		return "", &NotLeaderError{Leader: st.Leader}
	}
	target, err := n.moveTarget(to, st)
	if err != nil {
		return "", err
	}
	if err := n.TransferLeadership(ctx, target.ID); err != nil {
		return "", err
	}
	for _, m := range n.Members() {
		if m.ID == n.Status().Leader {
			return m.Name, nil
		}
	}
	return "", nil // it no longer leads, and knows no leader yet
}

// moveTarget is the member MoveLeader hands leadership to.
func (n *Node) moveTarget(to string, st Status) (Member, error) {
	var best Member
	for _, m := range n.Members() {
		voter := m.ID != n.cfg.ID && !m.Learner
		switch {
		case to != "" && m.Name == to && m.ID == n.cfg.ID:
			return Member{}, fmt.Errorf("%w: %s", ErrAlreadyLeader, to)
		case to != "" && m.Name == to && m.Learner:
			return Member{}, fmt.Errorf("%w: %s is a learner (added, and not caught up yet), and a learner cannot lead", ErrNotVoter, to)
		case to != "" && m.Name == to:
			return m, nil
		case to == "" && voter && (best.ID == 0 || st.Match[m.ID] > st.Match[best.ID]):
			best = m
		}
	}
	switch {
	case to != "":
		return Member{}, fmt.Errorf("%w: no member is named %s", ErrNotMember, to)
	case best.ID == 0:
		return Member{}, ErrNoTarget
	}
	return best, nil
}
