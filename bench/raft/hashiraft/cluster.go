// Package hashiraft is the spike's adapter for github.com/hashicorp/raft:
// the library brings its own goroutines, TCP transport, snapshot store and
// leader loop; the adapter provides the FSM and picks the stores.
//
// Version: v1.7.3, not v1.8.0. raft v1.8.0 requires
// github.com/hashicorp/go-metrics v0.7.0, which dropped the package
// go-metrics/compat that raft-boltdb/v2 v2.3.1 (its newest) imports, so the
// two do not build together; v1.7.3 and raft-boltdb/v2 v2.3.1 agree on
// go-metrics v0.5.4.
package hashiraft

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	raftbench "github.com/batonrun/baton/bench/raft"
)

// Cluster is three hashicorp/raft members in one process.
type Cluster struct {
	opts    raftbench.Options
	addrs   [raftbench.Members]raft.ServerAddress
	members [raftbench.Members]atomic.Pointer[member]
	nextID  atomic.Uint64
	batcher *raftbench.Batcher
}

type member struct {
	r     *raft.Raft
	tr    *raft.NetworkTransport
	bolt  *raftboltdb.BoltStore
	count *countingStore
	sm    *raftbench.StateMachine
}

// Start starts a new three-member cluster in opts.Dir and waits for its
// first leader.
func Start(opts raftbench.Options) (*Cluster, error) {
	c := &Cluster{opts: opts}
	trs := make([]*raft.NetworkTransport, raftbench.Members)
	for i := range trs {
		tr, err := newTransport("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		trs[i] = tr
		c.addrs[i] = tr.LocalAddr()
	}
	var servers raft.Configuration
	for i := range raftbench.Members {
		servers.Servers = append(servers.Servers, raft.Server{Suffrage: raft.Voter, ID: serverID(i), Address: c.addrs[i]})
	}
	for i := range raftbench.Members {
		m, err := c.startMember(i, trs[i], &servers)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.members[i].Store(m)
	}
	if opts.Coalesce {
		c.batcher = raftbench.NewBatcher(c.submit)
	}
	if _, err := raftbench.WaitLeader(c, 15*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func serverID(i int) raft.ServerID { return raft.ServerID(fmt.Sprintf("m%d", i)) }

func newTransport(addr string) (*raft.NetworkTransport, error) {
	return raft.NewTCPTransportWithLogger(addr, nil, 3, 2*time.Second, hclog.NewNullLogger())
}

func (c *Cluster) config(i int) *raft.Config {
	cfg := raft.DefaultConfig()
	cfg.LocalID = serverID(i)
	// The defaults already are the ~1 s the comparison asks for: a follower
	// campaigns after [1 s, 2 s) without a leader, the leader steps down
	// after 500 ms without a quorum (its lease), heartbeats go out every
	// 100 ms (HeartbeatTimeout/10).
	cfg.HeartbeatTimeout = time.Second
	cfg.ElectionTimeout = time.Second
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	// Buffer applyCh to MaxAppendEntries: the leader loop drains it into
	// one StoreLogs (one bbolt commit) and one AppendEntries per follower.
	cfg.BatchApplyCh = true
	if c.opts.MaxAppendEntries > 0 {
		cfg.MaxAppendEntries = c.opts.MaxAppendEntries
	}
	// Snapshots off, as in etcdraft: the spike does not measure them.
	cfg.SnapshotThreshold = 1 << 40
	cfg.SnapshotInterval = 24 * time.Hour
	cfg.Logger = hclog.NewNullLogger()
	cfg.NoLegacyTelemetry = true
	return cfg
}

// startMember starts member i on tr; servers is non-nil only at the
// cluster's first start (bootstrap).
func (c *Cluster) startMember(i int, tr *raft.NetworkTransport, servers *raft.Configuration) (*member, error) {
	dir := filepath.Join(c.opts.Dir, fmt.Sprintf("hashi-%d", i))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tr.Close()
		return nil, err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		tr.Close()
		return nil, err
	}
	count := &countingStore{LogStore: bolt}
	// The cache serves the leader's replication reads of recent entries
	// from memory (what Consul and Nomad configure).
	logs, err := raft.NewLogCache(1024, count)
	if err != nil {
		tr.Close()
		bolt.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		tr.Close()
		bolt.Close()
		return nil, err
	}
	cfg := c.config(i)
	if servers != nil {
		if err := raft.BootstrapCluster(cfg, logs, bolt, snaps, tr, *servers); err != nil {
			tr.Close()
			bolt.Close()
			return nil, err
		}
	}
	sm := raftbench.NewStateMachine(c.opts.KeepApplied)
	r, err := raft.NewRaft(cfg, &fsm{sm: sm}, logs, bolt, snaps, tr)
	if err != nil {
		tr.Close()
		bolt.Close()
		return nil, err
	}
	return &member{r: r, tr: tr, bolt: bolt, count: count, sm: sm}, nil
}

// fsm applies entries to the shared state machine.
type fsm struct{ sm *raftbench.StateMachine }

func (f *fsm) Apply(l *raft.Log) any { return f.sm.ApplyEntry(l.Data) }

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) { return snapshot(f.sm.Marshal()), nil }

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	return f.sm.Restore(b)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// countingStore counts the log's durable writes: each StoreLogs is one
// bbolt transaction, whose commit fdatasyncs twice (pages, then meta page).
type countingStore struct {
	raft.LogStore
	syncs, entries atomic.Uint64
}

func (s *countingStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *countingStore) StoreLogs(ls []*raft.Log) error {
	s.syncs.Add(1)
	s.entries.Add(uint64(len(ls)))
	return s.LogStore.StoreLogs(ls)
}

func (c *Cluster) leaderMember() *member {
	if l := c.Leader(); l >= 0 {
		return c.members[l].Load()
	}
	return nil
}

func timeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

func wait(f raft.ApplyFuture) error {
	if err := f.Error(); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

func (c *Cluster) submit(recs [][]byte) func() error {
	m := c.leaderMember()
	if m == nil {
		return func() error { return raftbench.ErrNoLeader }
	}
	f := m.r.Apply(raftbench.EncodeEntry(c.nextID.Add(1), recs), 10*time.Second)
	return func() error { return wait(f) }
}

// Propose implements raftbench.Cluster. Apply's future has no context: it
// is answered when the entry is applied, or fails when leadership is lost
// or the member shuts down, which is what a caller needs too.
func (c *Cluster) Propose(ctx context.Context, rec []byte) error {
	if c.batcher != nil {
		return c.batcher.Propose(ctx, rec)
	}
	m := c.leaderMember()
	if m == nil {
		return raftbench.ErrNoLeader
	}
	return wait(m.r.Apply(raftbench.EncodeEntry(c.nextID.Add(1), [][]byte{rec}), timeout(ctx)))
}

// Leader implements raftbench.Cluster.
func (c *Cluster) Leader() int {
	for i := range c.members {
		if m := c.members[i].Load(); m != nil && m.r.State() == raft.Leader {
			return i
		}
	}
	return -1
}

// Kill implements raftbench.Cluster: the transport first (listener and
// pooled connections), then Shutdown, which stops the goroutines and fails
// pending futures but tells no peer anything (leadership transfer is a
// separate call), then the bolt file.
func (c *Cluster) Kill(i int) error {
	m := c.members[i].Swap(nil)
	if m == nil {
		return fmt.Errorf("hashiraft: member %d is not running", i)
	}
	m.tr.Close()
	m.r.Shutdown().Error()
	return m.bolt.Close()
}

// Restart implements raftbench.Cluster on the member's old address, which
// its peers have in their configuration.
func (c *Cluster) Restart(i int) error {
	if c.members[i].Load() != nil {
		return fmt.Errorf("hashiraft: member %d is running", i)
	}
	tr, err := newTransport(string(c.addrs[i]))
	if err != nil {
		return err
	}
	m, err := c.startMember(i, tr, nil)
	if err != nil {
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
		return raftbench.Stats{Syncs: m.count.syncs.Load(), Entries: m.count.entries.Load()}
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
