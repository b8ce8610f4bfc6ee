package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"

	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestRaftPanicOnAPeersMessageStopsTheNodeAlone: a heartbeat whose commit
// index is past the follower's log (what a leader whose log is not this
// member's would send) makes raft panic inside Step. The member must not
// crash: its node stops with ErrCannotFollow, saying why, and the other
// two go on committing.
func TestRaftPanicOnAPeersMessageStopsTheNodeAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 5)
	c.agree(5)
	var victim *member
	for _, m := range c.members {
		if m != lead {
			victim = m
		}
	}
	st := victim.node.Status()
	victim.node.recv(ctx, raftpb.Message{Type: raftpb.MsgHeartbeat, From: lead.id, To: victim.id, Term: st.Term, Commit: 1 << 40})
	select {
	case <-victim.node.Done():
	case <-ctx.Done():
		t.Fatal("the node did not stop after raft refused a message")
	}
	err := victim.node.Err()
	if !errors.Is(err, ErrCannotFollow) || !errors.Is(err, ErrStopped) {
		t.Fatalf("the node stopped with %v, want ErrCannotFollow (an ErrStopped)", err)
	}
	// Stopped by a peer, not closed: Close answers the same error; the log
	// is the caller's to close.
	victim.up, victim.open = false, false
	if cerr := victim.node.Close(); !errors.Is(cerr, ErrCannotFollow) {
		t.Errorf("Close after the refusal: %v", cerr)
	}
	victim.unserve()
	if err := victim.rlog.Close(); err != nil {
		t.Error(err)
	}
	proposeRange(t, ctx, lead, 5, 10)
	c.agree(10)
}

// TestNoSnapshotToSendIsNoPanic: raft asks the storage for a snapshot when
// a member's log does not meet the leader's; a log never compacted has
// none, and raft panics on an empty one ("need non-empty snapshot", which
// killed a leader that met a member of another history). The node's
// storage answers that none is available yet instead.
func TestNoSnapshotToSendIsNoPanic(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	s := nodeStorage{MemoryStorage: lead.rlog.MemoryStorage(), n: lead.node}
	// Only the Ready loop calls it, so the test takes the loop's place
	// for a moment: the node is closed first.
	lead.stop()
	snap, err := s.Snapshot()
	if !errors.Is(err, raft.ErrSnapshotTemporarilyUnavailable) {
		t.Fatalf("Snapshot of a log never compacted: %v, %v; want ErrSnapshotTemporarilyUnavailable", snap.Metadata, err)
	}
}

// TestForceNewCluster: the log of one member of three, rewritten by
// ForceNewCluster while all three are stopped, starts a queue of one that
// elects itself and holds every record the three committed, with the
// other members out of its configuration. An empty log and a member that
// is not a voter are refused.
func TestForceNewCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 20)
	want := c.agree(20)
	for _, m := range c.members {
		m.stop()
	}
	survivor := c.members[2]
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: survivor.dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ForceNewCluster(rlog, 99, nil); err == nil {
		t.Error("ForceNewCluster for an id that is not a voter: accepted")
	}
	removed, err := ForceNewCluster(rlog, survivor.id, survivor.names)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []uint64{1, 3}) {
		t.Errorf("removed %v, want the other two members, 1 and 3", removed)
	}
	if err := rlog.Close(); err != nil {
		t.Fatal(err)
	}

	survivor.start(nil)
	eventually(t, "the survivor leads alone", func() bool { return survivor.node.Status().IsLeader })
	if ms := survivor.node.Members(); len(ms) != 1 || ms[0].ID != survivor.id {
		t.Errorf("members after ForceNewCluster: %+v, want the survivor alone", ms)
	}
	recs, _, errs := survivor.sm.snapshot()
	if len(errs) > 0 || !slices.Equal(recs, want) {
		t.Fatalf("the survivor holds %d records (%v), want the %d the three committed", len(recs), errs, len(want))
	}
	// It commits alone.
	if _, err := survivor.node.Propose(ctx, 1, []byte("after")); err != nil {
		t.Fatalf("Propose on the queue of one: %v", err)
	}

	empty, err := store.OpenRaftLog(store.RaftLogOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if _, err := ForceNewCluster(empty, 1, nil); !errors.Is(err, ErrNothingToForce) {
		t.Errorf("ForceNewCluster of an empty log: %v, want ErrNothingToForce", err)
	}
}

// TestConfigurationAt follows the configuration changes this package
// makes through a log: adds, learners, removals, and a client address's
// update, which changes no vote.
func TestConfigurationAt(t *testing.T) {
	ms := raft.NewMemoryStorage()
	var ents []raftpb.Entry
	add := func(typ raftpb.ConfChangeType, id uint64) {
		cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: typ, NodeID: id}}}
		data, err := cc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, raftpb.Entry{Term: 1, Index: uint64(len(ents)) + 1, Type: raftpb.EntryConfChangeV2, Data: data})
	}
	for _, id := range []uint64{1, 2, 3} {
		add(raftpb.ConfChangeAddNode, id)
	}
	add(raftpb.ConfChangeRemoveNode, 2)
	add(raftpb.ConfChangeAddNode, 4)
	add(raftpb.ConfChangeAddLearnerNode, 5)
	add(raftpb.ConfChangeUpdateNode, 3)
	ents = append(ents, raftpb.Entry{Term: 1, Index: uint64(len(ents)) + 1, Type: raftpb.EntryNormal, Data: []byte("x")})
	if err := ms.Append(ents); err != nil {
		t.Fatal(err)
	}
	voters, learners, err := configurationAt(ms, raftpb.ConfState{}, 1, uint64(len(ents)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(voters, learners), fmt.Sprint([]uint64{1, 3, 4}, []uint64{5}); got != want {
		t.Errorf("configuration %s, want %s", got, want)
	}
}

// TestMoveLeader: the leader hands leadership to the member named, or,
// unnamed, to a voter, which then leads in the next term without an
// election timeout's wait; every record proposed before is kept. Its own
// name is ErrAlreadyLeader (the wish holds already), a name no member has
// ErrNotMember; neither changes anything.
func TestMoveLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 10)
	before := lead.node.Status().Term
	if _, err := lead.node.MoveLeader(ctx, lead.name); !errors.Is(err, ErrAlreadyLeader) {
		t.Errorf("MoveLeader to the leader itself: %v, want ErrAlreadyLeader", err)
	}
	if _, err := lead.node.MoveLeader(ctx, "nobody"); !errors.Is(err, ErrNotMember) {
		t.Errorf("MoveLeader to a name no member has: %v, want ErrNotMember", err)
	}
	var to *member
	for _, m := range c.members {
		if m != lead {
			to = m
		}
	}
	term := lead.node.Status().Term
	if term != before || c.leader(0) != lead {
		t.Fatalf("MoveLeader to the leader itself moved leadership: term %d, was %d", term, before)
	}
	got, err := lead.node.MoveLeader(ctx, to.name)
	if err != nil || got != to.name {
		t.Fatalf("MoveLeader to %s: %q, %v", to.name, got, err)
	}
	if next := c.leader(0); next != to || next.node.Status().Term != term+1 {
		t.Fatalf("after MoveLeader to %s, %s leads in term %d (was %d)", to.name, next.name, next.node.Status().Term, term)
	}
	if _, err := lead.node.MoveLeader(ctx, ""); !errors.Is(err, ErrNotLeader) {
		t.Errorf("MoveLeader on the old leader: %v, want ErrNotLeader", err)
	}
	got, err = to.node.MoveLeader(ctx, "")
	if err != nil || got == to.name || got == "" {
		t.Fatalf("MoveLeader to whichever voter: %q, %v", got, err)
	}
	proposeRange(t, ctx, c.leader(0), 10, 20)
	c.agree(20)
}

// TestClusterLevel: the leader hears every voter's format level with its
// traffic; the queue's level is the lowest, a member that says none (a
// release before levels) counting as 1.
func TestClusterLevel(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	eventually(t, "the leader has heard every member's level", func() bool {
		for _, m := range c.members {
			if lead.node.MemberLevel(m.id) != format.BuildLevel {
				return false
			}
		}
		return true
	})
	if got := lead.node.ClusterLevel(); got != format.BuildLevel {
		t.Fatalf("ClusterLevel = %d, want this build's %d", got, format.BuildLevel)
	}
	var other uint64
	for id := range c.members {
		if id != lead.id {
			other = id
		}
	}
	lead.node.heard(other, 0, false) // as a member of an earlier release sends
	if got := lead.node.MemberLevel(other); got != 1 {
		t.Errorf("a member that says no level: %d, want 1", got)
	}
}
