package transport

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
)

const testCluster = 0xba70

// eventually polls cond every 10 ms until it holds, failing the test with
// what after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inbox collects what a transport's recv is given.
type inbox struct {
	mu   sync.Mutex
	msgs []raftpb.Message
}

func (b *inbox) recv(_ context.Context, m raftpb.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.msgs = append(b.msgs, m)
}

func (b *inbox) from(id uint64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.msgs {
		if m.From == id {
			n++
		}
	}
	return n
}

func (m *member) inboxOf(id uint64) []raftpb.Message {
	m.inbox.mu.Lock()
	defer m.inbox.mu.Unlock()
	var out []raftpb.Message
	for _, msg := range m.inbox.msgs {
		if msg.From == id {
			out = append(out, msg)
		}
	}
	return out
}

func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// logBuffer is a concurrency-safe log sink.
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

// reports records the Report hooks' calls, and what Heard was told.
type reports struct {
	mu          sync.Mutex
	unreachable map[uint64]int
	snapshots   map[uint64][]raft.SnapshotStatus
	stopping    map[uint64]bool // by sender, as its last batch said
}

func newReports() *reports {
	return &reports{unreachable: map[uint64]int{}, snapshots: map[uint64][]raft.SnapshotStatus{}, stopping: map[uint64]bool{}}
}

func (r *reports) heard(from uint64, _ format.Level, stopping bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping[from] = stopping
}

// saidStopping reports whether from's last batch said it is stopping, and
// whether a batch of its was heard at all.
func (r *reports) saidStopping(from uint64) (stopping, heard bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stopping, heard = r.stopping[from]
	return stopping, heard
}

func (r *reports) reportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable[id]++
}

func (r *reports) reportSnapshot(id uint64, s raft.SnapshotStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapshots[id] = append(r.snapshots[id], s)
}

func (r *reports) unreachableOf(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[id]
}

func (r *reports) snapshotsOf(id uint64) []raft.SnapshotStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]raft.SnapshotStatus(nil), r.snapshots[id]...)
}

// member is one transport behind its own gRPC server on 127.0.0.1.
type member struct {
	id      uint64
	addr    string
	tr      *Transport
	inbox   *inbox
	reports *reports
	reg     *prometheus.Registry
	logs    *logBuffer
	srv     *grpc.Server
	done    chan struct{}
}

// memberOpts vary a member from the plaintext default.
type memberOpts struct {
	tls       *tlsfiles.Source // the member's certificate; also served, with authz's default table
	maxRecv   int              // the server's MaxRecvMsgSize and the Config's MaxMessageBytes
	queueLen  int
	clusterID uint64
	maxSnap   int64
	recv      func(context.Context, raftpb.Message) // instead of the inbox
	// The hooks, instead of recording them in reports.
	reportUnreachable func(uint64)
}

// listen reserves an address on 127.0.0.1.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// startMember serves a transport for id on lis, with peers, until the
// test ends.
func startMember(t *testing.T, id uint64, lis net.Listener, peers map[uint64]string, o memberOpts) *member {
	t.Helper()
	m := &member{id: id, addr: lis.Addr().String(), inbox: &inbox{}, reports: newReports(),
		reg: prometheus.NewRegistry(), logs: &logBuffer{}, done: make(chan struct{})}
	if o.clusterID == 0 {
		o.clusterID = testCluster
	}
	recv := m.inbox.recv
	if o.recv != nil {
		recv = o.recv
	}
	unreachable := m.reports.reportUnreachable
	if o.reportUnreachable != nil {
		unreachable = o.reportUnreachable
	}
	tr, err := New(Config{
		ClusterID:         o.clusterID,
		ID:                id,
		Peers:             peers,
		Addr:              m.addr,
		TLS:               o.tls,
		MaxMessageBytes:   o.maxRecv,
		QueueLength:       o.queueLen,
		MaxSnapshotBytes:  o.maxSnap,
		ReportUnreachable: unreachable,
		ReportSnapshot:    m.reports.reportSnapshot,
		Heard:             m.reports.heard,
		Logger:            slog.New(slog.NewTextHandler(m.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:        m.reg,
	}, recv)
	if err != nil {
		t.Fatal(err)
	}
	m.tr = tr
	var opts []grpc.ServerOption
	if o.maxRecv > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(o.maxRecv))
	}
	if o.tls != nil {
		creds, err := o.tls.ServerCredentials(tlsfiles.RequireClientCert)
		if err != nil {
			t.Fatal(err)
		}
		az, err := authz.New(authz.Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(creds),
			grpc.ChainUnaryInterceptor(az.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(az.StreamServerInterceptor()))
	}
	m.srv = grpc.NewServer(opts...)
	tr.Register(m.srv)
	go func() { defer close(m.done); _ = m.srv.Serve(lis) }()
	t.Cleanup(m.stop)
	return m
}

// stop closes the transport and the server; again is harmless.
func (m *member) stop() {
	m.tr.Close()
	m.srv.Stop()
	<-m.done
}

// counter sums the series of m's registry named name whose labels include
// labels (0 when there are none).
func (m *member) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, mm := range f.GetMetric() {
			for _, l := range mm.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metric
				}
			}
			if c := mm.GetCounter(); c != nil {
				sum += c.GetValue()
			} else {
				sum += mm.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// heartbeat is a small message from one member to another; commit tags it.
func heartbeat(from, to, commit uint64) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgHeartbeat, From: from, To: to, Term: 1, Commit: commit}
}

// transportGoroutines counts the goroutines running this package's code
// (the tests' own excepted).
func transportGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "internal/replica/transport.(") && !strings.Contains(g, "internal/replica/transport.Test") {
			count++
		}
	}
	return count
}

// pki is a deployment's certificates for 127.0.0.1: members queue-1 to
// queue-3 (role queue-peer) and a worker.
type pki struct{ dir string }

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA(2, now)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.1"}
	var leaves []certs.Leaf
	for _, n := range []string{"queue-1", "queue-2", "queue-3"} {
		leaves = append(leaves, certs.Leaf{Name: n, Roles: []string{tlsfiles.RoleQueuePeer}, Hosts: hosts, Days: 1})
	}
	leaves = append(leaves, certs.Leaf{Name: "worker", Roles: []string{tlsfiles.RoleWorker}, Hosts: hosts, Days: 1})
	if _, err := certs.Init(dir, ca, leaves, false, now); err != nil {
		t.Fatal(err)
	}
	return pki{dir: dir}
}

func (p pki) source(t *testing.T, name string) *tlsfiles.Source {
	t.Helper()
	src, err := tlsfiles.Load(tlsfiles.Config{
		CAFile:   filepath.Join(p.dir, "ca.crt"),
		CertFile: filepath.Join(p.dir, name+".crt"),
		KeyFile:  filepath.Join(p.dir, name+".key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return src
}
