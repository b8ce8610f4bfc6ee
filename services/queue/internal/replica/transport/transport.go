package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
)

// DefaultQueueLength is a peer's send queue when Config says none: about a
// second of a busy leader's appends and heartbeats (rafthttp keeps 4096
// per stream too). Beyond it messages are dropped, not queued, because a
// peer that far behind is better served by Raft's probing than by a
// backlog of appends it will mostly reject.
const DefaultQueueLength = 4096

// batchHeaderBytes bounds what a request holds besides its messages and
// its from_addr (Transport.maxBatch counts that one): three uint64 fields,
// each a tag and at most ten bytes of varint, format_level, a tag and at
// most five, and stopping, a tag and one.
const batchHeaderBytes = 3*11 + 6 + 2

// Config is one member's transport.
type Config struct {
	// ClusterID identifies the queue; every member has the same one, and
	// a batch with another is refused. Not zero.
	ClusterID uint64
	// ID is this member's Raft id. Not zero.
	ID uint64
	// Peers are the other members: Raft id → the host:port their gRPC
	// server with RaftService listens on. An entry for ID is refused.
	Peers map[uint64]string
	// Addr is this member's own peer address (its --advertise-peer-addr),
	// sent with every batch so that a member whose configuration does not
	// hold this one yet can answer it (receiver.go, "Senders a member
	// does not know"). Empty sends none.
	Addr string
	// TLS, if set, dials every peer with mutual TLS: it presents the
	// Source's certificate (the member's, role queue-peer) and verifies
	// the peer's against its CA bundle and the host of the peer's address.
	// Nil dials plaintext (tests, loopback).
	TLS *tlsfiles.Source
	// MaxMessageBytes is the largest request the peers' gRPC servers
	// accept (their MaxRecvMsgSize; baton-queue's --max-request-bytes).
	// Batches are kept within it, and a message that alone would exceed
	// it is refused. Raft's MaxSizePerMsg must stay well below it, or
	// appends of large entries will be refused. 0 means
	// serve.DefaultMaxRecvBytes.
	MaxMessageBytes int
	// QueueLength is each peer's send queue, in messages; 0 means
	// DefaultQueueLength.
	QueueLength int
	// MaxSnapshotBytes is the largest snapshot (its data) this member
	// accepts from a peer by SendSnapshot; 0 means
	// DefaultMaxSnapshotBytes. A snapshot that fits one request comes by
	// Send, within MaxMessageBytes.
	MaxSnapshotBytes int64
	// ReportUnreachable, if set, is told that a peer could not be reached
	// (a message to it was dropped, or its stream broke): raft.Node's and
	// RawNode's ReportUnreachable. Called from the transport's goroutines,
	// at most one call per peer at a time; it must return once the node
	// has stopped, since Close waits for it.
	ReportUnreachable func(id uint64)
	// ReportSnapshot, if set, is told whether a MsgSnap was written to its
	// peer's stream (SnapshotFinish) or dropped (SnapshotFailure):
	// raft.Node's and RawNode's ReportSnapshot. Without it, a leader whose
	// snapshot was dropped waits for the follower to answer before it
	// tries again. Called as ReportUnreachable is.
	ReportSnapshot func(id uint64, status raft.SnapshotStatus)
	// Join, if set, answers RaftService.Join, and checks its cluster id
	// itself: a member joining under another --initial-cluster than the
	// queue began with (one MemberAdd added) does not know the queue's id
	// yet, and whether it may ask is a question of membership, which is
	// the node's, not the transport's. Nil answers UNIMPLEMENTED.
	Join func(ctx context.Context, req *queuev1.JoinRequest) (*queuev1.JoinResponse, error)
	// Publish, if set, answers RaftService.Publish: a member telling the
	// leader its client address. The node checks the request. Nil answers
	// UNIMPLEMENTED.
	Publish func(ctx context.Context, req *queuev1.PublishRequest) (*queuev1.PublishResponse, error)
	// Heard, if set, is told the format level (package format) of every
	// batch a member sends, and whether the member says it is stopping
	// (SetStopping), before its messages are handed on: the leader writes
	// no format a voter's level does not read, and hands a stopping member
	// no leadership. Level 0 is a member of a release that did not send
	// it. Called on the receiving goroutine; it must not block.
	Heard func(from uint64, level format.Level, stopping bool)
	// Logger receives stream failures and refusals; nil discards.
	Logger *slog.Logger
	// Registerer receives the transport's metrics (metrics.go); nil
	// registers none. Close unregisters them.
	Registerer prometheus.Registerer
}

// Transport sends to and receives from one member's peers. Its methods are
// safe for concurrent use.
type Transport struct {
	cfg      Config
	log      *slog.Logger
	recv     func(context.Context, raftpb.Message)
	m        *metrics
	maxBatch int // bytes a request's messages may take, framing included

	// ctx ends when Close is called: every peer's goroutines and every
	// stream being received end with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.RWMutex
	peers  map[uint64]*peer
	closed bool
	// removed are the ids RemovePeer removed: a member removed from the
	// configuration is never taken back as a sender this member does not
	// know (ids are not reused).
	removed map[uint64]bool

	// stopping is sent with every batch once SetStopping is called.
	stopping atomic.Bool

	// lastOversizeLog rate-limits the WARN of refused messages: Raft
	// sends a refused append again at every heartbeat.
	lastOversizeLog atomic.Int64
	// drops rate-limits the WARN of messages received and dropped.
	drops dropLog
}

// New starts a transport: one sender per peer (each dials when it first
// has something to send). recv is called with each message received for
// this member, one at a time per sending peer and in the order sent, on
// the stream's goroutine: it should hand the message to the node
// (raft.Node.Step, whose context it may pass on) and return. The context
// ends when the stream does or the transport is closed.
func New(cfg Config, recv func(context.Context, raftpb.Message)) (*Transport, error) {
	switch {
	case cfg.ClusterID == 0:
		return nil, errors.New("transport: no cluster id")
	case cfg.ID == 0:
		return nil, errors.New("transport: no member id (Raft ids start at 1)")
	case recv == nil:
		return nil, errors.New("transport: no recv")
	case cfg.MaxMessageBytes < 0 || cfg.QueueLength < 0 || cfg.MaxSnapshotBytes < 0:
		return nil, errors.New("transport: a negative MaxMessageBytes, QueueLength or MaxSnapshotBytes")
	}
	if cfg.MaxSnapshotBytes == 0 {
		cfg.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = serve.DefaultMaxRecvBytes
	}
	if cfg.MaxMessageBytes <= batchHeaderBytes+framedSize(len(cfg.Addr)) {
		return nil, fmt.Errorf("transport: MaxMessageBytes %d leaves no room for a message", cfg.MaxMessageBytes)
	}
	if cfg.QueueLength == 0 {
		cfg.QueueLength = DefaultQueueLength
	}
	for id, addr := range cfg.Peers {
		if err := checkPeer(cfg.ID, id, addr); err != nil {
			return nil, fmt.Errorf("transport: %w", err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	t := &Transport{
		cfg:      cfg,
		log:      log.With("member", cfg.ID),
		recv:     recv,
		m:        m,
		maxBatch: cfg.MaxMessageBytes - batchHeaderBytes - framedSize(len(cfg.Addr)),
		peers:    make(map[uint64]*peer, len(cfg.Peers)),
		removed:  map[uint64]bool{},
		drops:    dropLog{now: time.Now},
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for id, addr := range cfg.Peers {
		p, err := t.newPeer(id, addr)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("transport: %w", err)
		}
		t.peers[id] = p
	}
	return t, nil
}

// checkPeer refuses an id or address a peer cannot have.
func checkPeer(self, id uint64, addr string) error {
	if id == 0 {
		return fmt.Errorf("peer id 0 (Raft ids start at 1) at %q", addr)
	}
	if id == self {
		return fmt.Errorf("peer %d is this member", id)
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("peer %d: address %q is not host:port", id, addr)
	}
	return nil
}

// Register adds RaftService to srv, the member's gRPC server, whose
// MaxRecvMsgSize should be the peers' Config.MaxMessageBytes. Under mutual
// TLS the server's authorization decides who may call it (the default
// table: queue-peer only).
func (t *Transport) Register(srv grpc.ServiceRegistrar) {
	queuev1.RegisterRaftServiceServer(srv, &receiver{t: t})
}

// SetStopping makes every batch from now on say that this member is
// stopping, and has every peer's stream send one at once, with no messages
// if none wait: a leader that is handing this member leadership learns
// within a round trip that it will not take it.
func (t *Transport) SetStopping() {
	t.stopping.Store(true)
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, p := range t.peers {
		select {
		case p.nudge <- struct{}{}:
		default: // one is pending
		}
	}
}

// Publish calls RaftService.Publish on peer id over the connection its
// messages take (so with the same certificate and keepalives), and returns
// its answer; a peer this transport does not know is an error.
func (t *Transport) Publish(ctx context.Context, id uint64, req *queuev1.PublishRequest) (*queuev1.PublishResponse, error) {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	if p == nil {
		return nil, fmt.Errorf("transport: no peer %d to publish to", id)
	}
	return queuev1.NewRaftServiceClient(p.conn).Publish(ctx, req)
}

// Send queues msgs for their peers (each message's To) and returns without
// waiting for the network. A snapshot larger than a request may be is sent
// by a SendSnapshot call of its own (snapshot.go). A message to a member
// this transport does not know, any other larger than a request may be,
// and one whose peer's queue is full are dropped and counted. Messages to this member itself are the
// caller's to handle and are dropped too.
func (t *Transport) Send(msgs []raftpb.Message) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return
	}
	for i := range msgs {
		m := &msgs[i]
		p := t.peers[m.To]
		if p == nil {
			t.m.dropped(peerLabel(m.To), outbound, reasonUnknownPeer, 1)
			continue
		}
		n := framedSize(m.Size())
		if n > t.maxBatch && m.Type == raftpb.MsgSnap {
			p.sendLarge(m)
			continue
		}
		if n > t.maxBatch {
			t.m.dropped(p.label, outbound, reasonOversize, 1)
			t.logOversize(m, n)
			if m.Type == raftpb.MsgSnap {
				p.reportSnapshot(raft.SnapshotFailure)
			}
			continue
		}
		select {
		case p.queue <- *m:
		default:
			t.m.dropped(p.label, outbound, reasonQueueFull, 1)
			p.reportUnreachable()
			if m.Type == raftpb.MsgSnap {
				p.reportSnapshot(raft.SnapshotFailure)
			}
		}
	}
}

// logOversize says, at most once a second, that a message was refused.
func (t *Transport) logOversize(m *raftpb.Message, n int) {
	now := time.Now().UnixNano()
	last := t.lastOversizeLog.Load()
	if now-last < int64(time.Second) || !t.lastOversizeLog.CompareAndSwap(last, now) {
		return
	}
	t.log.Warn("raft message larger than a peer accepts: dropped",
		"peer", m.To, "type", m.Type.String(), "bytes", n, "max", t.maxBatch)
}

// AddPeer makes id, reached at addr, a peer: a member added to the
// configuration. Adding a peer again with the same address changes
// nothing; with another, its stream moves to the new address.
func (t *Transport) AddPeer(id uint64, addr string) error {
	if err := checkPeer(t.cfg.ID, id, addr); err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("transport: closed")
	}
	old := t.peers[id]
	if old != nil && old.addr == addr {
		old.learnt = false
		return nil
	}
	p, err := t.newPeer(id, addr)
	if err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	if old != nil {
		old.stop()
	}
	t.peers[id] = p
	return nil
}

// RemovePeer stops sending to id and refuses its batches from now on: a
// member removed from the configuration. It does not wait for the peer's
// goroutines (Close does), so the Ready loop may call it while applying a
// configuration change.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removed[id] = true
	if p := t.peers[id]; p != nil {
		p.stop()
		delete(t.peers, id)
	}
}

// standing reports whether id is a peer of the current configuration, or
// one learnt from its own batches (receiver.go), and whether it was
// removed from the configuration.
func (t *Transport) standing(id uint64) (configured, learnt, removed bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p := t.peers[id]
	return p != nil && !p.learnt, p != nil && p.learnt, t.removed[id]
}

// learn makes id, at addr, a peer learnt from its own batches: one that
// sends a leader's messages, and that this member's configuration does
// not hold yet. AddPeer makes it a peer of the configuration.
func (t *Transport) learn(id uint64, addr string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return errors.New("transport: closed")
	case t.removed[id]:
		return fmt.Errorf("transport: member %d was removed from the configuration", id)
	}
	old := t.peers[id]
	if old != nil && (!old.learnt || old.addr == addr) {
		return nil
	}
	if old == nil {
		n := 0
		for _, p := range t.peers {
			if p.learnt {
				n++
			}
		}
		if n >= maxLearnt {
			return fmt.Errorf("transport: already %d senders outside the configuration", n)
		}
	}
	p, err := t.newPeer(id, addr)
	if err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	p.learnt = true
	if old != nil {
		old.stop()
	}
	t.peers[id] = p
	t.log.Warn("a member this one's configuration does not hold sends a leader's messages: taking them and answering at the address it gives, until this member's log reaches the change that added it",
		"peer", id, "addr", addr)
	return nil
}

// Close stops every sender and ends every stream being received, waits for
// their goroutines, closes the connections and unregisters the metrics.
// recv and the Report hooks are not called once it has returned. Send after
// Close drops nothing and counts nothing.
func (t *Transport) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	for id, p := range t.peers {
		p.stop()
		delete(t.peers, id)
	}
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	t.m.unregister()
}

// goroutine runs f on a goroutine Close waits for, unless the transport is
// closed already; it reports whether f runs. t.mu must be held (either
// way), so that no goroutine starts after Close has begun waiting.
func (t *Transport) goroutine(f func()) bool {
	if t.closed {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// framedSize is what a message of n bytes takes in a request's repeated
// bytes field: its tag, its length's varint, itself.
func framedSize(n int) int {
	size := 1 + n
	for v := uint64(n); ; v >>= 7 {
		size++
		if v < 0x80 {
			return size
		}
	}
}

// peerLabel is a peer's metric label: its Raft id in decimal.
func peerLabel(id uint64) string { return strconv.FormatUint(id, 10) }
