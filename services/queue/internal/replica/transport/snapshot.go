package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A snapshot too large for one Send request goes by SendSnapshot, a call
// of its own per snapshot: chunks of at most snapshotChunk bytes of data,
// the first with the message (its snapshot's data left out) as the
// envelope. Raft sends a follower one snapshot and waits for the report
// before it sends another, so there is at most one such call per peer.
//
// The receiver holds the whole snapshot in memory before the node steps
// it, as the node then holds it in its storage: a snapshot is the queue's
// state, and DefaultMaxSnapshotBytes bounds what a member accepts.

// DefaultMaxSnapshotBytes is the largest snapshot a member accepts when
// Config says none: far above a queue of millions of keys (tens of bytes
// each), and a bound on what a peer can make it allocate.
const DefaultMaxSnapshotBytes = 4 << 30

// snapshotTimeout bounds one snapshot's call; a transfer that stalls
// longer is reported failed and raft tries again.
const snapshotTimeout = 10 * time.Minute

// chunkBytes is the data of one chunk: well within the receiver's
// request size, with room for the envelope in the first.
func (t *Transport) chunkBytes() int { return min(1<<20, t.maxBatch/2) }

// sendLarge starts the call for a snapshot message too large for a
// request, unless one to this peer is under way (then it is dropped and
// reported failed). t.mu is held.
func (p *peer) sendLarge(m *raftpb.Message) {
	if !p.snapSending.CompareAndSwap(false, true) {
		p.drop(m, reasonQueueFull)
		return
	}
	msg := *m
	if !p.t.goroutine(func() {
		defer p.snapSending.Store(false)
		start := time.Now()
		if err := p.sendSnapshot(&msg); err != nil {
			p.t.m.dropped(p.label, outbound, reasonStream, 1)
			p.t.log.Warn("sending a snapshot failed; raft will try again", "peer", p.id, "bytes", len(msg.Snapshot.Data), "err", err)
			p.reportSnapshot(raft.SnapshotFailure)
			return
		}
		p.t.m.sent.WithLabelValues(p.label).Inc()
		p.t.log.Info("snapshot sent", "peer", p.id, "index", msg.Snapshot.Metadata.Index, "bytes", len(msg.Snapshot.Data), "took", time.Since(start))
		p.reportSnapshot(raft.SnapshotFinish)
	}) {
		p.snapSending.Store(false)
	}
}

// sendSnapshot makes one SendSnapshot call for m.
func (p *peer) sendSnapshot(m *raftpb.Message) error {
	ctx, cancel := context.WithTimeout(p.ctx, snapshotTimeout)
	defer cancel()
	data := m.Snapshot.Data
	env := *m
	snap := *m.Snapshot
	snap.Data = nil
	env.Snapshot = &snap
	head, err := env.Marshal()
	if err != nil {
		return fmt.Errorf("marshal the envelope: %w", err)
	}
	st, err := queuev1.NewRaftServiceClient(p.conn).SendSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	chunk := p.t.chunkBytes()
	first := true
	for off := 0; first || off < len(data); first = false {
		n := min(chunk, len(data)-off)
		req := &queuev1.SendSnapshotRequest{Data: data[off : off+n]}
		if first {
			req.ClusterId, req.From, req.To = p.t.cfg.ClusterID, p.t.cfg.ID, p.id
			req.Message, req.DataBytes, req.FromAddr = head, uint64(len(data)), p.t.cfg.Addr
		}
		if err := st.Send(req); err != nil {
			if errors.Is(err, io.EOF) {
				// The receiver ended the call: its status says why.
				_, err = st.CloseAndRecv()
			}
			return fmt.Errorf("write: %w", err)
		}
		off += n
	}
	if _, err := st.CloseAndRecv(); err != nil {
		return fmt.Errorf("the peer did not take it: %w", err)
	}
	return nil
}

// SendSnapshot receives one snapshot in chunks, as Send does a stream.
func (r *receiver) SendSnapshot(st queuev1.RaftService_SendSnapshotServer) error {
	return r.serve(st.Context(), func(ctx context.Context) error { return r.receiveSnapshot(ctx, st) },
		func() error { return st.SendAndClose(&queuev1.SendSnapshotResponse{}) })
}

// receiveSnapshot checks the envelope, gathers the data and hands the
// message to recv; nothing reaches it unless the whole snapshot arrived.
func (r *receiver) receiveSnapshot(ctx context.Context, st queuev1.RaftService_SendSnapshotServer) error {
	t := r.t
	req, err := st.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "transport: a snapshot call with no chunk")
		}
		return err
	}
	learning, label, reason, err := r.check(&queuev1.SendRequest{ClusterId: req.GetClusterId(), From: req.GetFrom(), To: req.GetTo(), FromAddr: req.GetFromAddr()})
	if err != nil {
		t.dropIn(ctx, label, reason, 1, err, "from", req.GetFrom(), "snapshot", true)
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	label = peerLabel(req.GetFrom())
	var m raftpb.Message
	if err := m.Unmarshal(req.GetMessage()); err != nil || m.Type != raftpb.MsgSnap || m.Snapshot == nil {
		err := status.Error(codes.InvalidArgument, "transport: a snapshot call whose envelope is not a snapshot message")
		t.dropIn(ctx, label, reasonMalformed, 1, err, "snapshot", true)
		return err
	}
	if m.To != t.cfg.ID || m.From != req.GetFrom() {
		err := status.Errorf(codes.FailedPrecondition, "transport: a snapshot message from %d to %d in a call from %d", m.From, m.To, req.GetFrom())
		t.dropIn(ctx, label, reasonWrongTo, 1, err, "snapshot", true)
		return err
	}
	if learning {
		// Only a leader sends a snapshot.
		if label, reason, err := r.learn(req.GetFrom(), req.GetFromAddr()); err != nil {
			t.dropIn(ctx, label, reason, 1, err, "from", req.GetFrom(), "snapshot", true)
			return status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	size := req.GetDataBytes()
	if size > uint64(t.cfg.MaxSnapshotBytes) {
		err := status.Errorf(codes.ResourceExhausted, "transport: a snapshot of %d bytes, this member accepts at most %d", size, t.cfg.MaxSnapshotBytes)
		t.dropIn(ctx, label, reasonOversize, 1, err, "snapshot", true)
		return err
	}
	data := make([]byte, 0, min(size, 64<<20)) // grown as chunks come, not at a claimed size
	for {
		if uint64(len(data))+uint64(len(req.GetData())) > size {
			err := status.Errorf(codes.InvalidArgument, "transport: the snapshot's chunks exceed its %d bytes", size)
			t.dropIn(ctx, label, reasonMalformed, 1, err, "snapshot", true)
			return err
		}
		data = append(data, req.GetData()...)
		if req, err = st.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
	}
	if uint64(len(data)) != size {
		err := status.Errorf(codes.InvalidArgument, "transport: the snapshot's chunks hold %d of its %d bytes", len(data), size)
		t.dropIn(ctx, label, reasonMalformed, 1, err, "snapshot", true)
		return err
	}
	m.Snapshot.Data = data
	t.recv(ctx, m)
	t.m.received.WithLabelValues(label).Inc()
	return nil
}
