package transport

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// three starts members 1, 2 and 3, each the others' peer.
func three(t *testing.T, o memberOpts) []*member {
	t.Helper()
	lis := []net.Listener{listen(t), listen(t), listen(t)}
	addrs := map[uint64]string{}
	for i, l := range lis {
		addrs[uint64(i+1)] = l.Addr().String()
	}
	var ms []*member
	for i, l := range lis {
		id := uint64(i + 1)
		peers := map[uint64]string{}
		for pid, a := range addrs {
			if pid != id {
				peers[pid] = a
			}
		}
		ms = append(ms, startMember(t, id, l, peers, o))
	}
	return ms
}

// exchange has every member send n heartbeats to each other one, and
// waits until each has received all of them, in order per sender.
func exchange(t *testing.T, ms []*member, n int) {
	t.Helper()
	for _, m := range ms {
		var msgs []raftpb.Message
		for i := range n {
			for _, p := range ms {
				if p != m {
					msgs = append(msgs, heartbeat(m.id, p.id, uint64(i)))
				}
			}
		}
		m.tr.Send(msgs)
	}
	for _, m := range ms {
		for _, p := range ms {
			if p == m {
				continue
			}
			eventually(t, "every heartbeat delivered", func() bool { return m.inbox.from(p.id) >= n })
		}
	}
	for _, m := range ms {
		m.inbox.mu.Lock()
		next := map[uint64]uint64{}
		for _, msg := range m.inbox.msgs {
			if msg.To != m.id || msg.Commit != next[msg.From] {
				t.Errorf("member %d got %+v, want commit %d from %d in order", m.id, msg, next[msg.From], msg.From)
			}
			next[msg.From]++
		}
		m.inbox.mu.Unlock()
	}
}

// TestThreeMembersExchange checks that three transports carry messages
// every way, in order per sender, and count them.
func TestThreeMembersExchange(t *testing.T) {
	ms := three(t, memberOpts{})
	exchange(t, ms, 500)
	for _, m := range ms {
		for _, p := range ms {
			if p == m {
				continue
			}
			peer := map[string]string{"peer": peerLabel(p.id)}
			if got := m.counter(t, SentMetric, peer); got != 500 {
				t.Errorf("member %d: %s{peer=%d} = %v, want 500", m.id, SentMetric, p.id, got)
			}
			if got := m.counter(t, ReceivedMetric, peer); got != 500 {
				t.Errorf("member %d: %s{peer=%d} = %v, want 500", m.id, ReceivedMetric, p.id, got)
			}
			if got := m.counter(t, ConnectsMetric, peer); got != 1 {
				t.Errorf("member %d: %s{peer=%d} = %v, want 1", m.id, ConnectsMetric, p.id, got)
			}
		}
		if got := m.counter(t, ActiveMetric, nil); got != 2 {
			t.Errorf("member %d: %s = %v, want 2", m.id, ActiveMetric, got)
		}
		if got := m.counter(t, DroppedMetric, nil); got != 0 {
			t.Errorf("member %d dropped %v messages", m.id, got)
		}
	}
}

// TestPeerDown checks that Send to a peer that is not running does not
// block, drops and counts what cannot go, tells the node the peer is
// unreachable, and that once the peer starts the stream reconnects and
// delivery resumes.
func TestPeerDown(t *testing.T) {
	lis1, lis2 := listen(t), listen(t)
	addr2 := lis2.Addr().String()
	lis2.Close() // member 2 is down
	m1 := startMember(t, 1, lis1, map[uint64]string{2: addr2}, memberOpts{queueLen: 64})

	// Far more than the queue holds, with snapshots among them: Send
	// returns at once, and the overflow is counted.
	var msgs []raftpb.Message
	for i := range 10_000 {
		msgs = append(msgs, heartbeat(1, 2, uint64(i)))
	}
	msgs = append(msgs, raftpb.Message{Type: raftpb.MsgSnap, From: 1, To: 2, Term: 1, Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 5, Term: 1}}})
	start := time.Now()
	m1.tr.Send(msgs)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Send of 10,001 messages to a down peer took %v: it must not wait for the network", d)
	}
	down := map[string]string{"peer": "2", "direction": "out"}
	eventually(t, "messages to the down peer dropped and counted", func() bool {
		return m1.counter(t, DroppedMetric, down) >= 10_001-64
	})
	eventually(t, "the down peer reported unreachable", func() bool { return m1.reports.unreachableOf(2) > 0 })
	eventually(t, "the dropped snapshot reported failed", func() bool {
		return slices.Contains(m1.reports.snapshotsOf(2), raft.SnapshotFailure)
	})
	if got := m1.counter(t, ActiveMetric, nil); got != 0 {
		t.Errorf("%s = %v with the only peer down, want 0", ActiveMetric, got)
	}

	// Member 2 starts at its address: a message sent now and then gets
	// through once the stream is back.
	lis2, err := net.Listen("tcp", addr2)
	if err != nil {
		t.Skipf("the down peer's port was taken meanwhile: %v", err)
	}
	m2 := startMember(t, 2, lis2, map[uint64]string{1: lis1.Addr().String()}, memberOpts{})
	eventually(t, "delivery resumed after the peer started", func() bool {
		m1.tr.Send([]raftpb.Message{heartbeat(1, 2, 1<<40)})
		return m2.inbox.from(1) > 0
	})
	if got := m1.counter(t, ConnectsMetric, map[string]string{"peer": "2"}); got < 1 {
		t.Errorf("%s = %v after delivery, want at least 1", ConnectsMetric, got)
	}
	eventually(t, "the peer counted active", func() bool { return m1.counter(t, ActiveMetric, nil) == 1 })
}

// TestOversize checks that a message larger than the peer's server takes
// is refused at Send and counted, while a snapshot that large goes by
// SendSnapshot instead, and batches of small messages stay within the
// limit and are delivered.
func TestOversize(t *testing.T) {
	const limit = 4096
	ms := three(t, memberOpts{maxRecv: limit})
	m1, m2 := ms[0], ms[1]
	big := make([]byte, 2*limit)
	m1.tr.Send([]raftpb.Message{
		{Type: raftpb.MsgApp, From: 1, To: 2, Term: 1, Entries: []raftpb.Entry{{Index: 1, Term: 1, Data: big}}},
		{Type: raftpb.MsgSnap, From: 1, To: 2, Term: 1, Snapshot: &raftpb.Snapshot{Data: big, Metadata: raftpb.SnapshotMetadata{Index: 1, Term: 1}}},
	})
	oversize := map[string]string{"peer": "2", "direction": "out", "reason": reasonOversize}
	if got := m1.counter(t, DroppedMetric, oversize); got != 1 {
		t.Errorf("%s{reason=oversize} = %v, want 1 (the append)", DroppedMetric, got)
	}
	eventually(t, "the large snapshot delivered and reported finished", func() bool {
		return slices.Equal(m1.reports.snapshotsOf(2), []raft.SnapshotStatus{raft.SnapshotFinish}) && m2.inbox.len() == 1
	})
	if !strings.Contains(m1.logs.String(), "larger than a peer accepts") {
		t.Errorf("no WARN for the refused message: %s", m1.logs.String())
	}
	// Many small messages sent at once are split into requests the
	// server takes: with one batch over the limit, the stream would end
	// (RESOURCE_EXHAUSTED) and some would be lost.
	var msgs []raftpb.Message
	for i := range 1000 {
		msgs = append(msgs, raftpb.Message{Type: raftpb.MsgApp, From: 1, To: 2, Term: 1, Index: uint64(i), Entries: []raftpb.Entry{{Index: uint64(i) + 1, Term: 1, Data: make([]byte, 100)}}})
	}
	m1.tr.Send(msgs)
	eventually(t, "every small message delivered", func() bool { return m2.inbox.len() == 1001 })
	if got := m1.counter(t, ConnectsMetric, map[string]string{"peer": "2"}); got != 1 {
		t.Errorf("%s = %v, want 1: a batch broke the stream", ConnectsMetric, got)
	}
	if got := m1.counter(t, DroppedMetric, nil); got != 1 {
		t.Errorf("%s = %v in all, want only the oversize append", DroppedMetric, got)
	}
}

// TestLargeSnapshot checks SendSnapshot under mutual TLS and the default
// role table: a snapshot many requests long arrives whole, metadata and
// data, and is reported finished; one larger than the receiver accepts is
// refused and reported failed; and a call whose chunks do not match its
// envelope delivers nothing.
func TestLargeSnapshot(t *testing.T) {
	p := newPKI(t)
	const limit = 16 << 10
	lis1, lis2, lis3 := listen(t), listen(t), listen(t)
	a1, a2, a3 := lis1.Addr().String(), lis2.Addr().String(), lis3.Addr().String()
	m1 := startMember(t, 1, lis1, map[uint64]string{2: a2, 3: a3}, memberOpts{tls: p.source(t, "queue-1"), maxRecv: limit})
	m2 := startMember(t, 2, lis2, map[uint64]string{1: a1, 3: a3}, memberOpts{tls: p.source(t, "queue-2"), maxRecv: limit})
	m3 := startMember(t, 3, lis3, map[uint64]string{1: a1, 2: a2}, memberOpts{tls: p.source(t, "queue-3"), maxRecv: limit, maxSnap: 64 << 10})

	data := make([]byte, 200<<10) // about 25 chunks of this limit's
	for i := range data {
		data[i] = byte(i * 7)
	}
	snap := &raftpb.Snapshot{Data: data, Metadata: raftpb.SnapshotMetadata{Index: 42, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	m1.tr.Send([]raftpb.Message{
		{Type: raftpb.MsgSnap, From: 1, To: 2, Term: 3, Snapshot: snap},
		{Type: raftpb.MsgSnap, From: 1, To: 3, Term: 3, Snapshot: snap},
	})
	eventually(t, "the snapshot reported finished to member 2", func() bool {
		return slices.Equal(m1.reports.snapshotsOf(2), []raft.SnapshotStatus{raft.SnapshotFinish})
	})
	m2.inbox.mu.Lock()
	got := slices.Clone(m2.inbox.msgs)
	m2.inbox.mu.Unlock()
	if len(got) != 1 || got[0].Type != raftpb.MsgSnap || got[0].Snapshot == nil {
		t.Fatalf("member 2 received %v, want the snapshot", got)
	}
	if s := got[0].Snapshot; !bytes.Equal(s.Data, data) || s.Metadata.Index != 42 || s.Metadata.Term != 3 || !slices.Equal(s.Metadata.ConfState.Voters, []uint64{1, 2, 3}) {
		t.Fatalf("member 2's snapshot differs: index %d term %d voters %v, %d bytes", s.Metadata.Index, s.Metadata.Term, s.Metadata.ConfState.Voters, len(s.Data))
	}
	// Member 3 takes at most 64 KiB.
	eventually(t, "the snapshot reported failed to member 3", func() bool {
		return slices.Equal(m1.reports.snapshotsOf(3), []raft.SnapshotStatus{raft.SnapshotFailure})
	})
	if m3.inbox.len() != 0 {
		t.Fatalf("member 3 received %d messages from a refused snapshot", m3.inbox.len())
	}
	if !strings.Contains(m1.logs.String(), "ResourceExhausted") {
		t.Errorf("the refusal's code is not in the sender's log: %s", m1.logs.String())
	}

	// Bad calls, as a peer with a bug would make them.
	conn, err := grpc.NewClient(a2, grpc.WithTransportCredentials(p.source(t, "queue-1").ClientCredentials("")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	env := func(typ raftpb.MessageType) []byte {
		b, err := (&raftpb.Message{Type: typ, From: 1, To: 2, Term: 3, Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 43, Term: 3}}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	call := func(reqs ...*queuev1.SendSnapshotRequest) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		st, err := queuev1.NewRaftServiceClient(conn).SendSnapshot(ctx)
		if err != nil {
			return err
		}
		for _, r := range reqs {
			if err := st.Send(r); err != nil {
				break
			}
		}
		_, err = st.CloseAndRecv()
		return err
	}
	for _, c := range []struct {
		what string
		reqs []*queuev1.SendSnapshotRequest
		code codes.Code
	}{
		{"no chunk", nil, codes.InvalidArgument},
		{"another cluster", []*queuev1.SendSnapshotRequest{{ClusterId: 7, From: 1, To: 2, Message: env(raftpb.MsgSnap), DataBytes: 1, Data: []byte{1}}}, codes.FailedPrecondition},
		{"not a snapshot", []*queuev1.SendSnapshotRequest{{ClusterId: testCluster, From: 1, To: 2, Message: env(raftpb.MsgApp), DataBytes: 1, Data: []byte{1}}}, codes.InvalidArgument},
		{"short", []*queuev1.SendSnapshotRequest{{ClusterId: testCluster, From: 1, To: 2, Message: env(raftpb.MsgSnap), DataBytes: 3, Data: []byte{1}}, {Data: []byte{2}}}, codes.InvalidArgument},
		{"long", []*queuev1.SendSnapshotRequest{{ClusterId: testCluster, From: 1, To: 2, Message: env(raftpb.MsgSnap), DataBytes: 2, Data: []byte{1}}, {Data: []byte{2, 3}}}, codes.InvalidArgument},
	} {
		if err := call(c.reqs...); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %v", c.what, err, c.code)
		}
	}
	if n := m2.inbox.len(); n != 1 {
		t.Errorf("member 2 holds %d messages after the bad calls, want the one snapshot", n)
	}
	// And a good one by hand, for the control.
	if err := call(&queuev1.SendSnapshotRequest{ClusterId: testCluster, From: 1, To: 2, Message: env(raftpb.MsgSnap), DataBytes: 2, Data: []byte{1}}, &queuev1.SendSnapshotRequest{Data: []byte{2}}); err != nil {
		t.Fatalf("a good call by hand: %v", err)
	}
	if n := m2.inbox.len(); n != 2 {
		t.Errorf("member 2 holds %d messages after the good call, want 2", n)
	}
}

// TestReceiverChecks checks what a member refuses to hand its node: a
// batch of another cluster, from a member not in its configuration or for
// another member ends the stream with FAILED_PRECONDITION; a message whose
// To or From disagrees with its batch is dropped; all counted.
func TestReceiverChecks(t *testing.T) {
	lis := listen(t)
	m := startMember(t, 1, lis, map[uint64]string{2: "127.0.0.1:1"}, memberOpts{})
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(req *queuev1.SendRequest) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		st, err := queuev1.NewRaftServiceClient(conn).Send(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(req); err != nil {
			_, err = st.CloseAndRecv()
			return err
		}
		_, err = st.CloseAndRecv()
		return err
	}
	marshal := func(ms ...raftpb.Message) [][]byte {
		var out [][]byte
		for _, msg := range ms {
			b, err := msg.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	ok := marshal(heartbeat(2, 1, 7))
	for _, c := range []struct {
		name   string
		req    *queuev1.SendRequest
		label  string
		reason string
	}{
		{"other cluster", &queuev1.SendRequest{ClusterId: testCluster + 1, From: 2, To: 1, Messages: ok}, unknownLabel, reasonOtherCluster},
		{"unknown sender", &queuev1.SendRequest{ClusterId: testCluster, From: 3, To: 1, Messages: marshal(heartbeat(3, 1, 7))}, unknownLabel, reasonUnknownSender},
		{"for another member", &queuev1.SendRequest{ClusterId: testCluster, From: 2, To: 3, Messages: ok}, "2", reasonWrongMember},
	} {
		err := send(c.req)
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s: %v, want FAILED_PRECONDITION", c.name, err)
		}
		if got := m.counter(t, DroppedMetric, map[string]string{"peer": c.label, "direction": "in", "reason": c.reason}); got != 1 {
			t.Errorf("%s: dropped{peer=%s,reason=%s} = %v, want 1", c.name, c.label, c.reason, got)
		}
	}
	err = send(&queuev1.SendRequest{ClusterId: testCluster, From: 2, To: 1,
		Messages: append(marshal(heartbeat(2, 3, 1), heartbeat(3, 1, 2), heartbeat(2, 1, 3)), []byte{0xff, 0xff})})
	if err != nil {
		t.Fatalf("a batch with bad messages in it: %v, want the good one delivered", err)
	}
	for reason, want := range map[string]float64{reasonWrongTo: 1, reasonWrongFrom: 1, reasonMalformed: 1} {
		if got := m.counter(t, DroppedMetric, map[string]string{"peer": "2", "direction": "in", "reason": reason}); got != want {
			t.Errorf("dropped{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	m.inbox.mu.Lock()
	got := append([]raftpb.Message(nil), m.inbox.msgs...)
	m.inbox.mu.Unlock()
	if len(got) != 1 || got[0].Commit != 3 {
		t.Errorf("delivered %+v, want only the heartbeat from 2 to 1 with commit 3", got)
	}
	// A peer removed from the configuration is refused from then on.
	m.tr.RemovePeer(2)
	if err := send(&queuev1.SendRequest{ClusterId: testCluster, From: 2, To: 1, Messages: ok}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a removed peer's batch: %v, want FAILED_PRECONDITION", err)
	}
}

// TestMutualTLS checks that under mutual TLS with the default role table
// members with queue-peer certificates exchange messages, and a worker's
// certificate is refused PERMISSION_DENIED: nothing it sends reaches the
// node.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	lis1, lis2, lis3 := listen(t), listen(t), listen(t)
	a1, a2, a3 := lis1.Addr().String(), lis2.Addr().String(), lis3.Addr().String()
	m1 := startMember(t, 1, lis1, map[uint64]string{2: a2, 3: a3}, memberOpts{tls: p.source(t, "queue-1")})
	m2 := startMember(t, 2, lis2, map[uint64]string{1: a1, 3: a3}, memberOpts{tls: p.source(t, "queue-2")})
	// Member 3 dials with a worker's certificate (and serves with it).
	m3 := startMember(t, 3, lis3, map[uint64]string{1: a1, 2: a2}, memberOpts{tls: p.source(t, "worker")})
	exchange(t, []*member{m1, m2}, 50)

	m3.tr.Send([]raftpb.Message{heartbeat(3, 1, 1)})
	eventually(t, "the worker's stream refused PERMISSION_DENIED", func() bool {
		m3.tr.Send([]raftpb.Message{heartbeat(3, 1, 1)})
		return strings.Contains(m3.logs.String(), "PermissionDenied")
	})
	if n := m1.inbox.from(3); n != 0 {
		t.Errorf("member 1 received %d messages from a worker's certificate", n)
	}
	if got := m1.counter(t, ReceivedMetric, map[string]string{"peer": "3"}); got != 0 {
		t.Errorf("%s{peer=3} = %v, want 0", ReceivedMetric, got)
	}

	// The same refusal seen by a bare client: the code itself.
	conn, err := grpc.NewClient(a1, grpc.WithTransportCredentials(p.source(t, "worker").ClientCredentials("")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := queuev1.NewRaftServiceClient(conn).Send(ctx)
	if err == nil {
		_ = st.Send(&queuev1.SendRequest{ClusterId: testCluster, From: 3, To: 1})
		_, err = st.CloseAndRecv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a worker calling RaftService.Send: %v, want PERMISSION_DENIED", err)
	}
}

// TestAddPeer checks that a peer added later is sent to and received
// from, and that moving a peer to a new address moves its stream.
func TestAddPeer(t *testing.T) {
	lis1, lis2, lis3 := listen(t), listen(t), listen(t)
	m1 := startMember(t, 1, lis1, nil, memberOpts{})
	m2 := startMember(t, 2, lis2, map[uint64]string{1: m1.addr}, memberOpts{})
	m1.tr.Send([]raftpb.Message{heartbeat(1, 2, 1)})
	if got := m1.counter(t, DroppedMetric, map[string]string{"peer": "2", "reason": reasonUnknownPeer}); got != 1 {
		t.Errorf("a message to a member not yet added: dropped{reason=unknown_peer} = %v, want 1", got)
	}
	if err := m1.tr.AddPeer(2, m2.addr); err != nil {
		t.Fatal(err)
	}
	exchange(t, []*member{m1, m2}, 10)
	// Member 2's address changes: member 3 now answers for id 2 at the
	// new one.
	m3 := startMember(t, 2, lis3, map[uint64]string{1: m1.addr}, memberOpts{})
	if err := m1.tr.AddPeer(2, m3.addr); err != nil {
		t.Fatal(err)
	}
	m1.tr.Send([]raftpb.Message{heartbeat(1, 2, 0)})
	eventually(t, "the moved peer reached at its new address", func() bool { return m3.inbox.from(1) == 1 })
	for _, bad := range []struct {
		id   uint64
		addr string
	}{{1, m2.addr}, {0, m2.addr}, {4, "no-port"}} {
		if err := m1.tr.AddPeer(bad.id, bad.addr); err == nil {
			t.Errorf("AddPeer(%d, %q) = nil, want an error", bad.id, bad.addr)
		}
	}
}

// TestClose checks that Close ends every goroutine of the transport, the
// streams it receives included, calls recv no more, and that Send after
// Close is harmless.
func TestClose(t *testing.T) {
	before := transportGoroutines()
	ms := three(t, memberOpts{})
	exchange(t, ms, 10)
	if transportGoroutines() <= before {
		t.Fatal("no transport goroutines while running: the count proves nothing")
	}
	for _, m := range ms {
		m.tr.Close()
	}
	// The servers still run: only Close can have ended the streams they
	// were receiving.
	eventually(t, "every transport goroutine gone after Close", func() bool { return transportGoroutines() == before })
	n := ms[1].inbox.len()
	ms[0].tr.Send([]raftpb.Message{heartbeat(1, 2, 99)})
	ms[0].tr.Close()
	if err := ms[0].tr.AddPeer(4, "127.0.0.1:1"); err == nil {
		t.Error("AddPeer after Close = nil, want an error")
	}
	if got := transportGoroutines(); got != before {
		t.Errorf("%d transport goroutines after Send and AddPeer on a closed transport, want %d", got, before)
	}
	if got := ms[1].inbox.len(); got != n {
		t.Errorf("member 2 received %d messages after Close", got-n)
	}
	// A stream opened to a closed transport is refused, not served.
	conn, err := grpc.NewClient(ms[1].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := queuev1.NewRaftServiceClient(conn).Send(ctx)
	if err == nil {
		_, err = st.CloseAndRecv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a stream to a closed transport: %v, want UNAVAILABLE", err)
	}
}

// TestSetStopping: a member's SetStopping reaches every peer at once in a
// batch of its own, with no message to carry it, and every batch after
// says it too; the peers' own batches do not.
func TestSetStopping(t *testing.T) {
	ms := three(t, memberOpts{})
	exchange(t, ms, 5)
	for _, p := range ms[1:] {
		if stopping, heard := p.reports.saidStopping(ms[0].id); stopping || !heard {
			t.Fatalf("member %d heard member %d say it is stopping (%v) before it did, or heard nothing (%v)", p.id, ms[0].id, stopping, !heard)
		}
	}
	before := ms[1].inbox.len()
	ms[0].tr.SetStopping()
	for _, p := range ms[1:] {
		eventually(t, "a peer hears that member 1 is stopping", func() bool {
			stopping, _ := p.reports.saidStopping(ms[0].id)
			return stopping
		})
	}
	if got := ms[1].inbox.len(); got != before {
		t.Errorf("member 2 was handed %d messages by a batch that carried none", got-before)
	}
	exchange(t, ms, 5)
	for _, p := range ms[1:] {
		if stopping, _ := p.reports.saidStopping(ms[0].id); !stopping {
			t.Errorf("member %d: a later batch of member 1 no longer says it is stopping", p.id)
		}
	}
	if stopping, _ := ms[0].reports.saidStopping(ms[1].id); stopping {
		t.Errorf("member 1 heard member 2 say it is stopping")
	}
}
