package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/batonrun/baton/services/queue/internal/format"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
)

// acks are the records whose Propose succeeded, with the index returned.
type acks struct {
	mu    sync.Mutex
	index map[string]uint64
}

func newAcks() *acks { return &acks{index: map[string]uint64{}} }

func (a *acks) add(rec string, i uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.index[rec] = i
}

func (a *acks) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.index)
}

// check fails unless every acknowledged record is in m's applied sequence
// at the index its Propose returned: nothing acknowledged was lost.
func (a *acks) check(t *testing.T, m *member) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for rec, want := range a.index {
		got, ok := m.sm.indexOf(rec)
		if !ok {
			t.Fatalf("record %q was acknowledged at index %d, and member %d never applied it", rec, want, m.id)
		}
		if got != want {
			t.Fatalf("record %q was acknowledged at index %d, and member %d applied it at %d", rec, want, m.id, got)
		}
	}
}

// propose proposes rec on m, bounded so that a hang fails the test rather
// than stalling it.
func propose(t *testing.T, m *member, rec string) (uint64, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	i, err := m.node.Propose(ctx, 1, []byte(rec))
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Propose %q on member %d hung for 20 s", rec, m.id)
	}
	return i, err
}

// barrier proposes one last record on lead and waits for every member that
// is up to apply it: everything before it is applied then, and the members
// must agree on all of it.
func (c *cluster) barrier(lead *member, name string) []string {
	c.t.Helper()
	if _, err := propose(c.t, lead, name); err != nil {
		c.t.Fatalf("barrier %q on member %d: %v", name, lead.id, err)
	}
	for _, m := range c.members {
		if m.up {
			eventually(c.t, fmt.Sprintf("member %d applied %q", m.id, name), func() bool {
				_, ok := m.sm.indexOf(name)
				return ok
			})
		}
	}
	n := lead.sm.len()
	recs := c.agree(n)
	if len(recs) != n || recs[n-1] != name {
		c.t.Fatalf("the barrier %q is not the last of %d records", name, n)
	}
	return recs
}

// TestReplicatedProposals: 16 callers × 50 proposals on the leader all
// return with the index their record was applied at, every member applies
// the same records in the same order, each caller's records in the order
// it proposed them, in fewer entries than records (coalescing), and Status
// and the metrics say who leads.
func TestReplicatedProposals(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	const callers, each = 16, 50
	got := newAcks()
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for j := range each {
				rec := fmt.Sprintf("c%02d-%03d", w, j)
				i, err := propose(t, lead, rec)
				if err != nil {
					t.Errorf("Propose %q: %v", rec, err)
					return
				}
				got.add(rec, i)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	recs := c.agree(callers * each)
	if len(recs) != callers*each {
		t.Fatalf("%d records applied, want %d", len(recs), callers*each)
	}
	for _, m := range c.members {
		got.check(t, m)
	}
	// A caller waits for each record before the next: its records are in
	// the log in its order.
	next := make([]int, callers)
	for _, r := range recs {
		var w, j int
		if _, err := fmt.Sscanf(r, "c%02d-%03d", &w, &j); err != nil {
			t.Fatal(err)
		}
		if j != next[w] {
			t.Fatalf("caller %d's record %d applied where %d was due", w, j, next[w])
		}
		next[w]++
	}
	_, entries, _ := lead.sm.snapshot()
	t.Logf("%d records in %d entries", len(recs), entries)
	if entries >= len(recs) {
		t.Errorf("%d records in %d entries: no coalescing", len(recs), entries)
	}

	st := lead.node.Status()
	if !st.IsLeader || st.Leader != lead.id || st.ID != lead.id || st.Term == 0 || st.Applied < got.index["c00-049"] || st.Commit < st.Applied {
		t.Errorf("leader's Status %+v", st)
	}
	for _, m := range c.members {
		st := m.node.Status()
		wantLeader := 0.0
		if m == lead {
			wantLeader = 1
		}
		if g := m.gauge(IsLeaderMetric); g != wantLeader {
			t.Errorf("member %d: %s %v, want %v", m.id, IsLeaderMetric, g, wantLeader)
		}
		if g := m.gauge(TermMetric); g != float64(st.Term) {
			t.Errorf("member %d: %s %v, Status says term %d", m.id, TermMetric, g, st.Term)
		}
		if g := m.gauge(LeaderChangesMetric); g < 1 {
			t.Errorf("member %d: %s %v, want at least the first election", m.id, LeaderChangesMetric, g)
		}
		if m == lead {
			continue
		}
		// A follower proposes nothing and names the leader.
		_, err := m.node.Propose(t.Context(), 1, []byte("on a follower"))
		var nl *NotLeaderError
		if !errors.Is(err, ErrNotLeader) || !errors.As(err, &nl) || nl.Leader != lead.id {
			t.Errorf("Propose on follower %d: %v, want ErrNotLeader naming %d", m.id, err, lead.id)
		}
		if st.IsLeader || st.Leader != lead.id {
			t.Errorf("follower %d's Status %+v", m.id, st)
		}
	}
	if _, err := lead.node.Propose(t.Context(), 1, make([]byte, lead.node.cfg.MaxSizePerMsg)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Propose of a record of MaxSizePerMsg: %v, want ErrTooLarge", err)
	}
	if _, ok := lead.sm.indexOf("on a follower"); ok {
		t.Error("a follower's refused record was applied")
	}
}

// load runs callers that propose on m until their first error, counting
// acknowledgements, and returns a function that waits (bounded) for them
// all and returns their last errors.
func load(t *testing.T, m *member, callers int, tag string, got *acks) func() []error {
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for j := 0; ; j++ {
				rec := fmt.Sprintf("%s%02d-%05d", tag, w, j)
				i, err := propose(t, m, rec)
				if err != nil {
					errs[w] = err
					return
				}
				got.add(rec, i)
			}
		})
	}
	return func() []error {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("callers still waiting in Propose 30 s after their leader went away")
		}
		return errs
	}
}

// TestLeaderCutOffFailsInflight: a leader that hears nothing from its
// followers (its server stopped; it still sends) steps down within an
// election timeout (CheckQuorum), and every caller waiting on it gets
// ErrLeadershipLost (or, proposing after the step-down, ErrNotLeader); the
// others elect a new leader that commits; the old one, heard again,
// catches up, and every member applied every acknowledged record where its
// caller was told.
func TestLeaderCutOffFailsInflight(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	got := newAcks()
	wait := load(t, lead, 16, "a", got)
	eventually(t, "100 acknowledged", func() bool { return got.len() >= 100 })
	lead.unserve()
	lead.up = false // for leader(): it cannot hear who leads now
	lost := 0
	for _, err := range wait() {
		switch {
		case errors.Is(err, ErrLeadershipLost):
			lost++
		case errors.Is(err, ErrNotLeader):
		default:
			t.Errorf("a caller of the cut-off leader: %v, want ErrLeadershipLost or ErrNotLeader", err)
		}
	}
	if lost == 0 {
		t.Error("no caller was in flight when leadership was lost")
	}
	if st := lead.node.Status(); st.IsLeader {
		t.Errorf("the cut-off leader still says it leads: %+v", st)
	}
	next := c.leader(lead.id)
	for i := range 20 {
		if _, err := propose(t, next, fmt.Sprintf("b%02d", i)); err != nil {
			t.Fatalf("Propose on the new leader %d: %v", next.id, err)
		}
	}
	l, err := net.Listen("tcp", lead.addr)
	if err != nil {
		t.Fatal(err)
	}
	lead.serve(l)
	lead.up = true
	c.barrier(next, "barrier")
	for _, m := range c.members {
		got.check(t, m)
	}
}

// TestLeadAndFollow: Lead is called on the leader alone, with its term,
// once it has applied what came before; a leader cut off from the others
// gets Follow once it steps down, and its state machine, rebuilt from
// replay, holds exactly what it had applied; the new leader gets Lead with
// its own, higher term.
func TestLeadAndFollow(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	term := lead.node.Status().Term
	eventually(t, "Lead on the leader", func() bool {
		return slices.Equal(lead.sm.hooks(), []string{fmt.Sprintf("lead %d", term)})
	})
	for i := range 10 {
		if _, err := propose(t, lead, fmt.Sprintf("a%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := c.agree(10)
	for _, m := range c.members {
		if m != lead {
			if h := m.sm.hooks(); len(h) != 0 {
				t.Errorf("member %d, a follower, had hooks %v", m.id, h)
			}
		}
	}
	lead.unserve()
	lead.up = false
	eventually(t, "Follow on the cut-off leader", func() bool {
		return slices.Equal(lead.sm.hooks(), []string{fmt.Sprintf("lead %d", term), "follow"})
	})
	recs, _, errs := lead.sm.snapshot()
	if !slices.Equal(recs, before) || len(errs) > 0 {
		t.Errorf("rebuilt from replay: %d records %v (errors %v), want the %d applied before", len(recs), recs, errs, len(before))
	}
	next := c.leader(lead.id)
	eventually(t, "Lead on the new leader", func() bool {
		h := next.sm.hooks()
		return len(h) == 1 && h[0] == fmt.Sprintf("lead %d", next.node.Status().Term)
	})
	if nt := next.node.Status().Term; nt <= term {
		t.Errorf("the new leader's term %d, want more than %d", nt, term)
	}
	// Healed, the old leader follows the new one on its rebuilt state.
	l, err := net.Listen("tcp", lead.addr)
	if err != nil {
		t.Fatal(err)
	}
	lead.serve(l)
	lead.up = true
	for i := range 5 {
		if _, err := propose(t, next, fmt.Sprintf("b%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.agree(15)
}

// TestLeaderKilledAndRestarted: the leader is closed at once with callers
// in flight; every one of them returns (ErrStopped, or ErrLeadershipLost
// if it lost first); the two others elect a new leader within a few
// election timeouts and commit; the old member, restarted from its
// directory, replays its log, catches up and applied the same sequence as
// the others; and once all are closed no goroutine of theirs is left.
func TestLeaderKilledAndRestarted(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	got := newAcks()
	wait := load(t, lead, 16, "a", got)
	eventually(t, "100 acknowledged", func() bool { return got.len() >= 100 })
	lead.stop()
	killed := time.Now()
	for _, err := range wait() {
		if !errors.Is(err, ErrStopped) && !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("a caller of the closed leader: %v, want ErrStopped or ErrLeadershipLost", err)
		}
	}
	next := c.leader(lead.id)
	if d := time.Since(killed); d > 10*testElection {
		t.Errorf("a new leader after %v, more than 10 election timeouts", d)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for j := range 25 {
				rec := fmt.Sprintf("b%d-%02d", w, j)
				i, err := propose(t, next, rec)
				if err != nil {
					t.Errorf("Propose on the new leader %d: %v", next.id, err)
					return
				}
				got.add(rec, i)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	lead.start(nil)
	recs := c.barrier(next, "barrier")
	for _, m := range c.members {
		got.check(t, m)
	}
	t.Logf("%d records agreed, %d acknowledged", len(recs), got.len())
	for _, m := range c.members {
		m.stop()
	}
	noReplicaGoroutinesLeft(t)
}

// faultFS is the OS's file system whose files can be made to refuse
// writes for a full disk or fail fdatasync.
type faultFS struct {
	store.OS
	noSpace  *atomic.Bool
	syncFail *atomic.Bool
}

type faultFile struct {
	store.File
	fs *faultFS
}

func (f faultFS) Create(name string) (store.File, error) {
	file, err := f.OS.Create(name)
	if err != nil {
		return nil, err
	}
	return faultFile{file, &f}, nil
}

func (f faultFS) OpenAppend(name string) (store.File, error) {
	file, err := f.OS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return faultFile{file, &f}, nil
}

func (f faultFile) Write(p []byte) (int, error) {
	if f.fs.noSpace.Load() {
		return 0, syscall.ENOSPC
	}
	return f.File.Write(p)
}

func (f faultFile) Sync() error {
	if f.fs.syncFail.Load() {
		return syscall.EIO
	}
	return f.File.Sync()
}

// single is a cluster of one member on a faultFS: it leads at once.
func single(t *testing.T) (*Node, *applied, *faultFS) {
	t.Helper()
	fs := &faultFS{noSpace: &atomic.Bool{}, syncFail: &atomic.Bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // only its address: a member of one sends nothing
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: t.TempDir(), FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	sm := newApplied()
	n, err := New(Config{ID: 1, ClusterID: testCluster, Peers: map[uint64]string{1: l.Addr().String()},
		Log: rlog, TickInterval: 5 * time.Millisecond}, funcSM{apply: sm.apply})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(); rlog.Close() })
	eventually(t, "the single member leads", func() bool { return n.Status().IsLeader })
	return n, sm, fs
}

// TestNoSpaceRetriesTheSave: a Ready refused for a full disk is saved
// again, unchanged, once there is space: the proposal in it commits and
// its caller is answered, while proposals made meanwhile are refused with
// store.ErrNoSpace and never applied. A node that stopped (or advanced
// past the unsaved Ready) instead would fail this.
func TestNoSpaceRetriesTheSave(t *testing.T) {
	n, sm, fs := single(t)
	if _, err := n.Propose(t.Context(), 1, []byte("before")); err != nil {
		t.Fatal(err)
	}
	fs.noSpace.Store(true)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		_, err := n.Propose(ctx, 1, []byte("during"))
		res <- err
	}()
	// "during" is the only proposal, so the Ready that failed holds it.
	eventually(t, "a save refused for the full disk", n.noSpace.Load)
	if _, err := n.Propose(t.Context(), 1, []byte("refused")); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Propose while the disk is full: %v, want store.ErrNoSpace", err)
	}
	select {
	case err := <-res:
		t.Fatalf("Propose answered while its entry could not be saved: %v", err)
	default:
	}
	fs.noSpace.Store(false)
	if err := <-res; err != nil {
		t.Fatalf("the proposal saved once space was back: %v", err)
	}
	if _, err := n.Propose(t.Context(), 1, []byte("after")); err != nil {
		t.Fatal(err)
	}
	recs, _, errs := sm.snapshot()
	if !slices.Equal(recs, []string{"before", "during", "after"}) || len(errs) > 0 {
		t.Fatalf("applied %q (%v), want before, during, after", recs, errs)
	}
	if n.Err() != nil {
		t.Fatalf("Err after a full disk: %v", n.Err())
	}
}

// TestSaveFailureStopsTheNode: an fdatasync failure stops the node for
// good (fail-stop, as the store): the caller in flight gets ErrStopped
// with the cause, Done closes, Err says why, and later proposals are
// refused with it.
func TestSaveFailureStopsTheNode(t *testing.T) {
	n, _, fs := single(t)
	fs.syncFail.Store(true)
	_, err := n.Propose(t.Context(), 1, []byte("lost"))
	if !errors.Is(err, ErrStopped) || !errors.Is(err, store.ErrStopped) || !strings.Contains(err.Error(), "fdatasync") {
		t.Fatalf("Propose when fdatasync fails: %v, want ErrStopped naming fdatasync", err)
	}
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the failure")
	}
	if !errors.Is(n.Err(), store.ErrStopped) {
		t.Fatalf("Err: %v", n.Err())
	}
	if _, err := n.Propose(t.Context(), 1, []byte("later")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Propose after the failure: %v", err)
	}
	if err := n.Close(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Close after the failure: %v", err)
	}
}

// TestNewRefusesASnapshotNotRestored: a log that holds a snapshot the
// state machine fails to restore is refused: entries applied over a state
// not restored would diverge from the others'.
func TestNewRefusesASnapshotNotRestored(t *testing.T) {
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rlog.Close()
	if err := rlog.Save(raftpb.HardState{Term: 1, Commit: 1}, []raftpb.Entry{{Term: 1, Index: 1}}, raftpb.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	if err := rlog.CreateSnapshot(1, &raftpb.ConfState{Voters: []uint64{1}}, snapshotData(memberState{members: map[uint64]Member{1: {ID: 1, Name: "m1", Addr: "127.0.0.1:1"}}}, []byte("state"), format.RaftSnapshot.Current)); err != nil {
		t.Fatal(err)
	}
	refuse := errors.New("not this state")
	_, err = New(Config{ID: 1, ClusterID: testCluster, Peers: map[uint64]string{1: "127.0.0.1:1"}, Log: rlog},
		funcSM{restore: func([]byte, uint64) error { return refuse }})
	if !errors.Is(err, refuse) {
		t.Fatalf("New on a log with a snapshot its state machine refuses: %v", err)
	}
}

// proposeRange proposes the records r<from> to r<to-1> on lead, one by one.
func proposeRange(t *testing.T, ctx context.Context, lead *member, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := lead.node.Propose(ctx, 1, []byte(fmt.Sprintf("r%03d", i))); err != nil {
			t.Fatalf("propose %d: %v", i, err)
		}
	}
}

// TestCompactAndCatchUp: members compact their logs with their state as
// the snapshot; a member that was down while the others compacted is sent
// the leader's snapshot, restores it and applies what follows; a restarted
// member restores its own; and every member ends with the same records at
// the same indexes.
func TestCompactAndCatchUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	propose := func(from, to int) { t.Helper(); proposeRange(t, ctx, lead, from, to) }
	compact := func(m *member) {
		t.Helper()
		data, index := m.sm.encode()
		if err := m.node.Compact(ctx, index, 1, data); err != nil {
			t.Fatalf("member %d: Compact at %d: %v", m.id, index, err)
		}
	}
	propose(0, 40)
	c.agree(40)
	var behind *member
	for _, m := range c.members {
		if m != lead {
			behind = m
			break
		}
	}
	behind.stop()
	propose(40, 80)
	for _, m := range c.members {
		if m.up {
			eventually(t, "80 applied", func() bool { return m.sm.len() >= 80 })
			compact(m)
			if got := m.gauge(SnapshotsMetric, "op", "created"); got != 1 {
				t.Fatalf("member %d: %s = %v after one compaction", m.id, SnapshotsMetric, got)
			}
		}
	}
	// The same index again is refused, and changes nothing.
	data, index := lead.sm.encode()
	if err := lead.node.Compact(ctx, index, 1, data); !errors.Is(err, ErrCompactRefused) {
		t.Fatalf("Compact at the snapshot's own index: %v, want ErrCompactRefused", err)
	}
	if err := lead.node.Compact(ctx, index+1000, 1, data); !errors.Is(err, ErrCompactRefused) {
		t.Fatalf("Compact beyond the applied index: %v, want ErrCompactRefused", err)
	}
	propose(80, 90)

	// Behind the leader's first entry: only the snapshot can catch it up.
	behind.start(nil)
	c.agree(90)
	if h := behind.sm.hooks(); !slices.ContainsFunc(h, func(s string) bool { return strings.HasPrefix(s, "restore ") }) {
		t.Fatalf("member %d caught up without a snapshot: hooks %v", behind.id, h)
	}
	if got := behind.gauge(SnapshotsMetric, "op", "restored"); got != 1 {
		t.Fatalf("member %d: %s = %v after catching up", behind.id, SnapshotsMetric, got)
	}

	// A restart restores the member's own snapshot, then the entries
	// after it.
	lead.stop()
	lead.start(nil)
	lead = c.leader(0)
	propose(90, 100)
	c.agree(100)

}

// serveEmpty serves the empty responder on addr, as a member with an
// empty log does while Rejoin runs, until the returned stop.
func serveEmpty(t *testing.T, addr string) (stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	srv := grpc.NewServer()
	queuev1.RegisterRaftServiceServer(srv, NewEmptyResponder(testCluster))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	return func() { srv.Stop(); <-done }
}

// TestRejoinAfterLostDisk: a follower whose disk is wiped finds, by
// Rejoin, that the queue has been in use, and the leader takes it back
// under a new Raft id (the old one leaves the configuration); started
// with Join on its empty log, it catches up from the leader's compacted
// log and takes part again: with it, the cluster commits after the other
// follower stops. A Replace for an address that is not the member's is
// refused and changes nothing.
func TestRejoinAfterLostDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newCluster(t)
	lead := c.leader(0)
	propose := func(from, to int) { t.Helper(); proposeRange(t, ctx, lead, from, to) }
	propose(0, 30)
	c.agree(30)
	var lost, other *member
	for _, m := range c.members {
		switch {
		case m == lead:
		case lost == nil:
			lost = m
		default:
			other = m
		}
	}
	lost.stop()
	if err := os.RemoveAll(lost.dir); err != nil {
		t.Fatal(err)
	}
	propose(30, 40)
	for _, m := range []*member{lead, other} {
		eventually(t, "40 applied", func() bool { return m.sm.len() >= 40 })
		data, index := m.sm.encode()
		if err := m.node.Compact(ctx, index, 1, data); err != nil {
			t.Fatalf("member %d: Compact: %v", m.id, err)
		}
	}

	if _, _, err := lead.node.Replace(ctx, lost.name, "127.0.0.1:1"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("Replace with another address: %v, want ErrNotMember", err)
	}
	if _, _, err := lead.node.Replace(ctx, lead.name, lead.addr); !errors.Is(err, ErrNotMember) {
		t.Fatalf("Replace of the leader itself: %v, want ErrNotMember", err)
	}

	stop := serveEmpty(t, lost.addr)
	peers := map[string]string{}
	for _, m := range c.members {
		if m != lost {
			peers[m.name] = m.addr
		}
	}
	d, err := Rejoin(ctx, JoinConfig{ClusterID: testCluster, Name: lost.name, Addr: lost.addr, Peers: peers, Retry: 50 * time.Millisecond})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if d.Bootstrap || d.ID == 0 || d.ID == lost.id {
		t.Fatalf("Rejoin decided %+v for a member that lost its disk (old id %d)", d, lost.id)
	}
	oldID := lost.id
	lost.peers, lost.names = map[uint64]string{}, map[uint64]string{}
	for _, m := range d.Members {
		lost.peers[m.ID], lost.names[m.ID] = m.Addr, m.Name
		if m.ID == oldID {
			t.Errorf("the members after the rejoin still hold the old id %d", oldID)
		}
	}
	if lost.peers[d.ID] != lost.addr {
		t.Fatalf("the members after the rejoin: %+v, want %s at %s under id %d", d.Members, lost.name, lost.addr, d.ID)
	}
	delete(c.members, oldID)
	lost.id, lost.join = d.ID, true
	c.members[d.ID] = lost
	lost.start(nil)
	c.agree(40)
	if h := lost.sm.hooks(); !slices.ContainsFunc(h, func(s string) bool { return strings.HasPrefix(s, "restore ") }) {
		t.Errorf("the rejoined member caught up without the snapshot: hooks %v", h)
	}
	// It rejoined as a learner, which weighs on no majority, and is made
	// a voter once caught up; then it counts: with the other follower
	// down, the leader and it commit.
	if m := lead.node.Members(); !slices.ContainsFunc(m, func(m Member) bool { return m.ID == d.ID }) {
		t.Fatalf("the leader's members %+v lack the rejoined id %d", m, d.ID)
	}
	eventually(t, "the rejoined member a voter", func() bool {
		return slices.ContainsFunc(lead.node.Members(), func(m Member) bool { return m.ID == d.ID && !m.Learner })
	})
	other.stop()
	propose(40, 50)
	if got := lost.sm.len(); got < 40 {
		t.Fatalf("the rejoined member applied %d records", got)
	}
	eventually(t, "the rejoined member applied 50", func() bool { return lost.sm.len() >= 50 })
	for _, m := range lead.node.Members() {
		if m.ID == oldID {
			t.Errorf("the leader's members still hold the old id %d", oldID)
		}
	}
}

// TestRejoinNewQueue: members with empty logs, answering by the empty
// responder, decide that the queue is new once every member answers that
// it is empty, and not before: two empty members of three, the third
// silent, are what a reboot that wiped two disks leaves while the one
// holding the queue is down, and they must wait for it. With Existing
// they never form a queue, even when every member is empty. What each
// says it waits for fits its flag: only one started without Existing
// speaks of forming a queue.
func TestRejoinNewQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The listeners are closed once all three are picked: the kernel may
	// hand a just-closed port to the next bind.
	addrs := make([]string, 3)
	ls := make([]net.Listener, 3)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i], addrs[i] = l, l.Addr().String()
	}
	for _, l := range ls {
		l.Close()
	}
	cfg := JoinConfig{ClusterID: testCluster, Name: "m1", Addr: addrs[0], Peers: map[string]string{"m2": addrs[1], "m3": addrs[2]}, Retry: 20 * time.Millisecond}
	existing := cfg
	existing.Existing = true
	// undecided runs Rejoin for a moment, and checks that it decided
	// nothing and said it waits for what want names.
	undecided := func(what string, cfg JoinConfig, want string) {
		t.Helper()
		var logged bytes.Buffer
		cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancelShort()
		if d, err := Rejoin(short, cfg); err == nil {
			t.Fatalf("%s: Rejoin decided %+v", what, d)
		}
		if !strings.Contains(logged.String(), want) || cfg.Existing == strings.Contains(logged.String(), "form a new queue") {
			t.Errorf("%s: Rejoin says\n%s\nwant it to wait for %q", what, logged.String(), want)
		}
	}
	undecided("with no member answering", cfg, "waits for every member to answer before it may form a new queue")
	undecided("with no member answering and Existing", existing, "existing waits for a member of the queue in use to answer")
	// Two of three empty, the third silent: it may hold the queue.
	stop2 := serveEmpty(t, addrs[1])
	defer stop2()
	undecided("with m2 empty and m3 silent", cfg, "waits for every member to answer before it may form a new queue")
	undecided("with m2 empty, m3 silent and Existing", existing, "existing waits for a member of the queue in use to answer")
	stop3 := serveEmpty(t, addrs[2])
	defer stop3()
	undecided("with every member empty and Existing", existing, "every member answers empty, and it never forms a new queue")
	d, err := Rejoin(ctx, cfg)
	if err != nil || !d.Bootstrap {
		t.Fatalf("with every member empty: %+v, %v; want Bootstrap", d, err)
	}
}

// TestConfigRefused: what New refuses before starting anything.
func TestConfigRefused(t *testing.T) {
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rlog.Close()
	ok := func() Config {
		return Config{ID: 1, ClusterID: 7, Peers: map[uint64]string{1: "127.0.0.1:1", 2: "127.0.0.1:2"}, Log: rlog}
	}
	for name, change := range map[string]func(*Config){
		"no id":                 func(c *Config) { c.ID = 0 },
		"no cluster":            func(c *Config) { c.ClusterID = 0 },
		"no log":                func(c *Config) { c.Log = nil },
		"self not in peers":     func(c *Config) { c.ID = 3 },
		"bad address":           func(c *Config) { c.Peers[2] = "nowhere" },
		"election <= heartbeat": func(c *Config) { c.ElectionTick, c.HeartbeatTick = 2, 2 },
		"messages too large":    func(c *Config) { c.MaxMessageBytes, c.MaxSizePerMsg = 1<<20, 600<<10 },
	} {
		cfg := ok()
		change(&cfg)
		if n, err := New(cfg, funcSM{}); err == nil {
			n.Close()
			t.Errorf("%s: New accepted it", name)
		}
	}
	if n, err := New(ok(), nil); err == nil {
		n.Close()
		t.Error("no state machine: New accepted it")
	}
}

// TestConfirm: the leader's Confirm returns once a majority confirms it
// leads, many callers at once; a follower's is NotLeader; a leader cut off
// from the others is never confirmed: its callers get ErrLeadershipLost
// once it steps down.
func TestConfirm(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if err := lead.node.Confirm(ctx); err != nil {
				t.Errorf("Confirm on the leader: %v", err)
			}
		})
	}
	wg.Wait()
	for _, m := range c.members {
		if m != lead {
			if err := m.node.Confirm(ctx); !errors.Is(err, ErrNotLeader) {
				t.Errorf("Confirm on follower %d: %v, want ErrNotLeader", m.id, err)
			}
		}
	}
	lead.unserve() // it hears nobody: its heartbeats go unanswered
	lead.up = false
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- lead.node.Confirm(ctx) }()
	}
	for range 8 {
		if err := <-errs; !errors.Is(err, ErrLeadershipLost) && !errors.Is(err, ErrNotLeader) {
			t.Errorf("Confirm on the cut-off leader: %v, want ErrLeadershipLost or ErrNotLeader", err)
		}
	}
	l, err := net.Listen("tcp", lead.addr)
	if err != nil {
		t.Fatal(err)
	}
	lead.serve(l)
	lead.up = true
}

// TestLeaderSeesLiveFollowersActive: across several election timeouts,
// every Status the leader gives says it hears from both followers, even
// on the tick where raft clears its record of who it heard from; and once
// a follower is cut off, within a few election timeouts it says not.
func TestLeaderSeesLiveFollowersActive(t *testing.T) {
	c := newCluster(t)
	lead := c.leader(0)
	eventually(t, "both followers heard from", func() bool {
		st := lead.node.Status()
		return len(st.Active) == 3 && st.Active[1] && st.Active[2] && st.Active[3]
	})
	deadline := time.Now().Add(4 * DefaultElectionTick * testTick)
	for time.Now().Before(deadline) {
		st := lead.node.Status()
		if !st.IsLeader {
			t.Fatalf("member %d lost its leadership", lead.id)
		}
		for id, active := range st.Active {
			if !active {
				t.Fatalf("the leader says member %d is not heard from; all are up", id)
			}
		}
		time.Sleep(testTick / 5)
	}
	var cut *member
	for _, m := range c.members {
		if m != lead {
			cut = m
			break
		}
	}
	cut.unserve()
	cut.up = false
	eventually(t, "the cut-off follower not heard from", func() bool {
		return !lead.node.Status().Active[cut.id]
	})
}
