package replica

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
)

// TestLeavingMemberTakesNoLeadership: a follower that Leaves tells the
// leader, which hands it no leadership (named, ErrTargetStopping; unnamed,
// the other follower), and still leads. A leader that has not heard yet
// (its record of the word cleared, as when the word is still on its way)
// starts a transfer; the follower drops the order to campaign, its next
// batch says it is stopping, and the leader gives the transfer up
// (ErrTargetStopping) rather than wait for raft to after an election
// timeout (ErrTransferAborted), and leads on.
func TestLeavingMemberTakesNoLeadership(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 10)
	others := c.others(lead)
	leaving, other := others[0], others[1]
	to, led, err := leaving.node.Leave(ctx)
	if err != nil || led || to != "" {
		t.Fatalf("Leave of a follower: %q %v %v; want nothing led, nothing handed on", to, led, err)
	}
	eventually(t, "the leader hears that "+leaving.name+" is stopping", func() bool { return lead.node.peerStopping(leaving.id) })
	if _, err := lead.node.MoveLeader(ctx, leaving.name); !errors.Is(err, ErrTargetStopping) {
		t.Errorf("MoveLeader to %s, stopping: %v, want ErrTargetStopping", leaving.name, err)
	}
	if err := lead.node.TransferLeadership(ctx, leaving.id); !errors.Is(err, ErrTargetStopping) {
		t.Errorf("TransferLeadership to %s, stopping: %v, want ErrTargetStopping", leaving.name, err)
	}
	if st := lead.node.Status(); !st.IsLeader || st.Transferring {
		t.Fatalf("after the refusals the leader: %+v, want it leading, handing nothing over", st)
	}

	lead.node.heard(leaving.id, format.BuildLevel, false) // the word not heard yet
	if _, err := lead.node.MoveLeader(ctx, leaving.name); !errors.Is(err, ErrTargetStopping) {
		t.Errorf("MoveLeader to %s before the leader heard it is stopping: %v, want ErrTargetStopping", leaving.name, err)
	}
	if !strings.Contains(leaving.logs.String(), "refused the leadership handed to this member") {
		t.Errorf("%s did not drop the order to campaign:\n%s", leaving.name, leaving.logs.String())
	}
	if c.leader(0) != lead {
		t.Fatalf("%s no longer leads after the transfers it gave up", lead.name)
	}
	proposeRange(t, ctx, lead, 10, 20)

	got, err := lead.node.MoveLeader(ctx, "")
	if err != nil || got != other.name {
		t.Fatalf("MoveLeader to the voter furthest along: %q %v; want %s, the one not stopping", got, err, other.name)
	}
	proposeRange(t, ctx, c.leader(lead.id), 20, 30)
	c.agree(30)
}

// TestLeavingLeaderHandsOver: a leader that Leaves hands its leadership to
// another member, and says to whom.
func TestLeavingLeaderHandsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 10)
	to, led, err := lead.node.Leave(ctx)
	if err != nil || !led || to == "" || to == lead.name {
		t.Fatalf("Leave of the leader: %q %v %v; want leadership handed to another member", to, led, err)
	}
	if next := c.leader(lead.id); next.name != to {
		t.Fatalf("after Leave %s leads, not %s as Leave said", next.name, to)
	}
	proposeRange(t, ctx, c.leader(lead.id), 10, 20)
	c.agree(20)
}

// TestTransferToAnUnreachableMember: leadership handed to a member that
// receives nothing any more (its server stopped, as a member that stops
// closes it) is given up as soon as the transport finds the member
// unreachable (ErrTargetUnreachable), not after raft's election timeout
// (ErrTransferAborted); the leader leads on and commits with the other.
func TestTransferToAnUnreachableMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 10)
	c.agree(10)
	gone := c.others(lead)[0]
	gone.unserve()
	gone.up = false
	if _, err := lead.node.MoveLeader(ctx, gone.name); !errors.Is(err, ErrTargetUnreachable) {
		t.Fatalf("MoveLeader to %s, unreachable: %v, want ErrTargetUnreachable", gone.name, err)
	}
	if st := lead.node.Status(); !st.IsLeader || st.Transferring {
		t.Fatalf("after the transfer was given up the leader: %+v, want it leading, handing nothing over", st)
	}
	proposeRange(t, ctx, lead, 10, 20)
}
