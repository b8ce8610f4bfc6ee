package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Reconnecting. A member that restarts must hear from the leader again
// within an election timeout (about a second) or it campaigns and
// disturbs the cluster, so both the stream's backoff and the connection's
// own (grpc-go's default grows to two minutes) stay near a second.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// maxBatchMessages bounds the messages of one request besides its bytes,
// so that one write does not hold a long run of heartbeats behind it.
const maxBatchMessages = 1024

// peer is the sending side towards one member: its connection, its queue
// and the two goroutines that drain them.
type peer struct {
	t     *Transport
	id    uint64
	addr  string
	label string
	conn  *grpc.ClientConn
	queue chan raftpb.Message
	// learnt: the configuration does not hold the peer; it was learnt
	// from its batches (Transport.learn). Guarded by the transport's mu.
	learnt bool

	ctx    context.Context // ends when the peer is removed or the transport closed
	cancel context.CancelFunc

	// nudge holds one pending batch to send even with no message
	// (SetStopping).
	nudge chan struct{}
	// unreachable holds one pending ReportUnreachable: drops in a burst
	// are one report, which is all Raft needs to start probing.
	unreachable chan struct{}
	// snapshots are the ReportSnapshot calls owed, in order; none may be
	// lost, since a leader waits in StateSnapshot for its answer.
	snapMu    sync.Mutex
	snapshots []raft.SnapshotStatus
	snapReady chan struct{}
	// snapSending is set while a SendSnapshot call to the peer is under
	// way (snapshot.go).
	snapSending atomic.Bool
}

// newPeer dials (lazily) id at addr and starts its goroutines. t.mu must
// be held.
func (t *Transport) newPeer(id uint64, addr string) (*peer, error) {
	if t.closed {
		return nil, errors.New("closed")
	}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if t.cfg.TLS != nil {
		// "": each handshake verifies the peer's certificate against the
		// host of the address dialed, as client/internal/dial does for
		// Baton's clients (not importable from here: it is the client
		// module's internal package).
		creds = t.cfg.TLS.ClientCredentials("")
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(t.cfg.MaxMessageBytes)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxBackoff},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Raft notices a silent peer by its missing answers; a connection
		// whose other end vanished without a FIN would otherwise look
		// alive to TCP for many minutes and hold the stream's writes. 10 s
		// stays above the servers' 5 s ping floor (serve.KeepaliveMinTime).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	)
	if err != nil {
		return nil, fmt.Errorf("peer %d at %s: %w", id, addr, err)
	}
	p := &peer{
		t:           t,
		id:          id,
		addr:        addr,
		label:       peerLabel(id),
		conn:        conn,
		queue:       make(chan raftpb.Message, t.cfg.QueueLength),
		unreachable: make(chan struct{}, 1),
		nudge:       make(chan struct{}, 1),
		snapReady:   make(chan struct{}, 1),
	}
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	// t.mu is held and t is not closed: both start.
	t.goroutine(p.run)
	t.goroutine(p.report)
	return p, nil
}

// stop ends the peer's goroutines and closes its connection once the
// writer is done with it.
func (p *peer) stop() { p.cancel() }

// reportUnreachable asks the report goroutine to tell the node; it never
// blocks.
func (p *peer) reportUnreachable() {
	select {
	case p.unreachable <- struct{}{}:
	default:
	}
}

// reportSnapshot queues a ReportSnapshot for the report goroutine.
func (p *peer) reportSnapshot(s raft.SnapshotStatus) {
	p.snapMu.Lock()
	p.snapshots = append(p.snapshots, s)
	p.snapMu.Unlock()
	select {
	case p.snapReady <- struct{}{}:
	default:
	}
}

// report calls the Config's hooks. It is a goroutine of its own because a
// hook hands a message to the node's goroutine and may wait for it, which
// neither Send (the Ready loop) nor a writer stalled on the network should.
func (p *peer) report() {
	cfg := p.t.cfg
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.unreachable:
			if cfg.ReportUnreachable != nil {
				cfg.ReportUnreachable(p.id)
			}
		case <-p.snapReady:
			p.snapMu.Lock()
			owed := p.snapshots
			p.snapshots = nil
			p.snapMu.Unlock()
			for _, s := range owed {
				if cfg.ReportSnapshot != nil {
					cfg.ReportSnapshot(p.id, s)
				}
			}
		}
	}
}

// run keeps a stream open to the peer until the peer is stopped: it opens
// one, writes to it until it breaks, and opens the next after a backoff
// during which messages for the peer are dropped (Raft resends what still
// matters once it probes the peer again).
func (p *peer) run() {
	defer p.conn.Close()
	log := p.t.log.With("peer", p.id, "addr", p.addr)
	delay := minBackoff
	failing := false // the last attempt failed too: log at debug
	for {
		connected, err := p.stream()
		if p.ctx.Err() != nil {
			return
		}
		p.reportUnreachable()
		if connected {
			delay = minBackoff
			failing = false
		}
		if failing {
			log.Debug("raft stream to peer failed again", "err", err)
		} else {
			log.Warn("raft stream to peer failed; reconnecting", "err", err)
			failing = true
		}
		// Jitter, so that the members a restarted one was talking to do
		// not all dial it in the same instant.
		if !p.drainFor(delay/2 + rand.N(delay/2+1)) {
			return
		}
		delay = min(2*delay, maxBackoff)
	}
}

// drainFor waits d, dropping what Send queues meanwhile; false means the
// peer was stopped.
func (p *peer) drainFor(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return false
		case <-timer.C:
			return true
		case m := <-p.queue:
			p.drop(&m, reasonUnreachable)
			p.reportUnreachable()
		}
	}
}

// drop counts m as dropped for reason, and owes the node a failed snapshot
// if it was one.
func (p *peer) drop(m *raftpb.Message, reason string) {
	p.t.m.dropped(p.label, outbound, reason, 1)
	if m.Type == raftpb.MsgSnap {
		p.reportSnapshot(raft.SnapshotFailure)
	}
}

// stream opens one stream and writes batches to it until it breaks or the
// peer is stopped; connected says whether it was ever open.
func (p *peer) stream() (connected bool, err error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	st, err := queuev1.NewRaftServiceClient(p.conn).Send(ctx)
	if err != nil {
		return false, fmt.Errorf("open: %w", err)
	}
	p.t.m.connects.WithLabelValues(p.label).Inc()
	p.t.m.active.Inc()
	defer p.t.m.active.Dec()
	// The server answers only to end the stream. Waiting for that on a
	// goroutine of its own means a refusal (PERMISSION_DENIED, another
	// cluster) ends the stream at once, not at the next write, which
	// would report io.EOF and hide why.
	ended := make(chan error, 1)
	go func() {
		err := st.RecvMsg(&queuev1.SendResponse{})
		if err == nil {
			err = errors.New("the peer ended the stream")
		}
		ended <- err
	}()
	defer func() {
		cancel()
		// RecvMsg returns once ctx is cancelled; the stream is done when
		// it has.
		if e := <-ended; err == nil || errors.Is(err, io.EOF) {
			err = e
		}
	}()
	var carry *raftpb.Message // taken from the queue, did not fit the last batch
	for {
		req := &queuev1.SendRequest{ClusterId: p.t.cfg.ClusterID, From: p.t.cfg.ID, To: p.id, FormatLevel: uint32(format.BuildLevel), FromAddr: p.t.cfg.Addr}
		var snaps int
		size := 0
		add := func(m *raftpb.Message) error {
			b, err := m.Marshal()
			if err != nil {
				return fmt.Errorf("marshal %s: %w", m.Type, err)
			}
			req.Messages = append(req.Messages, b)
			size += framedSize(len(b))
			if m.Type == raftpb.MsgSnap {
				snaps++
			}
			return nil
		}
		if carry != nil {
			if err := add(carry); err != nil {
				return true, err
			}
			carry = nil
		} else {
			select {
			case <-ctx.Done():
				return true, nil
			case err := <-ended:
				ended <- err // for the deferred wait
				return true, fmt.Errorf("peer ended the stream: %w", err)
			case m := <-p.queue:
				if err := add(&m); err != nil {
					return true, err
				}
			case <-p.nudge:
				// A batch of whatever waits, if anything: its header
				// says what the peer must hear now.
			}
		}
		// Everything else waiting now goes into the same request.
	fill:
		for len(req.Messages) < maxBatchMessages {
			select {
			case m := <-p.queue:
				if size+framedSize(m.Size()) > p.t.maxBatch {
					carry = &m
					break fill
				}
				if err := add(&m); err != nil {
					return true, err
				}
			default:
				break fill
			}
		}
		// Read last: a batch sent after SetStopping says so.
		req.Stopping = p.t.stopping.Load()
		if err := st.Send(req); err != nil {
			p.t.m.dropped(p.label, outbound, reasonStream, len(req.Messages))
			for range snaps {
				p.reportSnapshot(raft.SnapshotFailure)
			}
			if carry != nil {
				p.drop(carry, reasonStream)
			}
			return true, fmt.Errorf("write: %w", err)
		}
		p.t.m.sent.WithLabelValues(p.label).Add(float64(len(req.Messages)))
		// Written is as far as a stream can tell; a snapshot lost after
		// this is found by the leader's probe, as any lost append is.
		for range snaps {
			p.reportSnapshot(raft.SnapshotFinish)
		}
	}
}
