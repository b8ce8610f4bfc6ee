package replica

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

const testCluster = 0xba70

// Test timing: 50 ms ticks, so an election timeout is 0.5 to 1 s.
const (
	testTick     = 50 * time.Millisecond
	testElection = 10 * testTick
)

// eventually polls cond every 10 ms until it holds, failing with what after
// 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// applied is one member's state machine: the records Apply gave it, in
// order, and at which index each came.
type applied struct {
	mu      sync.Mutex
	records []string
	index   map[string]uint64
	entries int
	last    uint64
	errs    []string
	hooked  []string // "lead <term>" and "follow", in order
}

func (a *applied) lead(term uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hooked = append(a.hooked, fmt.Sprintf("lead %d", term))
}

// follow rebuilds the state machine from replay, as Follow asks.
func (a *applied) follow(replay Replay) error {
	a.mu.Lock()
	a.hooked = append(a.hooked, "follow")
	a.records, a.index, a.entries, a.last = nil, map[string]uint64{}, 0, 0
	a.mu.Unlock()
	return replay(func(e Entry) { a.apply(e.Records, e.Index) })
}

// restore replaces the state machine with one of encode's.
func (a *applied) restore(data []byte, index uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hooked = append(a.hooked, fmt.Sprintf("restore %d", index))
	a.records, a.index, a.entries, a.last = nil, map[string]uint64{}, 0, index
	if len(data) == 0 {
		return nil
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		rec, at, ok := strings.Cut(line, "@")
		i, err := strconv.ParseUint(at, 10, 64)
		if !ok || err != nil {
			return fmt.Errorf("snapshot line %q", line)
		}
		a.records = append(a.records, rec)
		a.index[rec] = i
	}
	return nil
}

// encode is the state machine's snapshot: every record with its index,
// and the index it is as of.
func (a *applied) encode() ([]byte, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for i, r := range a.records {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s@%d", r, a.index[r])
	}
	return []byte(b.String()), a.last
}

func (a *applied) hooks() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.hooked)
}

func newApplied() *applied { return &applied{index: map[string]uint64{}} }

// funcSM is a StateMachine of functions, for tests that need some of its
// methods: those left nil do nothing.
type funcSM struct {
	apply          func(records [][]byte, index uint64)
	restore        func(state []byte, index uint64) error
	lead           func(term uint64)
	follow         func(replay Replay) error
	snapshotNeeded func()
}

func (f funcSM) Apply(e Entry) {
	if f.apply != nil {
		f.apply(e.Records, e.Index)
	}
}

func (f funcSM) Restore(s State) error {
	if f.restore != nil {
		return f.restore(s.Records, s.Index)
	}
	return nil
}

func (f funcSM) Lead(term uint64) {
	if f.lead != nil {
		f.lead(term)
	}
}

func (f funcSM) Follow(replay Replay) error {
	if f.follow != nil {
		return f.follow(replay)
	}
	return nil
}

func (f funcSM) SnapshotNeeded() {
	if f.snapshotNeeded != nil {
		f.snapshotNeeded()
	}
}

func (a *applied) apply(recs [][]byte, index uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if index <= a.last {
		a.errs = append(a.errs, fmt.Sprintf("Apply at %d after %d", index, a.last))
	}
	if len(recs) == 0 {
		a.errs = append(a.errs, fmt.Sprintf("Apply at %d with no records", index))
	}
	a.last = index
	a.entries++
	for _, r := range recs {
		s := string(r)
		if _, dup := a.index[s]; dup {
			a.errs = append(a.errs, fmt.Sprintf("record %q applied twice", s))
		}
		a.index[s] = index
		a.records = append(a.records, s)
	}
}

func (a *applied) snapshot() (records []string, entries int, errs []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.records), a.entries, slices.Clone(a.errs)
}

func (a *applied) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.records)
}

func (a *applied) indexOf(rec string) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.index[rec]
	return i, ok
}

// logBuffer is a concurrency-safe log sink, shown when a test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// member is one Node on a RaftLog in its own directory, served by its own
// gRPC server on a fixed 127.0.0.1 address (so it can come back there).
type member struct {
	t    *testing.T
	id   uint64
	dir  string
	addr string
	name string
	// client is the client address it publishes (Config.ClientAddr).
	client string
	peers  map[uint64]string
	names  map[uint64]string
	// initial is the three members the cluster began with, by name
	// (Config.Initial, as --initial-cluster gives it).
	initial map[string]string
	join    bool // start with Config.Join (it rejoined under a new id)
	logs    *logBuffer

	node   *Node
	rlog   *store.RaftLog
	sm     *applied
	reg    *prometheus.Registry
	srv    *grpc.Server
	served chan struct{}
	// up: the member counts for leader() (a test that cuts a member off
	// clears it). open: its node and log are open, for stop to close,
	// whether or not it is up.
	up, open bool

	compacting atomic.Bool
	live       atomic.Pointer[Node] // node, for the Ready loop's hooks
}

// cluster is three members.
type cluster struct {
	t       *testing.T
	members map[uint64]*member
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, members: map[uint64]*member{}}
	peers := map[uint64]string{}
	lis := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[id], peers[id] = l, l.Addr().String()
	}
	names := map[uint64]string{1: "m1", 2: "m2", 3: "m3"}
	initial := map[string]string{}
	for id, name := range names {
		initial[name] = peers[id]
	}
	for id := uint64(1); id <= 3; id++ {
		m := &member{t: t, id: id, dir: t.TempDir(), addr: peers[id], name: names[id], client: testClientAddr(names[id], 1), peers: peers, names: names, initial: initial, logs: &logBuffer{}}
		c.members[id] = m
		m.start(lis[id])
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.stop()
		}
		if t.Failed() {
			for id, m := range c.members {
				t.Logf("member %d's log:\n%s", id, m.logs.String())
			}
		}
	})
	return c
}

// testClientAddr is a member's client address, of generation gen (a
// member moved to another is given the next).
func testClientAddr(name string, gen int) string {
	return fmt.Sprintf("%s.clients.test:%d", name, 7000+gen)
}

// start opens the member's log and starts its node and server; lis, if
// nil, is opened on the member's address.
func (m *member) start(lis net.Listener) {
	t := m.t
	t.Helper()
	var err error
	if lis == nil {
		if lis, err = net.Listen("tcp", m.addr); err != nil {
			t.Fatalf("member %d: listen again on %s: %v", m.id, m.addr, err)
		}
	}
	logger := slog.New(slog.NewTextHandler(m.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m.rlog, err = store.OpenRaftLog(store.RaftLogOptions{Dir: m.dir, Logger: logger})
	if err != nil {
		t.Fatalf("member %d: %v", m.id, err)
	}
	m.sm = newApplied()
	m.reg = prometheus.NewRegistry()
	m.node, err = New(Config{
		ID: m.id, ClusterID: testCluster, Peers: m.peers, Names: m.names, Initial: m.initial, ClientAddr: m.client, Join: m.join, Log: m.rlog,
		TickInterval: testTick, Logger: logger, Registerer: m.reg,
	}, funcSM{apply: m.sm.apply, lead: m.sm.lead, follow: m.sm.follow, restore: m.sm.restore, snapshotNeeded: m.requestSnapshot})
	if err != nil {
		t.Fatalf("member %d: %v", m.id, err)
	}
	m.live.Store(m.node)
	m.serve(lis)
	m.up, m.open = true, true
}

// requestSnapshot compacts the member's log with its state, off the
// Ready loop that asked, once at a time.
func (m *member) requestSnapshot() {
	if !m.compacting.CompareAndSwap(false, true) {
		return
	}
	node, sm := m.live.Load(), m.sm
	go func() {
		defer m.compacting.Store(false)
		if node == nil { // New is still running: raft asks again
			return
		}
		// At the applied index, which counts configuration changes the
		// state machine never sees, once the state machine holds no
		// record past it (else raft asks again).
		applied := node.Status().Applied
		data, last := sm.encode()
		if last <= applied {
			_ = node.Compact(context.Background(), applied, 1, data)
		}
	}()
}

// serve starts a gRPC server for the node on lis.
func (m *member) serve(lis net.Listener) {
	m.srv = grpc.NewServer()
	m.node.Register(m.srv)
	m.served = make(chan struct{})
	srv, served := m.srv, m.served
	go func() { defer close(served); _ = srv.Serve(lis) }()
}

// unserve stops the member's server: it receives nothing any more, while
// its node runs and its transport still sends.
func (m *member) unserve() {
	m.srv.Stop()
	<-m.served
}

// stop closes the node (at once, whatever is in flight), the server and
// the log; again is harmless.
func (m *member) stop() {
	if !m.open {
		return
	}
	m.up, m.open = false, false
	if err := m.node.Close(); err != nil {
		m.t.Errorf("member %d: Close: %v", m.id, err)
	}
	m.unserve()
	if err := m.rlog.Close(); err != nil {
		m.t.Errorf("member %d: closing the log: %v", m.id, err)
	}
}

// leader waits until the members that are up agree on one leader that is
// up and says it leads, and returns it.
func (c *cluster) leader(not uint64) *member {
	c.t.Helper()
	var lead *member
	eventually(c.t, "one leader the members that are up agree on", func() bool {
		lead = nil
		var id uint64
		for _, m := range c.members {
			if !m.up {
				continue
			}
			st := m.node.Status()
			if st.Leader == 0 || st.Leader == not || (id != 0 && st.Leader != id) {
				return false
			}
			id = st.Leader
		}
		l := c.members[id]
		if l == nil || !l.up || !l.node.Status().IsLeader {
			return false
		}
		lead = l
		return true
	})
	return lead
}

// agree waits until every member that is up has applied n records, then
// checks that they applied the same records in the same order, at the same
// indexes, and returns them.
func (c *cluster) agree(n int) []string {
	c.t.Helper()
	var want []string
	for _, m := range c.members {
		if !m.up {
			continue
		}
		eventually(c.t, fmt.Sprintf("member %d applied %d records (has %d)", m.id, n, m.sm.len()), func() bool { return m.sm.len() >= n })
	}
	var first *member
	for _, m := range c.members {
		if !m.up {
			continue
		}
		recs, _, errs := m.sm.snapshot()
		if len(errs) > 0 {
			c.t.Errorf("member %d's Apply: %s", m.id, strings.Join(errs, "; "))
		}
		if first == nil {
			first, want = m, recs
			continue
		}
		if !slices.Equal(recs, want) {
			c.t.Fatalf("members %d and %d applied different sequences (%d and %d records)", first.id, m.id, len(want), len(recs))
		}
		for _, r := range recs {
			a, _ := first.sm.indexOf(r)
			b, _ := m.sm.indexOf(r)
			if a != b {
				c.t.Fatalf("record %q at index %d on member %d, %d on member %d", r, a, first.id, b, m.id)
			}
		}
	}
	return want
}

// gauge reads a metric of m's registry (0 when absent); with labels
// (name, value, ...), the series that has them.
func (m *member) gauge(name string, labels ...string) float64 {
	families, err := m.reg.Gather()
	if err != nil {
		m.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, mm := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(mm.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			if c := mm.GetCounter(); c != nil {
				return c.GetValue()
			}
			return mm.GetGauge().GetValue()
		}
	}
	return 0
}

// noReplicaGoroutinesLeft waits until no goroutine runs this package's or
// the transport's code, the tests' own excepted, and fails with the stacks
// of those left after 20 s.
func noReplicaGoroutinesLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := replicaGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d goroutines of the nodes or transports are left:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replicaGoroutines returns the stacks of the goroutines running this
// package's or the transport's code, the tests' own excepted.
func replicaGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "internal/replica.(") || strings.Contains(g, "internal/replica/transport.(") {
			if !strings.Contains(g, "internal/replica.Test") {
				out = append(out, g)
			}
		}
	}
	return out
}
