package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/batonrun/baton/services/queue/internal/format"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// clientAddrs is every member's client address as m's node knows it, by
// name.
func clientAddrs(m *member) map[string]string {
	out := map[string]string{}
	for _, mm := range m.node.Members() {
		out[mm.Name] = mm.ClientAddr
	}
	return out
}

// wantClientAddrs is every member's own client address, by name.
func (c *cluster) wantClientAddrs() map[string]string {
	out := map[string]string{}
	for _, m := range c.members {
		out[m.name] = m.client
	}
	return out
}

// awaitClientAddrs waits until every member that is up knows every
// member's client address.
func (c *cluster) awaitClientAddrs(when string) {
	c.t.Helper()
	want := c.wantClientAddrs()
	for _, m := range c.members {
		if !m.up {
			continue
		}
		eventually(c.t, fmt.Sprintf("%s: member %s knows every client address %v (knows %v)", when, m.name, want, clientAddrs(m)), func() bool {
			return maps.Equal(clientAddrs(m), want)
		})
	}
}

// others are the cluster's members but m.
func (c *cluster) others(m *member) []*member {
	var out []*member
	for _, o := range c.members {
		if o != m {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *member) int { return strings.Compare(a.name, b.name) })
	return out
}

// askToRejoin runs Rejoin for m, stopped and wiped, as a member on an
// empty directory does: answering the others with the empty responder
// meanwhile.
func (c *cluster) askToRejoin(ctx context.Context, m *member) (Decision, error) {
	stop := serveEmpty(c.t, m.addr)
	defer stop()
	peers := map[string]string{}
	for _, o := range c.others(m) {
		peers[o.name] = o.addr
	}
	return Rejoin(ctx, JoinConfig{ClusterID: testCluster, Name: m.name, Addr: m.addr, Peers: peers, Retry: 50 * time.Millisecond})
}

// startJoined starts m, which Rejoin let back under d.ID, with Join on its
// empty log, among d.Members.
func (c *cluster) startJoined(m *member, d Decision) {
	c.t.Helper()
	if d.Bootstrap || d.ID == 0 || d.ID == m.id {
		c.t.Fatalf("Rejoin decided %+v for member %s (old id %d), which lost its disk", d, m.name, m.id)
	}
	m.peers, m.names = map[uint64]string{}, map[uint64]string{}
	for _, mm := range d.Members {
		m.peers[mm.ID], m.names[mm.ID] = mm.Addr, mm.Name
	}
	delete(c.members, m.id)
	m.id, m.join = d.ID, true
	c.members[d.ID] = m
	m.start(nil)
}

// wipe stops m and deletes its log: a lost disk.
func (m *member) wipe() {
	m.t.Helper()
	m.stop()
	if err := os.RemoveAll(m.dir); err != nil {
		m.t.Fatal(err)
	}
}

// compactAll makes sure the log of every member that is up is compacted
// at what it has applied, configuration changes included: raft's asking
// for a snapshot may have done it already, and a change applied meanwhile
// (a member's publication) has it try again.
func (c *cluster) compactAll(ctx context.Context) {
	c.t.Helper()
	for _, m := range c.members {
		if !m.up {
			continue
		}
		var err error
		eventually(c.t, fmt.Sprintf("member %s compacted its log at what it applied", m.name), func() bool {
			data, last := m.sm.encode()
			index := m.node.Status().Applied
			if index < last {
				return false
			}
			err = m.node.Compact(ctx, index, 1, data)
			snap, _ := m.rlog.MemoryStorage().Snapshot()
			if errors.Is(err, ErrCompactRefused) && snap.Metadata.Index < index {
				return false
			}
			return true
		})
		if err != nil && !errors.Is(err, ErrCompactRefused) {
			c.t.Fatalf("member %s: Compact: %v", m.name, err)
		}
	}
}

// TestClientAddrsPublished: every member publishes its client address,
// and every member's Members ends up with all three. A member that lost
// its disk learns the others' from the leader's snapshot (the entries
// that recorded them are compacted away); a member restarted on its own
// compacted log has them from its snapshot before it applies anything;
// and a member restarted with another address publishes that one, which
// every member then holds.
func TestClientAddrsPublished(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	c.awaitClientAddrs("at the start")
	proposeRange(t, ctx, lead, 0, 20)
	c.agree(20)

	// A lost disk: the rejoined member has only the leader's snapshot.
	lost := c.others(lead)[0]
	lost.wipe()
	proposeRange(t, ctx, lead, 20, 30)
	c.agree(30)
	c.compactAll(ctx)
	d, err := c.askToRejoin(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	c.startJoined(lost, d)
	c.agree(30)
	if h := lost.sm.hooks(); !slices.ContainsFunc(h, func(s string) bool { return strings.HasPrefix(s, "restore ") }) {
		t.Fatalf("the rejoined member caught up without a snapshot: hooks %v", h)
	}
	c.awaitClientAddrs("after a member restored the leader's snapshot")

	// A restart on a compacted log: the snapshot's members, at once.
	c.compactAll(ctx)
	other := c.others(lead)[0]
	other.stop()
	other.start(nil)
	if got, want := clientAddrs(other), c.wantClientAddrs(); !maps.Equal(got, want) {
		t.Fatalf("restarted on its snapshot, member %s knows the client addresses %v, want %v", other.name, got, want)
	}

	// Another address at a restart.
	moved := c.others(c.leader(0))[1]
	moved.stop()
	moved.client = testClientAddr(moved.name, 2)
	moved.start(nil)
	c.awaitClientAddrs("after a member restarted with another client address")
	proposeRange(t, ctx, c.leader(0), 30, 40)
	c.agree(40)
}

// TestSnapshotDataVersions: snapshot data round-trips the members with
// their client addresses and the tombstones, and the version 1 data that
// earlier versions wrote (and logs on disk still hold) reads as members
// without client addresses and no tombstones; a node started on a log
// holding one restores it.
func TestSnapshotDataVersions(t *testing.T) {
	ms := memberState{
		members: map[uint64]Member{
			7: {ID: 7, Name: "m1", Addr: "h1:7072", ClientAddr: "h1:7070"},
			9: {ID: 9, Name: "m2", Addr: "h2:7072"},
		},
		removed: map[string]bool{"m3": true, "m4": true},
	}
	got, state, err := parseSnapshotData(snapshotData(ms, []byte("the state"), format.RaftSnapshot.Current))
	if err != nil || string(state.Records) != "the state" || state.Version != format.Records.Current || !maps.Equal(got.members, ms.members) || !maps.Equal(got.removed, ms.removed) {
		t.Fatalf("round trip: %+v %+v %v, want %+v", got, state, err, ms)
	}

	v1 := []byte{1} // format.RaftSnapshot's version 1
	v1 = binary.AppendUvarint(v1, 2)
	for _, m := range []Member{{ID: 1, Name: "a", Addr: "127.0.0.1:1"}, {ID: 2, Name: "b", Addr: "127.0.0.1:2"}} {
		v1 = binary.AppendUvarint(v1, m.ID)
		v1 = binary.AppendUvarint(v1, uint64(len(m.Name)))
		v1 = append(v1, m.Name...)
		v1 = binary.AppendUvarint(v1, uint64(len(m.Addr)))
		v1 = append(v1, m.Addr...)
	}
	v1 = append(v1, "old state"...)
	got, state, err = parseSnapshotData(v1)
	wantV1 := map[uint64]Member{1: {ID: 1, Name: "a", Addr: "127.0.0.1:1"}, 2: {ID: 2, Name: "b", Addr: "127.0.0.1:2"}}
	if err != nil || string(state.Records) != "old state" || !maps.Equal(got.members, wantV1) || len(got.removed) != 0 {
		t.Fatalf("version 1: %+v %+v %v", got, state, err)
	}
	for _, bad := range [][]byte{nil, {3}, snapshotData(ms, nil, format.RaftSnapshot.Current)[:5]} {
		if _, _, err := parseSnapshotData(bad); err == nil {
			t.Errorf("parseSnapshotData(%x) read it", bad)
		}
	}

	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rlog.Close()
	if err := rlog.Save(raftpb.HardState{Term: 1, Commit: 1}, []raftpb.Entry{{Term: 1, Index: 1}}, raftpb.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	if err := rlog.CreateSnapshot(1, &raftpb.ConfState{Voters: []uint64{1, 2}}, v1); err != nil {
		t.Fatal(err)
	}
	var restored string
	n, err := New(Config{ID: 1, ClusterID: testCluster, Peers: map[uint64]string{1: "127.0.0.1:1"}, Log: rlog},
		funcSM{restore: func(data []byte, _ uint64) error { restored = string(data); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if members := n.Members(); restored != "old state" || len(members) != 2 || members[0] != wantV1[1] || members[1] != wantV1[2] {
		t.Fatalf("a node on a log with a version 1 snapshot: members %+v, state %q", members, restored)
	}
}

// TestRemovedMemberIsNotTakenBack: a member MemberRemove took out, started
// again on an empty directory with its old configuration, is refused by
// the leader (FAILED_PRECONDITION, saying to MemberAdd it again) and keeps
// asking without joining, also after the remaining members restarted from
// their snapshots (the tombstone is in them). Once MemberAdd adds it
// again, the same Rejoin takes it in, as a voter.
func TestRemovedMemberIsNotTakenBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 10)
	c.agree(10)
	gone := c.others(lead)[0]
	gone.wipe()
	if _, err := lead.node.RemoveMember(ctx, gone.name); err != nil {
		t.Fatalf("RemoveMember %s: %v", gone.name, err)
	}
	c.compactAll(ctx)
	for _, m := range c.others(gone) {
		m.stop()
	}
	for _, m := range c.others(gone) {
		m.start(nil)
	}
	lead = c.leader(0)
	proposeRange(t, ctx, lead, 10, 20)

	conn, err := grpc.NewClient(lead.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = queuev1.NewRaftServiceClient(conn).Join(ctx, &queuev1.JoinRequest{ClusterId: testCluster, Name: gone.name, PeerAddr: gone.addr, Replace: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "MemberAdd") {
		t.Fatalf("the leader's answer to a removed member's rejoin: %v; want FAILED_PRECONDITION saying to MemberAdd it", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if d, err := c.askToRejoin(short, gone); err == nil || !strings.Contains(err.Error(), "MemberAdd") {
		t.Fatalf("Rejoin of a removed member: %+v, %v; want it still asking, refused", d, err)
	}
	if slices.ContainsFunc(lead.node.Members(), func(m Member) bool { return m.Name == gone.name }) {
		t.Fatalf("the removed member is back: %+v", lead.node.Members())
	}

	type decision struct {
		d   Decision
		err error
	}
	decided := make(chan decision, 1)
	go func() {
		d, err := c.askToRejoin(ctx, gone)
		decided <- decision{d, err}
	}()
	if _, _, err := lead.node.AddMember(ctx, gone.name, gone.addr, ""); err != nil {
		t.Fatalf("MemberAdd %s again: %v", gone.name, err)
	}
	got := <-decided
	if got.err != nil {
		t.Fatalf("Rejoin after MemberAdd: %v", got.err)
	}
	c.startJoined(gone, got.d)
	c.agree(20)
	eventually(t, "the member added again is a voter", func() bool {
		return slices.ContainsFunc(lead.node.Members(), func(m Member) bool { return m.Name == gone.name && !m.Learner })
	})
}

// TestInterruptedReplaceLetsTheMemberBack: a Replace that removed a
// member's old id and stopped before adding the new one (its leader
// failed in between) does not tombstone the name: the member, asking
// again, is taken back under its name of the initial configuration.
func TestInterruptedReplaceLetsTheMemberBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	proposeRange(t, ctx, lead, 0, 10)
	c.agree(10)
	lost := c.others(lead)[0]
	lost.wipe()
	lead.node.replaceMu.Lock()
	err := lead.node.removeID(ctx, lost.name, lost.id, false) // Replace's first change alone
	lead.node.replaceMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(lead.node.Members(), func(m Member) bool { return m.Name == lost.name }) {
		t.Fatalf("%s's old id is still a member: %+v", lost.name, lead.node.Members())
	}
	d, err := c.askToRejoin(ctx, lost)
	if err != nil {
		t.Fatalf("Rejoin after an interrupted Replace: %v", err)
	}
	c.startJoined(lost, d)
	c.agree(10)
	// Once caught up it is made a voter, and then it counts: with the
	// other follower down, the leader and it commit.
	eventually(t, lost.name+" a voter", func() bool {
		return slices.ContainsFunc(lead.node.Members(), func(m Member) bool { return m.ID == d.ID && !m.Learner })
	})
	c.others(lead)[1].stop()
	proposeRange(t, ctx, lead, 10, 20)
}

// TestRejoinOfAnAddedMember: a member MemberAdd added asks under its own
// --initial-cluster's id. Every member of the queue answers that it was
// added (added_member), so Rejoin without Existing (started with new)
// ends with ErrAddedStartedNew before asking the leader anything: the
// configuration still holds it as the learner MemberAdd made, under the
// same id. With Existing it joins. A member of the initial configuration
// asking under the queue's id is not added, and neither is a wiped one
// asking under the old id after the queue's id changed.
func TestRejoinOfAnAddedMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr4 := lis.Addr().String()
	lis.Close()
	var lead *member
	var id4 uint64
	// The first leader of a queue just formed may yet lose an election.
	for err = ErrNotLeader; errors.Is(err, ErrNotLeader); {
		lead = c.leader(0)
		id4, _, err = lead.node.AddMember(ctx, "m4", addr4, "")
	}
	if err != nil {
		t.Fatalf("AddMember m4: %v", err)
	}
	peers := map[string]string{}
	for _, m := range c.members {
		peers[m.name] = m.addr
	}
	cfg := JoinConfig{ClusterID: testCluster + 1, Name: "m4", Addr: addr4, Peers: peers, Retry: 50 * time.Millisecond}
	for _, m := range c.members {
		eventually(t, m.name+" has applied MemberAdd of m4", func() bool { return m.node.isMember("m4", addr4) })
		resp, err := m.node.join(ctx, &queuev1.JoinRequest{ClusterId: cfg.ClusterID, Name: "m4", PeerAddr: addr4})
		if err != nil || !resp.GetAddedMember() {
			t.Errorf("%s's answer to m4: %v %v, want added_member", m.name, resp, err)
		}
		resp, err = m.node.join(ctx, &queuev1.JoinRequest{ClusterId: testCluster, Name: lead.name, PeerAddr: lead.addr})
		if err != nil || resp.GetAddedMember() {
			t.Errorf("%s's answer to %s, an initial member: %v %v, want no added_member", m.name, lead.name, resp, err)
		}
		resp, err = m.node.join(ctx, &queuev1.JoinRequest{ClusterId: testCluster + 2, Name: lead.name, PeerAddr: lead.addr})
		if err != nil || resp.GetAddedMember() {
			t.Errorf("%s's answer to %s under another cluster id (a queue forced since): %v %v, want no added_member", m.name, lead.name, resp, err)
		}
	}
	if _, err := Rejoin(ctx, cfg); !errors.Is(err, ErrAddedStartedNew) || !strings.Contains(err.Error(), "--initial-cluster-state existing") {
		t.Fatalf("Rejoin of m4 started new: %v, want ErrAddedStartedNew saying to start it existing", err)
	}
	if !slices.ContainsFunc(lead.node.Members(), func(m Member) bool { return m.Name == "m4" && m.ID == id4 && m.Learner }) {
		t.Fatalf("after the refusal the members are %+v, want m4 the learner %x still", lead.node.Members(), id4)
	}
	cfg.Existing = true
	d, err := Rejoin(ctx, cfg)
	if err != nil || d.Bootstrap || d.ID == 0 || d.ID == id4 || d.ClusterID != testCluster {
		t.Fatalf("Rejoin of m4 started existing: %+v %v, want a new id in cluster %d", d, err, testCluster)
	}
}
