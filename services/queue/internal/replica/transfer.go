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
	// term is the one the transfer began in, set before done is sent.
	term uint64
}

// TransferLeadership hands this member's leadership to the voter to: raft
// brings to's log up to date, then tells it to campaign at once, which it
// wins without waiting out an election timeout. Meanwhile raft drops
// proposals, so Enqueue refuses them (ErrNotLeader, nothing in line), and
// a proposal caught in between makes the state machine resync (loop.go).
// It returns once this member no longer leads and knows which member does
// (the new leader's first heartbeat follows its election at once), or
// leads again in a later term (the member it handed leadership to, told to
// stop as it took over, handed it back: leadership moved all the same), or
// with ErrTransferAborted once the transfer is given up in the term it
// began in (by raft, after an election timeout, or abandonTransfer), or
// ctx's error.
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
		case !st.IsLeader && st.Leader != 0, st.IsLeader && st.Term > c.term:
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
	case n.peerStopping(c.to):
		c.done <- fmt.Errorf("%w: member %x", ErrTargetStopping, c.to)
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
	c.term = bs.Term
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
// voter at all is ErrNoTarget. A member that said it is stopping is never
// picked, and named it is ErrTargetStopping; one that says so while
// leadership is handed to it is ErrTargetStopping too, or, unnamed, the
// next voter furthest along is tried. See TransferLeadership for the rest.
func (n *Node) MoveLeader(ctx context.Context, to string) (string, error) {
	tried := map[uint64]bool{}
	for {
		st := n.Status()
		if !st.IsLeader {
			return "", &NotLeaderError{Leader: st.Leader}
		}
		target, err := n.moveTarget(to, st, tried)
		if err != nil {
			return "", err
		}
		n.abandoned.Store(nil)
		err = n.TransferLeadership(ctx, target.ID)
		if why := n.abandonedWhy(target.ID); why != nil && errors.Is(err, ErrTransferAborted) {
			err = why
		}
		switch {
		case (errors.Is(err, ErrTargetStopping) || errors.Is(err, ErrTargetUnreachable)) && to == "":
			tried[target.ID] = true
			continue // the next furthest along
		case errors.Is(err, ErrTargetStopping):
			return "", fmt.Errorf("%w: %s said it is stopping (told to stop); this member still leads", ErrTargetStopping, to)
		case errors.Is(err, ErrTargetUnreachable):
			return "", fmt.Errorf("%w: %s (it stopped, or is cut off); this member still leads", ErrTargetUnreachable, to)
		case err != nil:
			return "", err
		}
		break
	}
	for _, m := range n.Members() {
		if m.ID == n.Status().Leader {
			return m.Name, nil
		}
	}
	return "", nil // it no longer leads, and knows no leader yet
}

// better reports whether member a is a better target of an unnamed move
// than b: one heard from within an election timeout before one that was
// not (a follower down or cut off would only let the transfer lapse), then
// the one whose log is furthest along.
func better(st Status, a, b uint64) bool {
	if st.Active[a] != st.Active[b] {
		return st.Active[a]
	}
	return st.Match[a] > st.Match[b]
}

// moveTarget is the member MoveLeader hands leadership to; unnamed, none
// of those tried already.
func (n *Node) moveTarget(to string, st Status, tried map[uint64]bool) (Member, error) {
	var best Member
	for _, m := range n.Members() {
		voter := m.ID != n.cfg.ID && !m.Learner && !n.peerStopping(m.ID) && !tried[m.ID]
		switch {
		case to != "" && m.Name == to && m.ID == n.cfg.ID:
			return Member{}, fmt.Errorf("%w: %s", ErrAlreadyLeader, to)
		case to != "" && m.Name == to && m.Learner:
			return Member{}, fmt.Errorf("%w: %s is a learner (added, and not caught up yet), and a learner cannot lead", ErrNotVoter, to)
		case to != "" && m.Name == to && n.peerStopping(m.ID):
			return Member{}, fmt.Errorf("%w: %s said it is stopping (told to stop, and not started since)", ErrTargetStopping, to)
		case to != "" && m.Name == to:
			return m, nil
		case to == "" && voter && (best.ID == 0 || better(st, m.ID, best.ID)):
			best = m
		}
	}
	switch {
	case to != "":
		return Member{}, fmt.Errorf("%w: no member is named %s", ErrNotMember, to)
	case best.ID == 0 && len(tried) > 0:
		return Member{}, fmt.Errorf("%w: each that was tried stopped, or stopped answering", ErrNoTarget)
	case best.ID == 0:
		return Member{}, ErrNoTarget
	}
	return best, nil
}
