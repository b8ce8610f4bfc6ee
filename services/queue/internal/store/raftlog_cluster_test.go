package store

import (
	"fmt"
	"io"
	"log"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// raftMember is one in-process Raft member on a RaftLog: its state machine
// is the list of proposals it applied, in order.
type raftMember struct {
	id      uint64
	log     *RaftLog
	rn      *raft.RawNode
	cs      raftpb.ConfState
	applied []string
	index   uint64 // applied index
	snaps   int    // snapshots received from a leader
}

var quietRaft = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

func decodeApplied(data []byte) []string {
	if len(data) == 0 {
		return nil
	}
	return strings.Split(string(data), "\n")
}

// startRaftMember opens the member's log and builds its node from it, as a
// restarted process would: the state machine from the snapshot, then the
// committed entries after it, which the node hands out again.
func startRaftMember(t *testing.T, id uint64, dir string, bootstrap bool) *raftMember {
	t.Helper()
	l, err := OpenRaftLog(RaftLogOptions{Dir: dir})
	if err != nil {
		t.Fatalf("member %d: OpenRaftLog: %v", id, err)
	}
	m := &raftMember{id: id, log: l}
	if snap, _ := l.Storage().Snapshot(); !raft.IsEmptySnap(snap) {
		m.applied, m.index, m.cs = decodeApplied(snap.Data), snap.Metadata.Index, snap.Metadata.ConfState
	}
	m.rn, err = raft.NewRawNode(&raft.Config{
		ID: id, ElectionTick: 10, HeartbeatTick: 1, Storage: l.Storage(), Applied: m.index,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true, Logger: quietRaft,
	})
	if err != nil {
		t.Fatalf("member %d: NewRawNode: %v", id, err)
	}
	if bootstrap {
		if err := m.rn.Bootstrap([]raft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}); err != nil {
			t.Fatalf("member %d: Bootstrap: %v", id, err)
		}
	}
	return m
}

// raftCluster passes messages between its members directly; a member that
// is down neither ticks nor receives.
type raftCluster struct {
	t       *testing.T
	members map[uint64]*raftMember
	down    map[uint64]bool
}

// ready runs one Ready of m in the documented order: persist (Save), then
// send, then apply, then Advance.
func (c *raftCluster) ready(m *raftMember) []raftpb.Message {
	rd := m.rn.Ready()
	if err := m.log.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
		c.t.Fatalf("member %d: Save: %v", m.id, err)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		m.applied, m.index, m.cs = decodeApplied(rd.Snapshot.Data), rd.Snapshot.Metadata.Index, rd.Snapshot.Metadata.ConfState
		m.snaps++
	}
	for _, e := range rd.CommittedEntries {
		if e.Index <= m.index {
			continue
		}
		switch e.Type {
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := cc.Unmarshal(e.Data); err != nil {
				c.t.Fatalf("member %d: conf change at %d: %v", m.id, e.Index, err)
			}
			m.cs = *m.rn.ApplyConfChange(cc)
		case raftpb.EntryNormal:
			if len(e.Data) > 0 {
				m.applied = append(m.applied, string(e.Data))
			}
		}
		m.index = e.Index
	}
	m.rn.Advance(rd)
	return rd.Messages
}

// runUntil ticks every member that is up, runs their Readys and delivers
// their messages, until cond holds; it fails the test after a bound of
// rounds (no clock: a round is a tick and everything it causes).
func (c *raftCluster) runUntil(what string, cond func() bool) {
	c.t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		var msgs []raftpb.Message
		for _, id := range []uint64{1, 2, 3} {
			if m := c.members[id]; !c.down[id] {
				m.rn.Tick()
			}
		}
		for settle := 0; settle < 50; settle++ {
			busy := false
			for _, id := range []uint64{1, 2, 3} {
				if m := c.members[id]; !c.down[id] && m.rn.HasReady() {
					msgs = append(msgs, c.ready(m)...)
					busy = true
				}
			}
			for _, msg := range msgs {
				if !c.down[msg.To] {
					_ = c.members[msg.To].rn.Step(msg)
				}
			}
			if !busy && len(msgs) == 0 {
				break
			}
			msgs = msgs[:0]
		}
	}
	c.t.Fatalf("%s: not reached in 2000 rounds", what)
}

func (c *raftCluster) leader() *raftMember {
	for _, id := range []uint64{1, 2, 3} {
		if m := c.members[id]; !c.down[id] && m.rn.BasicStatus().RaftState == raft.StateLeader {
			return m
		}
	}
	return nil
}

func (c *raftCluster) propose(from, to int) {
	c.t.Helper()
	c.runUntil("a leader", func() bool { return c.leader() != nil })
	l := c.leader()
	for i := from; i < to; i++ {
		if err := l.rn.Propose(fmt.Appendf(nil, "p-%d", i)); err != nil {
			c.t.Fatalf("propose p-%d on member %d: %v", i, l.id, err)
		}
	}
}

func (c *raftCluster) allApplied(n int, ids ...uint64) func() bool {
	return func() bool {
		for _, id := range ids {
			if len(c.members[id].applied) < n {
				return false
			}
		}
		return true
	}
}

func wantApplied(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("p-%d", i))
	}
	return out
}

func (c *raftCluster) agree(when string, n int) {
	c.t.Helper()
	want := wantApplied(n)
	for _, id := range []uint64{1, 2, 3} {
		if got := c.members[id].applied; !slices.Equal(got, want) {
			c.t.Fatalf("%s: member %d applied %d proposals %v..., want p-0..p-%d in order", when, id, len(got), got[:min(len(got), 5)], n-1)
		}
	}
}

// Three members on RaftLogs elect a leader and commit proposals; one is cut
// off while the others compact their logs past it, and catches up from a
// leader's snapshot; then all three are closed and rebuilt from their
// directories alone, agree on what was committed, and go on committing.
func TestRaftLogThreeMembers(t *testing.T) {
	base := t.TempDir()
	dir := func(id uint64) string { return filepath.Join(base, fmt.Sprintf("m%d", id)) }
	c := &raftCluster{t: t, members: map[uint64]*raftMember{}, down: map[uint64]bool{}}
	for _, id := range []uint64{1, 2, 3} {
		c.members[id] = startRaftMember(t, id, dir(id), true)
	}
	closeAll := func() {
		for _, m := range c.members {
			if err := m.log.Close(); err != nil {
				t.Fatalf("member %d: Close: %v", m.id, err)
			}
		}
	}
	defer func() { closeAll() }()

	c.propose(0, 30)
	c.runUntil("30 proposals applied everywhere", c.allApplied(30, 1, 2, 3))
	c.agree("after 30 proposals", 30)

	// Member 3 is cut off; the other two commit more and compact their logs
	// to what they applied, so 3 can only catch up from a snapshot.
	c.down[3] = true
	behind, _ := c.members[3].log.Storage().LastIndex()
	c.propose(30, 50)
	c.runUntil("50 proposals applied on 1 and 2", c.allApplied(50, 1, 2))
	for _, id := range []uint64{1, 2} {
		m := c.members[id]
		if err := m.log.CreateSnapshot(m.index, &m.cs, []byte(strings.Join(m.applied, "\n"))); err != nil {
			t.Fatalf("member %d: CreateSnapshot: %v", id, err)
		}
		if first, _ := m.log.Storage().FirstIndex(); first <= behind+1 {
			t.Fatalf("member %d: first index %d after compaction, member 3 is at %d: no snapshot needed", id, first, behind)
		}
	}
	c.down[3] = false
	c.runUntil("member 3 caught up", c.allApplied(50, 3))
	if c.members[3].snaps == 0 {
		t.Fatal("member 3 caught up without a snapshot: the test did not test one")
	}
	c.propose(50, 60)
	c.runUntil("60 proposals applied everywhere", c.allApplied(60, 1, 2, 3))
	c.agree("after 60 proposals", 60)

	// Rebuilt from disk alone: the logs hold everything raft needs.
	closeAll()
	for _, id := range []uint64{1, 2, 3} {
		c.members[id] = startRaftMember(t, id, dir(id), false)
	}
	c.runUntil("60 proposals re-applied after the restart", c.allApplied(60, 1, 2, 3))
	c.agree("after the restart", 60)
	c.propose(60, 70)
	c.runUntil("70 proposals applied everywhere", c.allApplied(70, 1, 2, 3))
	c.agree("after 70 proposals", 70)
	for _, m := range c.members {
		if m.log.Repairs() != 0 {
			t.Errorf("member %d repaired a torn write after clean shutdowns", m.id)
		}
	}
}
