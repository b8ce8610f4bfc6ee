package transport

import (
	"context"
	"strings"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// rawSender sends batches to a member's RaftService as a peer would,
// whatever they hold.
type rawSender struct {
	t    *testing.T
	conn *grpc.ClientConn
}

func newRawSender(t *testing.T, addr string) *rawSender {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawSender{t: t, conn: conn}
}

// send sends one batch on a stream of its own and returns the stream's end.
func (s *rawSender) send(req *queuev1.SendRequest) error {
	ctx, cancel := context.WithTimeout(s.t.Context(), 10*time.Second)
	defer cancel()
	st, err := queuev1.NewRaftServiceClient(s.conn).Send(ctx)
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

func marshalAll(t *testing.T, ms ...raftpb.Message) [][]byte {
	t.Helper()
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

// warnings returns m's WARN lines that hold every one of subs.
func (m *member) warnings(subs ...string) []string {
	var out []string
	for line := range strings.Lines(m.logs.String()) {
		ok := strings.Contains(line, "level=WARN")
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// TestDroppedMessagesAreLogged: messages of a member's peer that do not
// fit (bytes that are no raft message, a type raft keeps to itself, a
// type raft does not have, a batch of another cluster or from a member
// not in the configuration) are dropped, counted, and logged once per
// peer and reason however many arrive; the good message beside them is
// delivered.
func TestDroppedMessagesAreLogged(t *testing.T) {
	m := startMember(t, 1, listen(t), map[uint64]string{2: "127.0.0.1:1"}, memberOpts{})
	s := newRawSender(t, m.addr)
	garbage := [][]byte{{0xff, 0xff}, {0x08}, {0x0a, 0x05, 0x01}}
	local := raftpb.Message{Type: raftpb.MsgHup, From: 2, To: 1}
	unknown := raftpb.Message{Type: raftpb.MessageType(9999), From: 2, To: 1, Term: 1}
	const rounds = 3
	for i := range rounds {
		msgs := append(append([][]byte(nil), garbage...), marshalAll(t, local, unknown, heartbeat(2, 1, uint64(i+1)))...)
		if err := s.send(&queuev1.SendRequest{ClusterId: testCluster, From: 2, To: 1, Messages: msgs}); err != nil {
			t.Fatalf("round %d: %v, want the good message delivered", i, err)
		}
		err := s.send(&queuev1.SendRequest{ClusterId: testCluster + 1, From: 2, To: 1, Messages: marshalAll(t, heartbeat(2, 1, 100))})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("round %d: a batch of another cluster: %v, want FAILED_PRECONDITION", i, err)
		}
		err = s.send(&queuev1.SendRequest{ClusterId: testCluster, From: 3, To: 1, Messages: marshalAll(t, heartbeat(3, 1, 100))})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("round %d: a batch from a stranger: %v, want FAILED_PRECONDITION", i, err)
		}
	}
	for _, c := range []struct {
		peer, reason string
		dropped      float64
	}{
		{"2", "malformed", rounds * float64(len(garbage))},
		{"2", "local_type", rounds},
		{"2", "unknown_type", rounds},
		{unknownLabel, "other_cluster", rounds},
		{unknownLabel, "unknown_sender", rounds},
	} {
		if got := m.counter(t, DroppedMetric, map[string]string{"peer": c.peer, "direction": "in", "reason": c.reason}); got != c.dropped {
			t.Errorf("dropped{peer=%s,reason=%s} = %v, want %v", c.peer, c.reason, got, c.dropped)
		}
		if lines := m.warnings("peer="+c.peer, "reason="+c.reason); len(lines) != 1 {
			t.Errorf("peer %s, reason %s: %d WARN lines, want 1: %q", c.peer, c.reason, len(lines), lines)
		}
	}
	m.inbox.mu.Lock()
	got := append([]raftpb.Message(nil), m.inbox.msgs...)
	m.inbox.mu.Unlock()
	if len(got) != rounds {
		t.Errorf("delivered %d messages, want the %d heartbeats: %+v", len(got), rounds, got)
	}
	for _, msg := range got {
		if msg.Type != raftpb.MsgHeartbeat {
			t.Errorf("delivered a %v", msg.Type)
		}
	}
}
