package transport

import (
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestLeaderOutsideTheConfigurationIsLearnt stages a member whose log has
// not reached the change that added the queue's leader (it was down, or
// its log was cut, while the membership changed): the leader's messages
// must reach its node and its node's answers the leader, or it waits for
// good for a leader it cannot hear; anything else from that sender is
// dropped, and a removed member is never taken back.
func TestLeaderOutsideTheConfigurationIsLearnt(t *testing.T) {
	lis1, lis3 := listen(t), listen(t)
	m1 := startMember(t, 1, lis1, nil, memberOpts{})
	m3 := startMember(t, 3, lis3, map[uint64]string{1: m1.addr}, memberOpts{})

	m3.tr.Send([]raftpb.Message{heartbeat(3, 1, 5)})
	eventually(t, "member 1 given the heartbeat of a leader it does not know", func() bool { return m1.inbox.from(3) == 1 })
	if !strings.Contains(m1.logs.String(), "does not hold sends a leader's messages") {
		t.Errorf("member 1 took a sender outside its configuration without saying so:\n%s", m1.logs.String())
	}
	m1.tr.Send([]raftpb.Message{{Type: raftpb.MsgHeartbeatResp, From: 1, To: 3, Term: 1}})
	eventually(t, "member 1's answer at the address member 3 gave", func() bool { return m3.inbox.from(1) == 1 })

	// A vote request is not a leader's: dropped, however often it comes.
	vote := raftpb.Message{Type: raftpb.MsgVote, From: 3, To: 1, Term: 9}
	m3.tr.Send([]raftpb.Message{vote, heartbeat(3, 1, 6)})
	eventually(t, "the heartbeat after the vote request", func() bool { return m1.inbox.from(3) == 2 })
	if got := m1.counter(t, DroppedMetric, map[string]string{"direction": "in", "reason": reasonUnknownSender}); got != 1 {
		t.Errorf("dropped{reason=unknown_sender} = %v, want the vote request", got)
	}
	for _, m := range m1.inboxOf(3) {
		if m.Type == raftpb.MsgVote {
			t.Fatalf("a vote request from a sender outside the configuration reached the node")
		}
	}

	// Once member 1 applies the change that added member 3, all of it
	// is taken.
	if err := m1.tr.AddPeer(3, m3.addr); err != nil {
		t.Fatal(err)
	}
	m3.tr.Send([]raftpb.Message{vote})
	eventually(t, "the vote request of a peer of the configuration", func() bool { return m1.inbox.from(3) == 3 })

	// Removed, it is refused, its leader's messages included.
	m1.tr.RemovePeer(3)
	before := m1.counter(t, DroppedMetric, map[string]string{"direction": "in", "reason": reasonUnknownSender})
	eventually(t, "a removed member's heartbeats refused", func() bool {
		m3.tr.Send([]raftpb.Message{heartbeat(3, 1, 7)})
		return m1.counter(t, DroppedMetric, map[string]string{"direction": "in", "reason": reasonUnknownSender}) > before
	})
	if n := m1.inbox.from(3); n != 3 {
		t.Errorf("member 1 was given %d messages from member 3, want 3: a removed member was taken back", n)
	}
}
