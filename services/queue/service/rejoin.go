package service

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/idfile"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Two files in the Raft log's directory hold what the log alone does not
// say. memberIDFile is this member's Raft id once it has one:
// memberID(name) for a member that bootstrapped the queue, a fresh one
// for a member that joined it (replica.Rejoin: it lost its disk, or
// MemberAdd added it). clusterIDFile is the queue's cluster id: the hash
// of --initial-cluster the queue began with, learnt from the leader by a
// member that joined, so that --initial-cluster matters at the first start
// alone and a member added later, whose list names it, speaks the queue's
// id. A log from before the files existed is memberID(name)'s, of
// clusterID(--initial-cluster).
//
// forcedFile holds the cluster id --force-new-cluster gave the queue: a
// member started again with the flag still set, under that same id, has
// been forced already and starts as it is (the others may have rejoined
// since; forcing again would take them out).
const (
	memberIDFile  = "member-id"
	clusterIDFile = "cluster-id"
	forcedFile    = "forced-cluster-id"
)

// emptyLog reports whether the Raft log holds no entry and no snapshot:
// a member that never started, one that lost its disk, or one that joined
// and stopped before the leader's state reached its disk. The last kept
// the term (and vote) it heard of and nothing of the queue, and a crash
// that tears the write of that state leaves the same: it must ask as a
// member that lost its disk does. Started under its saved id instead, it
// would take its peers from --initial-cluster, since a log without a
// configuration names none, and when the others have rejoined under new
// ids since, it would drop every message of theirs as from a stranger and
// wait for good.
func emptyLog(l *store.RaftLog) bool {
	ms := l.MemoryStorage()
	last, _ := ms.LastIndex()
	snap, _ := ms.Snapshot()
	return last == 0 && snap.Metadata.Index == 0
}

// heardOfALeader reports whether the Raft log holds a term: an empty log
// (emptyLog) with one belonged to a member that joined a queue in use,
// which cannot be new.
func heardOfALeader(l *store.RaftLog) bool {
	hs, _, _ := l.MemoryStorage().InitialState()
	return hs.Term != 0
}

// readID reads an id file (memberIDFile, clusterIDFile, forcedFile); ok
// is false when there is none. A damaged one stops the member: under an
// id it misread, it would be refused by every peer and wait for good.
func readID(dir, file string) (id uint64, ok bool, err error) {
	id, ok, err = idfile.Read(dir, file)
	if errors.Is(err, idfile.ErrDamaged) {
		return 0, false, fmt.Errorf("%w: this member cannot tell which queue it belongs to or under which id: empty --data-dir and start it again, and it rejoins as a member that lost its disk and catches up from the others", err)
	}
	return id, ok, err
}

// writeID makes an id file durable before the node starts under it: a
// crash before leaves an empty log, which asks again.
func writeID(dir, file string, id uint64) error {
	return idfile.Write(dir, file, id)
}

// membership is decide's answer: this member's Raft id, the queue's
// cluster id, the members to start with, and whether to start by joining
// (an empty log the leader fills) rather than as the log says.
type membership struct {
	id, cluster uint64
	join        bool
	// bootstrap: the log was empty and every member answered empty, so
	// this member forms the queue with the others (replica.Rejoin).
	bootstrap bool
	members   []replica.Member
}

// decide finds this member's Raft id, the cluster id and the
// configuration. A log that holds something is the member's own, under
// the ids it saved. An empty one asks the others (replica.Rejoin) whether
// the queue is new, to bootstrap under memberID(name), or has been in
// use, so this member lost its disk (or MemberAdd added it) and joins
// under a new id; meanwhile it answers the same question from the others
// on its peer address, with the peer listener's certificate and policy,
// so that members starting together can tell.
func (r *replicated) decide(ctx context.Context, dir string, rlog *store.RaftLog) (membership, error) {
	cfg, peers, tlsSrc, log := r.o.cfg, r.peers, r.o.tls, r.o.log
	var d membership
	for _, p := range peers {
		d.members = append(d.members, replica.Member{ID: p.ID, Name: p.Name, Addr: p.PeerAddr})
	}
	if emptyLog(rlog) && cfg.ForceNewCluster {
		return membership{}, fmt.Errorf("--force-new-cluster: %w (start it on the data directory of the member that holds the queue)", replica.ErrNothingToForce)
	}
	if !emptyLog(rlog) {
		saved, ok, err := readID(dir, memberIDFile)
		if err != nil {
			return membership{}, err
		}
		if !ok {
			saved = memberID(cfg.Name)
		}
		cluster, ok, err := readID(dir, clusterIDFile)
		if err != nil {
			return membership{}, err
		}
		if !ok {
			// A log of a version that did not save it: the queue's id is
			// its --initial-cluster's, which must then be the first one.
			cluster = clusterID(peers)
			if err := writeID(dir, clusterIDFile, cluster); err != nil {
				return membership{}, err
			}
		}
		if err := checkRestoredCluster(dir, rlog, peers); err != nil {
			return membership{}, err
		}
		if cfg.ForceNewCluster {
			f := forcing{dir: dir, rlog: rlog, self: saved, cluster: cluster, peers: peers, jc: joinConfig(cfg, peers, tlsSrc, log),
				wait: 3 * cfg.ElectionTimeout, log: log}
			if cluster, err = f.force(ctx); err != nil {
				return membership{}, err
			}
		}
		d.id, d.cluster = saved, cluster
		members := d.members
		// This member under the id it has; the others as they started
		// (the log's configuration changes and snapshot move those that
		// rejoined since to their ids).
		for i := range members {
			if members[i].Name == cfg.Name {
				members[i].ID = saved
			}
		}
		return d, nil
	}
	stop, err := serveEmpty(cfg, clusterID(peers), tlsSrc, log)
	if err != nil {
		return membership{}, err
	}
	rj, err := replica.Rejoin(ctx, joinConfig(cfg, peers, tlsSrc, log))
	stop()
	if err != nil {
		return membership{}, err
	}
	if rj.Bootstrap && heardOfALeader(rlog) {
		// Every member answers empty, yet this one joined a queue before:
		// the queue lost more than this member's log, and forming a new
		// one would hide that.
		return membership{}, fmt.Errorf("the raft log in %s holds a term but no entry, as a member that joined a queue in use leaves it, and every other member answers empty: the queue that member joined is lost; remove %s to start a new one", dir, dir)
	}
	d.id, d.cluster, d.bootstrap = memberID(cfg.Name), rj.ClusterID, rj.Bootstrap
	if !rj.Bootstrap {
		d.id, d.join, d.members = rj.ID, true, rj.Members
	}
	// The cluster id first: a crash between the two leaves no member id,
	// and an empty log asks again.
	if err := writeID(dir, clusterIDFile, d.cluster); err != nil {
		return membership{}, err
	}
	if err := writeID(dir, memberIDFile, d.id); err != nil {
		return membership{}, err
	}
	return d, nil
}

// checkRestoredCluster refuses to start a restored member, while some of
// the members its restore named have not yet taken their ids (its claim
// files are there), under an --initial-cluster other than the one the
// restore was given: the others would be started with this one, and a
// member it names that the restore did not would be taken in as one
// that lost its disk, while the one the restore named waits for good.
func checkRestoredCluster(dir string, rlog *store.RaftLog, peers []server.Peer) error {
	claims, _ := filepath.Glob(filepath.Join(dir, claimPrefix+"*"))
	if len(claims) == 0 {
		return nil
	}
	seeded, err := replica.SeededMembers(rlog)
	if err != nil || len(seeded) == 0 {
		return err
	}
	var want, got []string
	for _, m := range seeded {
		want = append(want, m.Name+"="+m.Addr)
	}
	for _, p := range peers {
		got = append(got, p.Name+"="+p.PeerAddr)
	}
	slices.Sort(want)
	slices.Sort(got)
	if slices.Equal(want, got) {
		return nil
	}
	return fmt.Errorf("this member was restored from a backup with --initial-cluster %s, and is started with --initial-cluster %s: start it, and the others, with the one the restore was given (or restore again with the one you mean)",
		strings.Join(want, ","), strings.Join(got, ","))
}

// serveEmpty serves replica.NewEmptyResponder on --peer-addr until stop.
func serveEmpty(cfg Config, cluster uint64, tlsSrc *tlsfiles.Source, log *slog.Logger) (stop func(), err error) {
	var opts []grpc.ServerOption
	if tlsSrc != nil {
		creds, err := tlsSrc.ServerCredentials(tlsfiles.RequireClientCert)
		if err != nil {
			return nil, err
		}
		pol, err := peerPolicy()
		if err != nil {
			return nil, err
		}
		az, err := authz.New(authz.Options{Policy: pol, Logger: log, Registerer: prometheus.NewRegistry()})
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(creds), grpc.ChainUnaryInterceptor(az.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(az.StreamServerInterceptor()))
	}
	lis, err := net.Listen("tcp", cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on --peer-addr %s while the log is empty: %w", cfg.PeerAddr, err)
	}
	// A member that still takes this one for the leader (it led before
	// its restart) hands its clients' calls to this listener: they are
	// refused as by any member that does not lead, which the clients
	// retry elsewhere, not as a service this process lacks.
	opts = append(opts, grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return queueclient.Refusal(codes.Unavailable, queueclient.ReasonNotLeader,
			"this member is starting on an empty log and does not lead the queue: nothing changed; retry on any member")
	}))
	srv := grpc.NewServer(opts...)
	queuev1.RegisterRaftServiceServer(srv, replica.NewEmptyResponder(cluster))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	return func() { srv.Stop(); <-done }, nil
}

// joinConfig is how this member asks the others about their logs
// (replica.Rejoin, replica.SurveyMembers): under --initial-cluster's id,
// which an empty member answers to, and by name and peer address, which a
// member of the queue answers to whatever its id has become.
func joinConfig(cfg Config, peers []server.Peer, tlsSrc *tlsfiles.Source, log *slog.Logger) replica.JoinConfig {
	jc := replica.JoinConfig{ClusterID: clusterID(peers), Name: cfg.Name, Peers: map[string]string{}, Existing: cfg.InitialClusterState == ClusterStateExisting, TLS: tlsSrc, Logger: log}
	for _, p := range peers {
		if p.Name == cfg.Name {
			jc.Addr = p.PeerAddr
		} else {
			jc.Peers[p.Name] = p.PeerAddr
		}
	}
	return jc
}

// forcing is one --force-new-cluster: this member's raft directory and
// log, its id, the queue's cluster id, the initial members, how to ask
// the others, and how long to watch them for a leader
// (refuseBesideALeader).
type forcing struct {
	dir     string
	rlog    *store.RaftLog
	self    uint64
	cluster uint64
	peers   []server.Peer
	jc      replica.JoinConfig
	wait    time.Duration
	log     *slog.Logger
}

// force makes this member's log a queue of one (replica.ForceNewCluster)
// under a new cluster id, which it returns, unless the log was forced
// already under cluster, the id it has now, and the others hold the queue
// (forcedAgain), or the others still run the queue with a leader
// (refuseBesideALeader). The new id is durable before the log changes: a
// crash in between leaves a log of the old configuration under an id no
// other member speaks, and the flag, given again, forces it then.
func (f forcing) force(ctx context.Context) (uint64, error) {
	dir, rlog, self, cluster, peers, jc, log := f.dir, f.rlog, f.self, f.cluster, f.peers, f.jc, f.log
	forced, ok, err := readID(dir, forcedFile)
	if err != nil {
		return 0, err
	}
	if ok && forced == cluster {
		again, err := forcedAgain(ctx, jc, log)
		if err != nil {
			return 0, err
		}
		if !again {
			log.Warn("--force-new-cluster is set, and this member was forced into a queue of one already, which another member now holds too: it starts as it is; remove the flag", "cluster_id", fmt.Sprintf("%016x", cluster))
			return cluster, nil
		}
	} else if err := refuseBesideALeader(ctx, jc, f.wait); err != nil {
		return 0, err
	}
	next := cluster
	for next == cluster || next == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("--force-new-cluster: a new cluster id: %w", err)
		}
		next = binary.BigEndian.Uint64(b[:])
	}
	if err := writeID(dir, clusterIDFile, next); err != nil {
		return 0, err
	}
	names := make(map[uint64]string, len(peers))
	for _, p := range peers {
		names[p.ID] = p.Name
	}
	removed, err := replica.ForceNewCluster(rlog, self, names)
	if err != nil {
		return 0, fmt.Errorf("--force-new-cluster: %w", err)
	}
	if err := writeID(dir, forcedFile, next); err != nil {
		return 0, err
	}
	log.Warn("--force-new-cluster: this member is now a queue of one, with everything its log holds, under a new cluster id; the others rejoin when started on empty data directories, and a member still holding the old queue's log is refused; remove the flag once they have rejoined",
		"old_cluster_id", fmt.Sprintf("%016x", cluster), "cluster_id", fmt.Sprintf("%016x", next), "removed", len(removed))
	return next, nil
}

// ErrForceBesideALeader is returned for --force-new-cluster on a member
// whose queue another member still holds and answers for.
var ErrForceBesideALeader = errors.New("--force-new-cluster refused: another member holds the queue and answers")

// refuseBesideALeader asks the other members whether they hold the queue,
// and refuses (ErrForceBesideALeader, naming them) if one that does
// answers. With a leader, the queue runs without this member, and forcing
// it makes two queues, each acknowledging writes the other never sees.
// Without one, this member may be the vote the others lack (with it they
// are a majority, and starting it without the flag is all it takes), or
// the members that answer may be a majority once the others come back
// beside the queue this one would become. Either way the flag is not for
// a queue whose members answer: it is for one whose majority is gone,
// the others down or emptied, which hold nothing up here. Members that
// answer only for a moment are watched for wait (an election, a restart
// under way) once one of them holds the queue. Two members forced at the
// same moment cannot see each other start: force one member only.
func refuseBesideALeader(ctx context.Context, jc replica.JoinConfig, wait time.Duration) error {
	byAddr := map[string]string{jc.Addr: jc.Name}
	for name, addr := range jc.Peers {
		byAddr[addr] = name
	}
	sv := replica.SurveyMembers(ctx, jc)
	if len(sv.InUse) == 0 {
		return nil
	}
	// Someone holds it: look again for a leader a little while, so that
	// the refusal can say whether the queue runs.
	leader := ""
	for deadline := time.Now().Add(wait); leader == "" && time.Now().Before(deadline); {
		for _, name := range sv.InUse {
			if l, ok := sv.Leaders[name]; ok && l != jc.Addr {
				if leader = byAddr[l]; leader == "" {
					leader = l
				}
			}
		}
		if leader != "" {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("--force-new-cluster: asking the other members whether the queue runs: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if next := replica.SurveyMembers(ctx, jc); len(next.InUse) > 0 {
			sv = next
		}
	}
	holders := strings.Join(sv.InUse, ", ")
	if leader != "" {
		return fmt.Errorf("%w: %s hold the queue and answer, and %s leads it: forcing this member into a queue of its own would split it, each side acknowledging writes the other never sees. Start it without the flag and it rejoins the queue that runs (with an empty --data-dir if its log is damaged); --force-new-cluster is for a queue that lost its majority, with the others down or emptied",
			ErrForceBesideALeader, holders, leader)
	}
	return fmt.Errorf("%w: %s hold the queue and answer, though none knows a leader: if with this member they are a majority, start it without the flag and they elect one; if not, stop them, force this member, and start them on empty data directories, so that they rejoin it rather than lead the old queue beside it once more of its members come back",
		ErrForceBesideALeader, holders)
}

// forceAgainWait bounds how long a member started with --force-new-cluster
// again waits for the others to say whether they hold the queue
// (forcedAgain). The recovery starts the survivor before the members that
// lost their disks, so silence is what a second loss looks like; the wait
// is for a member restarted with the flag left set while the others are
// starting too.
const forceAgainWait = 10 * time.Second

// forcedAgain decides for a member forced into a queue of one before, and
// started with --force-new-cluster again under the id it gave the queue,
// whether the flag is a new order or one left set. The others are asked,
// in rounds: if one of them holds a log of the queue, the members have
// rejoined since and forcing again would take them out, with whatever
// they hold that this member does not, so it starts as it is; if every
// one answers that its log is empty, or none of them answers within
// forceAgainWait, the queue has lost a majority again and only this
// member can recover it: it forces again, as the flag says (etcd's
// --force-new-cluster forces every time it is given).
func forcedAgain(ctx context.Context, jc replica.JoinConfig, log *slog.Logger) (bool, error) {
	deadline := time.Now().Add(forceAgainWait)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		sv := replica.SurveyMembers(ctx, jc)
		switch {
		case len(sv.InUse) > 0:
			return false, nil
		case len(sv.Empty) == len(jc.Peers):
			log.Warn("--force-new-cluster is set, this member was forced into a queue of one before, and every other member answers that its log is empty: the queue lost a majority again; forcing it again", "empty", strings.Join(sv.Empty, ","))
			return true, nil
		case !time.Now().Before(deadline):
			silent := make([]string, 0, len(sv.Silent))
			var errs []error
			for name, err := range sv.Silent {
				silent = append(silent, name)
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			slices.Sort(silent)
			log.Error("--force-new-cluster is set, this member was forced into a queue of one before, and no other member says it holds the queue: forcing it again (a member that held the queue and was silent is refused when it starts: empty its data directory)",
				"silent", strings.Join(silent, ","), "empty", strings.Join(sv.Empty, ","), "waited", forceAgainWait, "errors", errors.Join(errs...))
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("--force-new-cluster: asking the other members whether they hold the queue: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// holdElection is what a member that bootstraps a new queue with others
// holds its first election with (replica.Config.HoldElection), released
// once every other member answers from its node or after bound, whichever
// comes first; nil for a member that does not bootstrap or has no others.
// release starts the wait, once the node serves.
func holdElection(ctx context.Context, d membership, jc replica.JoinConfig, bound time.Duration, log *slog.Logger) (hold <-chan struct{}, release func()) {
	if !d.bootstrap || len(jc.Peers) == 0 {
		return nil, func() {}
	}
	c := make(chan struct{})
	return c, func() {
		go func() {
			defer close(c)
			wctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			if err := replica.AwaitStarted(wctx, jc); err != nil && ctx.Err() == nil {
				log.Warn("a member that formed the new queue elects without hearing every other member start", "err", err)
			}
		}()
	}
}
