package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/queue/internal/replica/transport"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
)

// Defaults, as the design's --heartbeat-interval (100 ms) and
// --election-timeout (1 s) will set them: a heartbeat every tick, and a
// follower that hears nothing for 10 to 20 ticks campaigns.
const (
	DefaultTickInterval    = 100 * time.Millisecond
	DefaultElectionTick    = 10
	DefaultHeartbeatTick   = 1
	DefaultMaxInflightMsgs = 256
)

// entryOverhead bounds what raft's accounting adds to an entry's data
// (Entry.Size: its term, index and type fields and the data's tag and
// length): an entry's data is kept MaxSizePerMsg minus this, so that one
// entry alone never exceeds MaxSizePerMsg.
const entryOverhead = 64

// Config is one member's node.
type Config struct {
	// ID is this member's Raft id; not zero.
	ID uint64
	// ClusterID identifies the queue; every member has the same one, and
	// the transport refuses batches of another.
	ClusterID uint64
	// Peers are the members, this one included: Raft id → the host:port
	// of their gRPC server with RaftService. On a first start (an empty
	// log) the node is bootstrapped with exactly these members, each
	// initial configuration entry carrying its address; on a restart the
	// configuration is the log's, and Peers only gives the addresses of
	// members whose configuration entries carry none.
	Peers map[uint64]string
	// Names are the members' names by Raft id (Peers'); those that
	// configuration changes add carry their own.
	Names map[uint64]string
	// Initial is --initial-cluster as this member was started with it,
	// name → peer address, whatever members it starts among (a member
	// that joined has Peers and Names from the leader): a member that
	// asks to join under another cluster id and is none of these was
	// added by MemberAdd (join's added_member). nil says nothing of it.
	Initial map[string]string
	// ClientAddr is where clients reach this member (--advertise-addr),
	// which it publishes to the others (publish.go); empty publishes
	// nothing until SetClientAddr gives it.
	ClientAddr string
	// Join starts a member whose log is empty without bootstrapping it:
	// a member that rejoined under a new id (Replace) and waits for the
	// leader to send it the log. Peers are then the members Replace
	// returned.
	Join bool
	// Claims, on a member restored from a backup (SeedLog), hands out the
	// ids its seed gave the other members, each once, to the member of
	// that name asking from that peer address (Join with claim); nil
	// elsewhere.
	Claims Claims
	// HoldElection, when set, keeps a member that bootstraps a new queue
	// from counting toward an election (no Raft ticks) until it is closed
	// or the member hears of a leader. Members started together must all
	// have started their nodes before any election ends: one slower to ask
	// whether the queue is new (Rejoin) would otherwise find it in use and
	// rejoin under a new id, and the new queue would then have two voters,
	// not three, until it caught up. The caller closes it once every other
	// member answers from its node (AwaitStarted), or after a bound, so
	// that a member that never comes does not keep the queue from
	// electing. nil holds nothing.
	HoldElection <-chan struct{}
	// Log is the member's durable Raft log, opened by the caller, who
	// closes it after Close. The node is its only writer.
	Log *store.RaftLog
	// TickInterval is one Raft tick; 0 means DefaultTickInterval.
	TickInterval time.Duration
	// ElectionTick and HeartbeatTick are raft.Config's, in ticks; 0 means
	// DefaultElectionTick, DefaultHeartbeatTick. ElectionTick must exceed
	// HeartbeatTick.
	ElectionTick, HeartbeatTick int
	// MaxSizePerMsg bounds the entries of one append message (raft's
	// MaxSizePerMsg), and so one entry too: an entry's records are kept
	// within it, and a single record that cannot fit is refused
	// (ErrTooLarge). A message is its entries plus their framing and a
	// header, always under twice its entries' size, so MaxSizePerMsg may
	// be at most half of MaxMessageBytes: then every append fits a
	// request the peers accept, which the transport would otherwise drop
	// (and raft would send again, forever). 0 means a quarter of
	// MaxMessageBytes.
	MaxSizePerMsg uint64
	// MaxInflightMsgs is how many appends the leader pipelines to one
	// follower before waiting for its answers; 0 means
	// DefaultMaxInflightMsgs.
	MaxInflightMsgs int

	// TLS, MaxMessageBytes and SendQueueLength are the transport's
	// (transport.Config: TLS, MaxMessageBytes, QueueLength), which the
	// node makes with itself as the receiver and the Report hooks' target.
	TLS             *tlsfiles.Source
	MaxMessageBytes int
	SendQueueLength int

	// Logger; nil discards. Raft's own lines go to it too.
	Logger *slog.Logger
	// Registerer receives the node's and the transport's metrics; nil
	// registers none. Close unregisters them.
	Registerer prometheus.Registerer
}

// Status is what ClusterService will report of this member.
type Status struct {
	ID uint64
	// Term is the member's current term.
	Term uint64
	// Leader is the leader's id as this member knows it, 0 for none.
	Leader   uint64
	IsLeader bool
	// Commit is the highest index this member knows is committed;
	// Applied the highest it has applied (Apply returned for it).
	Commit, Applied uint64
	// Transferring: this member leads and is handing leadership to
	// another (raft drops proposals meanwhile).
	Transferring bool
	// Campaigning: this member is a candidate, asking for votes (not a
	// pre-candidate, whose poll changes no term).
	Campaigning bool
	// On the leader alone: its last index, and how far each member's log
	// is known to match it (raft's Progress.Match, itself included), as
	// of the last tick. Match is not changed once Status returns it.
	LastIndex uint64
	Match     map[uint64]uint64
	// Active is, on the leader alone, whether it has heard from each
	// member within an election timeout (raft's Progress.RecentActive),
	// as of the last tick. Not changed once Status returns it.
	Active map[uint64]bool
}

// Node is one member of the replicated queue. Its methods are safe for
// concurrent use.
type Node struct {
	cfg         Config
	sm          StateMachine
	log         *slog.Logger
	rn          *raft.RawNode // the Ready loop's alone
	tr          *transport.Transport
	m           *metrics
	incarnation uint64
	maxData     int // an entry's data at most

	// Inputs of the Ready loop.
	recvc    chan raftpb.Message
	unreachc chan uint64
	snapc    chan snapReport
	compactc chan *compaction
	confc    chan *confCall
	kick     chan struct{} // buffered 1: proposals wait in pending
	stop     chan struct{} // closed by Close
	stopOnce sync.Once
	done     chan struct{} // closed when the loop has ended and every caller is answered

	// pending are the proposals the loop has not taken yet; closed is
	// set, under mu, once the loop has ended, so none is added after it
	// answered them all.
	mu      sync.Mutex
	pending []*call
	reads   []*call // Confirm's callers not yet in a read
	last    *call   // the latest enqueued in this leadership (Last)
	closed  bool
	err     error // why the node stopped; set before done is closed

	noSpace atomic.Bool

	statusMu sync.Mutex
	status   Status

	// The loop's own state.
	seq      uint64
	inflight map[uint64]*batch // by proposal seq
	applied  uint64
	lastLead uint64
	leading  bool   // Lead was called, Follow not since
	leadTerm uint64 // the term Lead was called for
	// resyncing: raft dropped proposals while this member led leadTerm
	// (a leadership transfer under way), so the state machine, which
	// had applied their changes as it proposed them, was rebuilt from
	// the log (Follow); Lead is called again once everything proposed
	// before the drop is applied (maybeRelead).
	resyncing bool
	dropped   bool // a proposal was dropped since the last turn
	readSeq   uint64
	read      *readBatch // the ReadIndex in flight, if any
	// noSnapWarned is when the loop last said that a member needs a
	// snapshot the log does not have (noSnapshotToSend).
	noSnapWarned time.Time
	// ticks counts the ticks while leading, and heardAt is the tick at
	// which each member was last heard from (captureProgress).
	ticks   uint64
	heardAt map[uint64]uint64
	// hold is Config.HoldElection until it is closed or a leader is
	// known, then nil (holding).
	hold <-chan struct{}
	// promoting is the learner a promotion is under way for, 0 if none
	// (promoteCaughtUp).
	promoting atomic.Uint64
	// The configuration as of applied, and the index of the entry (or
	// snapshot) that last changed it: a snapshot at an index carries the
	// configuration of that index, so Compact refuses one from before
	// the last change.
	confState raftpb.ConfState
	confIndex uint64
	conf      *confCall // the configuration change in flight, if any
	transferc chan *transferCall
	// leavec takes Leave's call; leaving is set once it has been taken,
	// and from then on MsgTimeoutNow is dropped (leave.go). peerStopc
	// wakes the loop when a peer first says it is stopping, to give up a
	// transfer to it (abandonTransfer).
	leavec    chan *leaveCall
	leaving   bool
	peerStopc chan struct{}
	abandoned atomic.Pointer[abandoned] // the last transfer abandonTransfer gave up

	// levels are the format levels the other members last said
	// (levels.go), and stopping those that said they are stopping
	// (leave.go), each in its last batch.
	levelsMu sync.Mutex
	levels   map[uint64]format.Level
	stopping map[uint64]bool
	// writeLevel is the level the leader writes at: ClusterLevel as of
	// the last tick (captureProgress), 1 until then.
	writeLevel atomic.Uint32

	membersMu  sync.Mutex
	members    map[uint64]Member // members.go
	removed    map[string]bool   // the names MemberRemove took out (members.go)
	learners   map[uint64]bool   // the configuration's learners, by id (members.go)
	clientAddr string            // this member's, to publish (publish.go)
	replaceMu  sync.Mutex        // one configuration change at a time

	// The publisher (publish.go): publishc wakes it, buffered 1;
	// stopPublish ends it and publishDone is closed once it has.
	publishc    chan struct{}
	stopPublish context.CancelFunc
	publishDone chan struct{}
}

// compaction is one Compact waiting for the loop.
type compaction struct {
	index   uint64
	records format.Version // of data's records
	data    []byte
	done    chan error // buffered 1
}

// readBatch is one ReadIndex and the Confirm callers it answers.
type readBatch struct {
	seq   uint64
	term  uint64
	calls []*call
}

// call is one Propose waiting. res is written once, before done is
// closed.
type call struct {
	data    []byte
	version format.Version // of data's records (EnqueueAll)
	done    chan struct{}
	res     result
}

type result struct {
	index uint64
	err   error
}

// batch is one proposed entry's callers and the term it was proposed in.
type batch struct {
	calls []*call
	term  uint64
}

type snapReport struct {
	id     uint64
	status raft.SnapshotStatus
}

// New makes the node of sm (fsm.go) and its transport and starts the
// Ready loop. Register must then add the transport's RaftService to the
// member's gRPC server.
func New(cfg Config, sm StateMachine) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if sm == nil {
		return nil, errors.New("replica: no state machine")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("member", cfg.ID)
	storage := cfg.Log.MemoryStorage()
	snap, err := storage.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's snapshot: %w", err)
	}
	hs, cs, err := storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's state: %w", err)
	}
	last, err := storage.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's state: %w", err)
	}
	fresh := raft.IsEmptyHardState(hs) && last == 0

	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("replica: incarnation: %w", err)
	}
	n := &Node{
		cfg:         cfg,
		sm:          sm,
		log:         log,
		incarnation: binary.BigEndian.Uint64(nonce[:]),
		maxData:     int(cfg.MaxSizePerMsg) - entryOverhead,
		recvc:       make(chan raftpb.Message, 1024),
		unreachc:    make(chan uint64, 64),
		snapc:       make(chan snapReport, 16),
		compactc:    make(chan *compaction),
		confc:       make(chan *confCall),
		transferc:   make(chan *transferCall),
		leavec:      make(chan *leaveCall),
		peerStopc:   make(chan struct{}, 1),
		stopping:    map[uint64]bool{},
		members:     map[uint64]Member{},
		levels:      map[uint64]format.Level{},
		removed:     map[string]bool{},
		clientAddr:  cfg.ClientAddr,
		publishc:    make(chan struct{}, 1),
		publishDone: make(chan struct{}),
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		inflight:    map[uint64]*batch{},
		heardAt:     map[uint64]uint64{},
		hold:        cfg.HoldElection,
		confState:   cs,
	}
	n.noteLearners(cs)
	n.writeLevel.Store(1)
	for id, addr := range cfg.Peers {
		n.members[id] = Member{ID: id, Name: cfg.Names[id], Addr: addr}
	}
	if !raft.IsEmptySnap(snap) {
		// The state as of the snapshot first; raft hands the entries
		// after it to the Ready loop as committed.
		start := time.Now()
		ms, state, err := parseSnapshotData(snap.Data)
		if err != nil {
			return nil, fmt.Errorf("replica: the log's snapshot at %d: %w", snap.Metadata.Index, err)
		}
		n.setMembers(ms)
		state.Index = snap.Metadata.Index
		if err := sm.Restore(state); err != nil {
			return nil, fmt.Errorf("replica: restore the log's snapshot at %d: %w", snap.Metadata.Index, err)
		}
		n.applied, n.confIndex = snap.Metadata.Index, snap.Metadata.Index
		log.Info("restored the log's snapshot", "index", snap.Metadata.Index, "bytes", len(snap.Data), "took", time.Since(start))
	}
	n.rn, err = raft.NewRawNode(&raft.Config{
		ID:              cfg.ID,
		ElectionTick:    cfg.ElectionTick,
		HeartbeatTick:   cfg.HeartbeatTick,
		Storage:         nodeStorage{MemoryStorage: storage, n: n},
		MaxSizePerMsg:   cfg.MaxSizePerMsg,
		MaxInflightMsgs: cfg.MaxInflightMsgs,
		// A follower never proposes: Propose answers ErrNotLeader before
		// anything reaches raft, and forwarding will be the wiring's, over
		// gRPC, so that the caller waits on the leader's waiter.
		DisableProposalForwarding: true,
		PreVote:                   true,
		CheckQuorum:               true,
		Logger:                    raftLogger{l: log.With("component", "raft")},
	})
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if fresh && !cfg.Join {
		peers := make([]raft.Peer, 0, len(cfg.Peers))
		for id, addr := range cfg.Peers {
			peers = append(peers, raft.Peer{ID: id, Context: []byte(addr)})
		}
		if err := n.rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	others := make(map[uint64]string, len(n.members))
	for id, m := range n.members {
		if id != cfg.ID {
			others[id] = m.Addr
		}
	}
	if n.m, err = newMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	n.tr, err = transport.New(transport.Config{
		ClusterID:         cfg.ClusterID,
		ID:                cfg.ID,
		Peers:             others,
		Addr:              cfg.Peers[cfg.ID],
		TLS:               cfg.TLS,
		MaxMessageBytes:   cfg.MaxMessageBytes,
		QueueLength:       cfg.SendQueueLength,
		ReportUnreachable: n.reportUnreachable,
		ReportSnapshot:    n.reportSnapshot,
		Join:              n.join,
		Publish:           n.answerPublish,
		Heard:             n.heard,
		Logger:            log,
		Registerer:        cfg.Registerer,
	}, n.recv)
	if err != nil {
		n.m.unregister()
		return nil, fmt.Errorf("replica: %w", err)
	}
	n.status = Status{ID: cfg.ID, Term: hs.Term, Commit: hs.Commit, Applied: n.applied}
	log.Info("raft node started", "fresh", fresh, "join", cfg.Join && fresh, "term", hs.Term, "commit", hs.Commit, "last_index", last)
	go n.run()
	var pctx context.Context
	pctx, n.stopPublish = context.WithCancel(context.Background())
	go n.publisher(pctx)
	return n, nil
}

// defaults fills in and checks cfg.
func (cfg *Config) defaults() error {
	switch {
	case cfg.ID == 0:
		return errors.New("replica: no member id (Raft ids start at 1)")
	case cfg.ClusterID == 0:
		return errors.New("replica: no cluster id")
	case cfg.Log == nil:
		return errors.New("replica: no raft log")
	case cfg.Peers[cfg.ID] == "":
		return fmt.Errorf("replica: Peers has no address for this member (%d)", cfg.ID)
	case cfg.TickInterval < 0 || cfg.ElectionTick < 0 || cfg.HeartbeatTick < 0 || cfg.MaxInflightMsgs < 0 || cfg.MaxMessageBytes < 0:
		return errors.New("replica: a negative duration or count")
	}
	for id, addr := range cfg.Peers {
		if _, port, err := net.SplitHostPort(addr); id == 0 || err != nil || port == "" {
			return fmt.Errorf("replica: peer %d at %q: want a nonzero id and host:port", id, addr)
		}
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.ElectionTick == 0 {
		cfg.ElectionTick = DefaultElectionTick
	}
	if cfg.HeartbeatTick == 0 {
		cfg.HeartbeatTick = DefaultHeartbeatTick
	}
	if cfg.ElectionTick <= cfg.HeartbeatTick {
		return fmt.Errorf("replica: ElectionTick %d must exceed HeartbeatTick %d", cfg.ElectionTick, cfg.HeartbeatTick)
	}
	if cfg.MaxInflightMsgs == 0 {
		cfg.MaxInflightMsgs = DefaultMaxInflightMsgs
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = serve.DefaultMaxRecvBytes
	}
	if cfg.MaxSizePerMsg == 0 {
		cfg.MaxSizePerMsg = uint64(cfg.MaxMessageBytes) / 4
	}
	if cfg.MaxSizePerMsg > uint64(cfg.MaxMessageBytes)/2 {
		return fmt.Errorf("replica: MaxSizePerMsg %d is more than half of MaxMessageBytes %d: appends could exceed what the peers accept", cfg.MaxSizePerMsg, cfg.MaxMessageBytes)
	}
	if cfg.MaxSizePerMsg < 4*(entryOverhead+entryHeader) {
		return fmt.Errorf("replica: MaxSizePerMsg %d leaves no room for records", cfg.MaxSizePerMsg)
	}
	return nil
}

// Register adds the transport's RaftService to srv, the member's gRPC
// server (whose MaxRecvMsgSize should be the peers' MaxMessageBytes).
func (n *Node) Register(srv grpc.ServiceRegistrar) { n.tr.Register(srv) }

// Status is this member's view as of its last Ready.
func (n *Node) Status() Status {
	n.statusMu.Lock()
	defer n.statusMu.Unlock()
	return n.status
}

// Done is closed once the node has stopped (Close, or its log failed) and
// every caller has been answered.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is why the node stopped: nil while it runs and after a Close of a
// healthy node, else ErrStopped wrapping the failure.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if errors.Is(n.err, errClosedByCaller) {
		return nil
	}
	return n.err
}

// errClosedByCaller is the stop reason of a Close.
var errClosedByCaller = fmt.Errorf("%w: closed", ErrStopped)

// Close stops the Ready loop and its ticker, answers every caller still
// waiting (ErrStopped: for one whose entry was proposed, the outcome is
// unknown), then closes the transport, after which no receiver or hook of
// it runs, and unregisters the metrics. It does not close the Log, which
// is the caller's. It returns Err.
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	<-n.done
	n.stopPublish()
	<-n.publishDone // it calls the transport
	n.tr.Close()
	n.m.unregister()
	return n.Err()
}

// recv is the transport's: it hands a received message to the loop,
// waiting while the loop is busy (which slows that peer's stream, whose
// sender then drops rather than queues), until the stream ends or the
// node stops.
func (n *Node) recv(ctx context.Context, m raftpb.Message) {
	select {
	case n.recvc <- m:
	case <-ctx.Done():
	case <-n.done:
	}
}

// reportUnreachable is the transport's hook. It is advice (the leader
// stops pipelining to that peer), so when the loop is behind, it is
// dropped rather than waited for.
func (n *Node) reportUnreachable(id uint64) {
	select {
	case n.unreachc <- id:
	default:
	}
}

// reportSnapshot is the transport's hook. Unlike reportUnreachable it
// waits: without it a leader whose snapshot was dropped waits for the
// follower before sending another.
func (n *Node) reportSnapshot(id uint64, status raft.SnapshotStatus) {
	select {
	case n.snapc <- snapReport{id, status}:
	case <-n.done:
	}
}

// nodeStorage is the log's storage as raft reads it, but for a snapshot
// that does not hold every member of the configuration: raft sends a
// snapshot only to a member behind the log's first entry, and one added
// after the snapshot (a member that rejoined) ignores a snapshot without
// itself. Raft is told it is not available yet, and the state machine is
// asked for a new one. Only raft calls it, on the Ready loop.
type nodeStorage struct {
	*raft.MemoryStorage
	n *Node
}

func (s nodeStorage) Snapshot() (raftpb.Snapshot, error) {
	snap, err := s.MemoryStorage.Snapshot()
	if err != nil {
		return snap, err
	}
	if raft.IsEmptySnap(snap) {
		// Raft asks for one when a member's log does not meet the
		// leader's where it should: a log never compacted has no
		// snapshot to send, and raft panics on an empty one. Only a
		// member whose log is not this queue's can need one then (a data
		// directory of another queue, or restored from an old copy);
		// raft asks again at every heartbeat, so say it now and then.
		s.n.noSnapshotToSend()
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	have := append(slices.Clone(snap.Metadata.ConfState.Voters), snap.Metadata.ConfState.Learners...)
	for _, id := range append(slices.Clone(s.n.confState.Voters), s.n.confState.Learners...) {
		if !slices.Contains(have, id) {
			s.n.sm.SnapshotNeeded()
			return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
		}
	}
	return snap, nil
}

// noSnapshotToSend logs, at most once a minute, that a member needs a
// snapshot this member's log does not have. On the Ready loop.
func (n *Node) noSnapshotToSend() {
	if now := time.Now(); now.Sub(n.noSnapWarned) >= time.Minute {
		n.noSnapWarned = now
		n.log.Warn("a member needs a snapshot, and this log has never been compacted: its log does not match this queue's (a data directory restored from an old copy, or another queue's?); nothing is sent to it until it rejoins with an empty data directory")
	}
}
