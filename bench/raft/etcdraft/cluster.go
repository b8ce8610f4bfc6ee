// Package etcdraft is the spike's adapter for go.etcd.io/raft/v3: the
// library is only the protocol's state machine, so this package owns the
// Ready loop, the durable log (disklog.go), the network (transport.go) and
// the matching of applied entries to waiting callers.
package etcdraft

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	raftbench "github.com/batonrun/baton/bench/raft"
)

// tick is the Raft clock: ElectionTick 10 makes the election timeout ~1 s
// (randomised by the library to [1 s, 2 s)), heartbeats every tick.
const (
	tick          = 100 * time.Millisecond
	electionTicks = 10
)

// Cluster is three etcd raft members in one process.
type Cluster struct {
	opts    raftbench.Options
	addrs   map[uint64]string
	members [raftbench.Members]atomic.Pointer[member]
	nextID  atomic.Uint64
	batcher *raftbench.Batcher
}

type member struct {
	id      uint64
	node    raft.Node
	storage *raft.MemoryStorage
	log     *diskLog
	tr      *transport
	sm      *raftbench.StateMachine
	leader  atomic.Bool
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	waiters map[uint64]chan error
	dead    bool
}

var quiet = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

// Start starts a new three-member cluster in opts.Dir and waits for its
// first leader.
func Start(opts raftbench.Options) (*Cluster, error) {
	c := &Cluster{opts: opts, addrs: map[uint64]string{}}
	lns := make([]net.Listener, raftbench.Members)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns[i] = ln
		c.addrs[uint64(i+1)] = ln.Addr().String()
	}
	peers := make([]raft.Peer, 0, raftbench.Members)
	for i := range raftbench.Members {
		peers = append(peers, raft.Peer{ID: uint64(i + 1)})
	}
	for i := range raftbench.Members {
		m, err := c.startMember(i, lns[i], peers)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.members[i].Store(m)
	}
	if opts.Coalesce {
		c.batcher = raftbench.NewBatcher(c.submit)
	}
	// Without this the first election waits out a whole timeout; member 1
	// campaigns at once (PreVote makes that safe against a live leader).
	if err := c.members[0].Load().node.Campaign(context.Background()); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := raftbench.WaitLeader(c, 10*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) config(id uint64, st *raft.MemoryStorage) *raft.Config {
	return &raft.Config{
		ID:            id,
		ElectionTick:  electionTicks,
		HeartbeatTick: 1,
		Storage:       st,
		// 1 MiB appends and 256 of them in flight per follower: the leader
		// pipelines appends instead of waiting for each acknowledgement.
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 1 << 30,
		PreVote:                   true,
		CheckQuorum:               true,
		Logger:                    quiet,
	}
}

// startMember starts member i; peers is nil when it restarts from its log.
func (c *Cluster) startMember(i int, ln net.Listener, peers []raft.Peer) (*member, error) {
	id := uint64(i + 1)
	dir := filepath.Join(c.opts.Dir, fmt.Sprintf("etcd-%d", id))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	dl, hs, ents, err := openDiskLog(filepath.Join(dir, "raft.log"))
	if err != nil {
		return nil, err
	}
	st := raft.NewMemoryStorage()
	if err := st.SetHardState(hs); err != nil {
		return nil, err
	}
	if err := st.Append(ents); err != nil {
		return nil, err
	}
	m := &member{
		id: id, storage: st, log: dl, sm: raftbench.NewStateMachine(c.opts.KeepApplied),
		stop: make(chan struct{}), done: make(chan struct{}), waiters: map[uint64]chan error{},
	}
	// Applied is 0 either way: the state machine lives in memory, so a
	// restarted member applies its whole committed log again.
	if peers != nil && len(ents) == 0 {
		m.node = raft.StartNode(c.config(id, st), peers)
	} else {
		m.node = raft.RestartNode(c.config(id, st))
	}
	m.tr = newTransport(ln, c.addrs, id, m.node.Step, func(to uint64) { m.node.ReportUnreachable(to) })
	go m.run()
	return m, nil
}

// run is the Ready loop, in the order raft's package doc requires: persist
// HardState and Entries (fsync if MustSync), only then send the messages,
// then apply the committed entries, then Advance. The leader could write in
// parallel with sending (thesis 10.2.1); the spike does not, and neither
// does hashicorp/raft, so the figures compare like with like.
func (m *member) run() {
	defer close(m.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.node.Tick()
		case rd := <-m.node.Ready():
			if err := m.handle(rd); err != nil {
				// A failed write is fail-stop, as in internal/store.
				m.failAll(fmt.Errorf("etcdraft: member %d: %w", m.id, err))
				return
			}
			m.node.Advance()
		case <-m.stop:
			return
		}
	}
}

func (m *member) handle(rd raft.Ready) error {
	if rd.SoftState != nil {
		lead := rd.SoftState.RaftState == raft.StateLeader
		if m.leader.Swap(lead) && !lead {
			// Entries this member proposed may now be overwritten by the new
			// leader; their callers cannot be told either way.
			m.failAll(raftbench.ErrLeaderChanged)
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		// Never happens here: no member compacts its log, so no leader
		// sends a snapshot. The queue will need this path (see docs/queue.md).
		return fmt.Errorf("unexpected snapshot at index %d", rd.Snapshot.Metadata.Index)
	}
	if err := m.log.save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
		return err
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := m.storage.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	if err := m.storage.Append(rd.Entries); err != nil {
		return err
	}
	for _, msg := range rd.Messages {
		b, err := msg.Marshal()
		if err != nil {
			return err
		}
		m.tr.send(msg.To, b)
		if msg.Type == raftpb.MsgSnap {
			m.node.ReportSnapshot(msg.To, raft.SnapshotFinish)
		}
	}
	for _, e := range rd.CommittedEntries {
		switch e.Type {
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := cc.Unmarshal(e.Data); err != nil {
				return err
			}
			m.node.ApplyConfChange(cc)
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			if err := cc.Unmarshal(e.Data); err != nil {
				return err
			}
			m.node.ApplyConfChange(cc)
		case raftpb.EntryNormal:
			if len(e.Data) == 0 {
				continue // a new leader's empty entry
			}
			if err := m.sm.ApplyEntry(e.Data); err != nil {
				return err
			}
			id, _, _ := raftbench.DecodeEntry(e.Data)
			m.answer(id, nil)
		}
	}
	return nil
}

func (m *member) register(id uint64) (chan error, bool) {
	ch := make(chan error, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return nil, false
	}
	m.waiters[id] = ch
	return ch, true
}

func (m *member) answer(id uint64, err error) {
	m.mu.Lock()
	ch, ok := m.waiters[id]
	delete(m.waiters, id)
	m.mu.Unlock()
	if ok {
		ch <- err
	}
}

func (m *member) forget(id uint64) {
	m.mu.Lock()
	delete(m.waiters, id)
	m.mu.Unlock()
}

func (m *member) failAll(err error) {
	m.mu.Lock()
	ws := m.waiters
	m.waiters = map[uint64]chan error{}
	if err == raftbench.ErrStopped {
		m.dead = true
	}
	m.mu.Unlock()
	for _, ch := range ws {
		ch <- err
	}
}

// propose hands one entry to the leader's node and returns the channel its
// outcome arrives on.
func (c *Cluster) propose(ctx context.Context, recs [][]byte) (uint64, *member, chan error, error) {
	l := c.Leader()
	if l < 0 {
		return 0, nil, nil, raftbench.ErrNoLeader
	}
	m := c.members[l].Load()
	if m == nil {
		return 0, nil, nil, raftbench.ErrStopped
	}
	id := c.nextID.Add(1)
	ch, ok := m.register(id)
	if !ok {
		return 0, nil, nil, raftbench.ErrStopped
	}
	if err := m.node.Propose(ctx, raftbench.EncodeEntry(id, recs)); err != nil {
		m.forget(id)
		return 0, nil, nil, err
	}
	return id, m, ch, nil
}

func (c *Cluster) submit(recs [][]byte) func() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	id, m, ch, err := c.propose(ctx, recs)
	if err != nil {
		cancel()
		return func() error { return err }
	}
	return func() error {
		defer cancel()
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			m.forget(id)
			return ctx.Err()
		}
	}
}

// Propose implements raftbench.Cluster.
func (c *Cluster) Propose(ctx context.Context, rec []byte) error {
	if c.batcher != nil {
		return c.batcher.Propose(ctx, rec)
	}
	id, m, ch, err := c.propose(ctx, [][]byte{rec})
	if err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		m.forget(id)
		return ctx.Err()
	}
}

// Leader implements raftbench.Cluster.
func (c *Cluster) Leader() int {
	for i := range c.members {
		if m := c.members[i].Load(); m != nil && m.leader.Load() {
			return i
		}
	}
	return -1
}

// Kill implements raftbench.Cluster: network first, then the Ready loop
// (stopped between two Readys: a real crash may also stop inside one, which
// only the torn-tail repair in openDiskLog has to handle), then the file,
// closed unsynced.
func (c *Cluster) Kill(i int) error {
	m := c.members[i].Swap(nil)
	if m == nil {
		return fmt.Errorf("etcdraft: member %d is not running", i)
	}
	m.leader.Store(false)
	m.tr.close()
	close(m.stop)
	<-m.done
	m.node.Stop()
	m.failAll(raftbench.ErrStopped)
	return m.log.close()
}

// Restart implements raftbench.Cluster on the member's old address.
func (c *Cluster) Restart(i int) error {
	if c.members[i].Load() != nil {
		return fmt.Errorf("etcdraft: member %d is running", i)
	}
	ln, err := net.Listen("tcp", c.addrs[uint64(i+1)])
	if err != nil {
		return err
	}
	m, err := c.startMember(i, ln, nil)
	if err != nil {
		ln.Close()
		return err
	}
	c.members[i].Store(m)
	return nil
}

// Applied implements raftbench.Cluster.
func (c *Cluster) Applied(i int) raftbench.Applied {
	if m := c.members[i].Load(); m != nil {
		return m.sm.Get()
	}
	return raftbench.Applied{}
}

// Stats implements raftbench.Cluster.
func (c *Cluster) Stats(i int) raftbench.Stats {
	if m := c.members[i].Load(); m != nil {
		return raftbench.Stats{Syncs: m.log.syncs.Load(), Entries: m.log.entries.Load()}
	}
	return raftbench.Stats{}
}

// Close implements raftbench.Cluster.
func (c *Cluster) Close() error {
	for i := range c.members {
		if c.members[i].Load() != nil {
			c.Kill(i)
		}
	}
	if c.batcher != nil {
		c.batcher.Close()
	}
	return nil
}
