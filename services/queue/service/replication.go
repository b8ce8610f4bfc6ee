package service

import (
	"context"
	"errors"
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/dashboard"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/batonrun/baton/services/runtime/serve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Raft timing defaults (docs/design.md: --heartbeat-interval,
// --election-timeout), etcd's own ratio of ten heartbeats to an election.
const (
	DefaultHeartbeatInterval = 100 * time.Millisecond
	DefaultElectionTimeout   = time.Second
	// An election timeout under five heartbeats lets a follower campaign
	// after a couple of delayed heartbeats: etcd asks for the same.
	minElectionHeartbeats = 5
)

// raftDir is where a replicated member keeps its Raft log, inside
// --data-dir; a single member's store is --data-dir itself.
const raftDir = "raft"

// parseInitialCluster reads --initial-cluster, "name=host:port,…", into
// members in the order given.
func parseInitialCluster(s string) ([]server.Peer, error) {
	var out []server.Peer
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		name, addr, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--initial-cluster: %q is not name=host:port", part)
		}
		if err := limits.CheckMemberName("--initial-cluster: a member name", name); err != nil {
			return nil, flagError(err)
		}
		if err := limits.CheckAddr(fmt.Sprintf("--initial-cluster: %s's peer address", name), addr); err != nil {
			return nil, flagError(err)
		}
		for _, p := range out {
			switch {
			case p.Name == name:
				return nil, fmt.Errorf("--initial-cluster: member %q is named twice", name)
			case p.PeerAddr == addr:
				return nil, fmt.Errorf("--initial-cluster: %s and %s have one peer address, %s", p.Name, name, addr)
			}
		}
		out = append(out, server.Peer{Name: name, PeerAddr: addr, ID: memberID(name)})
	}
	for i, p := range out {
		for _, q := range out[:i] {
			if p.ID == q.ID {
				return nil, fmt.Errorf("--initial-cluster: %s and %s hash to one member id: rename one", q.Name, p.Name)
			}
		}
	}
	return out, nil
}

// memberID is a member's Raft id, from its name, so that every member
// derives every id from --initial-cluster alone, and a member that lost
// its disk comes back under its name with its id.
func memberID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1 // raft's "none"
}

// clusterID identifies the queue, from its initial members: the
// transport refuses a batch of another queue (a member pointed at the
// wrong peers).
func clusterID(members []server.Peer) uint64 {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m.Name + "=" + m.PeerAddr
	}
	slices.Sort(parts)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(parts, ",")))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// The values of --initial-cluster-state.
const (
	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"
)

// validateReplication checks the replication flags, when --initial-cluster
// is given.
func (c Config) validateReplication() error {
	if c.InitialClusterState != ClusterStateNew && c.InitialClusterState != ClusterStateExisting {
		return fmt.Errorf("--initial-cluster-state must be %q or %q, not %q", ClusterStateNew, ClusterStateExisting, c.InitialClusterState)
	}
	if c.InitialCluster == "" {
		if c.ForceNewCluster {
			return errors.New("--force-new-cluster needs --initial-cluster: it restarts a member of a replicated queue")
		}
		return nil
	}
	members, err := parseInitialCluster(c.InitialCluster)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(members, func(p server.Peer) bool { return p.Name == c.Name }) {
		return fmt.Errorf("--initial-cluster does not name this member, --name %q", c.Name)
	}
	switch {
	case c.PeerAddr == "":
		return errors.New("--peer-addr is empty")
	case c.HeartbeatInterval <= 0:
		return fmt.Errorf("--heartbeat-interval must be positive, not %v", c.HeartbeatInterval)
	case c.ElectionTimeout < minElectionHeartbeats*c.HeartbeatInterval:
		return fmt.Errorf("--election-timeout (%v) must be at least %d times --heartbeat-interval (%v)", c.ElectionTimeout, minElectionHeartbeats, c.HeartbeatInterval)
	}
	return nil
}

// refuseSingleStore refuses to start a replicated member on a data
// directory that holds a single member's store: its keys would be
// silently ignored, as the member's state is the replicated log's.
func refuseSingleStore(dir string) error {
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.snap"))
	if len(segs)+len(snaps) == 0 {
		return nil
	}
	return fmt.Errorf("--data-dir %s holds a single member's store (started without --initial-cluster); a replicated member keeps its log in %s and would ignore those keys: give it an empty --data-dir", dir, filepath.Join(dir, raftDir))
}

// mkdirRaft makes the replicated log's directory.
func mkdirRaft(dir string) (string, error) {
	p := filepath.Join(dir, raftDir)
	if err := os.MkdirAll(p, 0o750); err != nil {
		return "", fmt.Errorf("raft log directory: %w", err)
	}
	return p, nil
}

// leaders dials the members' peer listeners, each once, for forwarding:
// Leader returns the client of the member this one knows to lead, nil
// while it leads itself or knows none.
type leaders struct {
	node *replica.Node
	tls  *tlsfiles.Source
	max  int // the largest request forwarded (--max-request-bytes)

	mu    sync.Mutex
	conns map[uint64]*grpc.ClientConn
}

func newLeaders(node *replica.Node, tls *tlsfiles.Source, maxRequest int) *leaders {
	return &leaders{node: node, tls: tls, max: maxRequest, conns: map[uint64]*grpc.ClientConn{}}
}

// Leader returns the leader's QueueService, for forwarding.
func (l *leaders) Leader() queuev1.QueueServiceClient {
	conn := l.conn()
	if conn == nil {
		return nil
	}
	return queuev1.NewQueueServiceClient(conn)
}

// Cluster returns the leader's ClusterService, for membership changes.
func (l *leaders) Cluster() queuev1.ClusterServiceClient {
	conn := l.conn()
	if conn == nil {
		return nil
	}
	return queuev1.NewClusterServiceClient(conn)
}

// conn is the connection to the leader's peer listener.
func (l *leaders) conn() *grpc.ClientConn {
	st := l.node.Status()
	if st.IsLeader || st.Leader == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	conn := l.conns[st.Leader]
	if conn == nil {
		addr := ""
		for _, m := range l.node.Members() {
			if m.ID == st.Leader {
				addr = m.Addr
			}
		}
		if addr == "" {
			return nil // a member this one has no address of
		}
		creds := insecure.NewCredentials()
		if l.tls != nil {
			// "": the leader's certificate is checked against the host of
			// its peer address, as the raft transport checks it.
			creds = l.tls.ClientCredentials("")
		}
		var err error
		conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(l.max), grpc.MaxCallRecvMsgSize(serve.MaxMessageBytes)))
		if err != nil {
			return nil // an address CheckAddr passed: cannot happen
		}
		l.conns[st.Leader] = conn
	}
	return conn
}

// Close closes the connections.
func (l *leaders) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, c := range l.conns {
		c.Close()
		delete(l.conns, id)
	}
}

// peerPolicy is the peer listener's authorization: the members alone, to
// raft traffic and to the QueueService calls and membership changes they
// hand on (each authorized where it arrived: MemberAdd, MemberRemove, MoveLeader and Snapshot
// are admin's on the client listener).
func peerPolicy() (*authz.Policy, error) {
	return authz.Compile([]authz.Rule{{
		Roles: []string{tlsfiles.RoleQueuePeer},
		Methods: []string{queuev1.RaftService_Send_FullMethodName, queuev1.RaftService_SendSnapshot_FullMethodName, queuev1.RaftService_Join_FullMethodName, queuev1.RaftService_Publish_FullMethodName,
			"/" + queuev1.QueueService_ServiceDesc.ServiceName + "/*",
			queuev1.ClusterService_MemberAdd_FullMethodName, queuev1.ClusterService_MemberRemove_FullMethodName, queuev1.ClusterService_MoveLeader_FullMethodName, queuev1.ClusterService_Snapshot_FullMethodName},
	}})
}

// dashboardMembers is the dashboard's view of the members: each with the
// leader marked and, on the leader, how far its log is behind.
func dashboardMembers(node *replica.Node, self string) func() dashboard.Members {
	return func() dashboard.Members {
		st := node.Status()
		out := dashboard.Members{Self: self}
		for _, m := range node.Members() {
			dm := dashboard.Member{Name: m.Name, PeerAddr: m.Addr, ClientAddr: m.ClientAddr, Leader: m.ID == st.Leader}
			if match, ok := st.Match[m.ID]; ok && st.IsLeader {
				dm.Known, dm.Lag = true, st.LastIndex-min(match, st.LastIndex)
			}
			if active, ok := st.Active[m.ID]; ok && st.IsLeader {
				dm.Unreachable = !active
			}
			out.Members = append(out.Members, dm)
		}
		return out
	}
}

// replicated is one member of a replicated queue: the Raft node under its
// broker, forwarding to the leader, the peer listener.
type replicated struct {
	o     memberOptions
	peers []server.Peer // --initial-cluster's
	b     *broker.Broker
	fwd   *leaders // the leader's peer listener, once open
}

// open opens this member's Raft log in --data-dir, decides how the member
// starts (decide: its own log, a new queue, or joining one in use),
// and starts the broker on it.
func (r *replicated) open(ctx context.Context) (*broker.Broker, error) {
	cfg, log := r.o.cfg, r.o.log
	if err := refuseSingleStore(cfg.DataDir); err != nil {
		return nil, err
	}
	dir, err := mkdirRaft(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: dir, Logger: log, ObserveSync: r.o.observeSync})
	if err != nil {
		return nil, fmt.Errorf("open the raft log: %w", err)
	}
	d, err := r.decide(ctx, dir, rlog)
	if err != nil {
		rlog.Close()
		return nil, err
	}
	// Ten election timeouts: long enough for a member slow to start on a
	// loaded machine. Every member answered moments ago, so one that never
	// comes is rare, and it only delays the new queue's first leader.
	hold, release := holdElection(ctx, d, r.joinConfig(), 10*cfg.ElectionTimeout, log)
	addrs := make(map[uint64]string, len(d.members))
	names := make(map[uint64]string, len(d.members))
	for _, m := range d.members {
		addrs[m.ID], names[m.ID] = m.Addr, m.Name
	}
	initial := make(map[string]string, len(r.peers))
	for _, p := range r.peers {
		initial[p.Name] = p.PeerAddr
	}
	b, err := broker.OpenReplicated(r.o.broker, replica.Config{
		ID:            d.id,
		ClusterID:     d.cluster,
		Peers:         addrs,
		Names:         names,
		Initial:       initial,
		Join:          d.join,
		Claims:        &fileClaims{dir: dir},
		HoldElection:  hold,
		Log:           rlog,
		TickInterval:  cfg.HeartbeatInterval,
		HeartbeatTick: 1,
		ElectionTick:  int(cfg.ElectionTimeout / cfg.HeartbeatInterval),
		TLS:           r.o.tls,
		Logger:        log,
		Registerer:    r.o.registry,
	}, r.o.metrics, log)
	if err != nil {
		rlog.Close()
		return nil, err
	}
	release()
	r.b = b
	// Calls, the dashboard and ClusterService reach the leader through its
	// peer listener.
	r.fwd = newLeaders(b.Member(), r.o.tls, cfg.MaxRequestBytes)
	return b, nil
}

// joinConfig is how this member asks the others (joinConfig).
func (r *replicated) joinConfig() replica.JoinConfig {
	return joinConfig(r.o.cfg, r.peers, r.o.tls, r.o.log)
}

// dashboard reads through the leader's peer listener when this member
// does not lead (memberSource), lists the members as the node knows them,
// and shows work streams only on the leader, where every stream ends (a
// follower hands each on).
func (r *replicated) dashboard(b *broker.Broker, o *dashboard.Options, streams *server.Streams) dashboard.Source {
	o.Members = dashboardMembers(b.Member(), r.o.cfg.Name)
	o.Streams = func() ([]server.StreamInfo, bool) {
		if !b.Leading() {
			return nil, false
		}
		return streams.List(), true
	}
	return memberSource{b: b, leader: r.fwd.Leader}
}

// serving hands clients' calls to the leader (forwarding) and answers
// serializable reads here; the peer listener serves RaftService, the
// calls followers hand on (with this member's own QueueService) and the
// membership changes they hand on. Ready also asks for a known leader.
func (r *replicated) serving(b *broker.Broker, own queuev1.QueueServiceServer, self *server.Self) (queuev1.QueueServiceServer, func(context.Context) error, peerListener, error) {
	pol, err := peerPolicy()
	if err != nil {
		return nil, nil, peerListener{}, err
	}
	node := b.Member()
	self.Peers = r.peers
	self.Leader = r.fwd.Cluster
	peer := peerListener{addr: r.o.cfg.PeerAddr, policy: pol, register: func(s *grpc.Server) {
		node.Register(s)
		queuev1.RegisterQueueServiceServer(s, own)
		// The membership changes a follower hands on; NewCluster answers
		// them here without handing them on again.
		queuev1.RegisterClusterServiceServer(s, server.NewCluster(b, *self))
	}}
	ready := func(context.Context) error {
		if err := b.Ready(); err != nil {
			return err
		}
		if node.Status().Leader == 0 {
			return errNoLeaderKnown
		}
		return nil
	}
	return server.LocalReads(server.Forwarding(own, r.fwd.Leader), own), ready, peer, nil
}

// listening publishes the client address: the other members learn it
// from this one (replica's publish.go), so that any member lists every
// address.
func (r *replicated) listening(advertise string) { r.b.Member().SetClientAddr(advertise) }

// leaving makes this member take no leadership before it stops, and hands
// over the leadership it holds, within two election timeouts (raft gives
// a transfer up after one): best effort, since the queue elects a leader
// without it (replica.Node.Leave).
func (r *replicated) leaving() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.o.cfg.ElectionTimeout)
	defer cancel()
	start := time.Now()
	to, led, err := r.b.Member().Leave(ctx)
	switch {
	case err != nil && led:
		r.o.log.Warn("stopping: could not hand leadership over; the others elect a leader after an election timeout", "error", err)
	case err != nil:
		r.o.log.Warn("stopping: could not tell the other members that this one stops", "error", err)
	case led:
		r.o.log.Info("stopping: handed leadership over", "to", to, "took", time.Since(start))
	}
}

func (r *replicated) close() {
	if r.fwd != nil {
		r.fwd.Close()
	}
}
