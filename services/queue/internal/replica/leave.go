package replica

// A member told to stop takes no leadership. Raft hands leadership over
// with MsgTimeoutNow, which makes the member that receives it campaign at
// once; a member that campaigns and then stops (its listener closed before
// it had won, or after, with nobody to hand leadership on to) leaves the
// queue without a leader for an election timeout, and a leader whose
// MsgTimeoutNow a stopped member never received refuses writes for as
// long, until raft gives the transfer up. Both happened when a
// MoveLeader raced a SIGTERM of the member it named. So Leave, called
// when the member is told to stop:
//
//   - makes the Ready loop drop every MsgTimeoutNow from then on;
//   - tells every peer, in the header of a batch sent at once
//     (transport.SetStopping), so that a leader handing this member
//     leadership gives the transfer up within a round trip
//     (abandonTransfer), and hands it none from then on (moveTarget,
//     transfer);
//   - waits for the election a MsgTimeoutNow stepped just before started,
//     and hands on whatever leadership this member holds (MoveLeader),
//     while its listener still serves the votes and appends that takes.
//
// A member that stops at once after Leave may close its connections
// before that batch is on the wire. Its leader then learns it from the
// stream to it breaking (the transport's ReportUnreachable), and gives a
// transfer to it up as well: a member that does not answer will not
// campaign either.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// MoveLeader's errors for a member leadership was being handed to, or
// was to be: this member still leads.
var (
	// ErrTargetStopping: it said it is stopping, and takes no leadership.
	ErrTargetStopping = errors.New("replica: the member is stopping and takes no leadership")
	// ErrTargetUnreachable: the stream to it broke while leadership was
	// handed to it (it stopped, or is cut off).
	ErrTargetUnreachable = errors.New("replica: the member stopped answering while leadership was handed to it")
)

// abandoned is the transfer the loop gave up last, and why.
type abandoned struct {
	to  uint64
	why error
}

// leaveCall is one Leave waiting for the loop: the loop answers with raft's
// state as it began to drop MsgTimeoutNow.
type leaveCall struct {
	done chan raft.StateType // buffered 1
}

// Leave makes this member take no leadership from now on, tells its peers
// so, and hands on the leadership it holds, if any, to the voter whose log
// is furthest along (MoveLeader). led says whether it held leadership (or
// was winning it, from a transfer begun before Leave), and to names the
// member that leads after it. Call it when the member is told to stop,
// before its listeners close; ctx bounds the whole (two election timeouts
// let a transfer finish or be given up).
func (n *Node) Leave(ctx context.Context) (to string, led bool, err error) {
	c := &leaveCall{done: make(chan raft.StateType, 1)}
	select {
	case n.leavec <- c:
	case <-n.done:
		return "", false, n.Err()
	case <-ctx.Done():
		return "", false, fmt.Errorf("replica: leave: %w", ctx.Err())
	}
	var state raft.StateType
	select {
	case state = <-c.done:
	case <-n.done:
		return "", false, n.Err()
	}
	n.tr.SetStopping()
	if state == raft.StateCandidate {
		// Campaigning, most likely on a MsgTimeoutNow stepped just before:
		// it wins within a round trip, and then hands on below.
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for st := n.Status(); !st.IsLeader && st.Campaigning; st = n.Status() {
			select {
			case <-t.C:
			case <-n.done:
				return "", false, n.Err()
			case <-ctx.Done():
				return "", true, fmt.Errorf("replica: leave: waiting for this member's election to end: %w", ctx.Err())
			}
		}
	}
	if !n.Status().IsLeader {
		return "", false, nil
	}
	to, err = n.MoveLeader(ctx, "")
	return to, true, err
}

// leave is the loop's side of Leave.
func (n *Node) leave(c *leaveCall) {
	if !n.leaving {
		n.log.Info("this member is stopping: it takes no leadership from now on")
	}
	n.leaving = true
	c.done <- n.rn.BasicStatus().RaftState
}

// refuseTransfer reports whether the loop drops m: a MsgTimeoutNow, the
// leader's order to campaign at once, once this member is leaving.
func (n *Node) refuseTransfer(m *raftpb.Message) bool {
	if m.Type != raftpb.MsgTimeoutNow || !n.leaving {
		return false
	}
	n.log.Info("refused the leadership handed to this member: it is stopping", "from", m.From, "term", m.Term)
	return true
}

// peerStopping reports whether member id said, in its last batch, that it
// is stopping.
func (n *Node) peerStopping(id uint64) bool {
	n.levelsMu.Lock()
	defer n.levelsMu.Unlock()
	return n.stopping[id]
}

// abandonTransfer gives up a transfer of this leader's leadership to a
// member that will not campaign: one that said it is stopping (unreachable
// false), or one the transport reported unreachable. Raft would otherwise
// go on dropping proposals for an election timeout before it gave up by
// itself. Raft abandons a transfer when asked for another, and one to the
// leader itself starts none.
func (n *Node) abandonTransfer(unreachable uint64) {
	bs := n.rn.BasicStatus()
	to := bs.LeadTransferee
	if bs.RaftState != raft.StateLeader || to == raft.None {
		return
	}
	var why error
	switch {
	case n.peerStopping(to):
		why = ErrTargetStopping
	case to == unreachable:
		why = ErrTargetUnreachable
	default:
		return
	}
	n.rn.TransferLeader(n.cfg.ID)
	if n.rn.BasicStatus().LeadTransferee != raft.None {
		return // cannot happen: raft aborts before it looks at the target
	}
	n.abandoned.Store(&abandoned{to: to, why: why})
	// At once, not at the next Ready: Enqueue takes proposals again.
	n.statusMu.Lock()
	n.status.Transferring = false
	n.statusMu.Unlock()
	n.log.Info("gave up handing leadership over", "to", to, "term", bs.Term, "why", why)
}

// abandonedWhy is why the loop gave up the last transfer to id, nil if it
// did not (raft gave it up, or none was).
func (n *Node) abandonedWhy(id uint64) error {
	if a := n.abandoned.Load(); a != nil && a.to == id {
		return a.why
	}
	return nil
}
