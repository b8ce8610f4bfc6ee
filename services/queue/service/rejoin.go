package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
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
const (
	memberIDFile  = "member-id"
	clusterIDFile = "cluster-id"
)

// emptyLog reports whether the Raft log holds nothing: a member that never
// started, or one that lost its disk.
func emptyLog(l *store.RaftLog) bool {
	ms := l.MemoryStorage()
	hs, _, _ := ms.InitialState()
	last, _ := ms.LastIndex()
	snap, _ := ms.Snapshot()
	return hs.Term == 0 && hs.Commit == 0 && last == 0 && snap.Metadata.Index == 0
}

// readID reads an id file (memberIDFile, clusterIDFile); ok is false when
// there is none.
func readID(dir, file string) (id uint64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", file, err)
	}
	id, err = strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
	if err != nil || id == 0 {
		return 0, false, fmt.Errorf("%s holds %q, not an id", filepath.Join(dir, file), b)
	}
	return id, true, nil
}

// writeID makes an id file durable before the node starts under it: a
// crash before leaves an empty log, which asks again.
func writeID(dir, file string, id uint64) error {
	p := filepath.Join(dir, file)
	tmp := p + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	_, err = fmt.Fprintf(f, "%016x\n", id)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// membership is decideMember's answer: this member's Raft id, the queue's
// cluster id, the members to start with, and whether to start by joining
// (an empty log the leader fills) rather than as the log says.
type membership struct {
	id, cluster uint64
	join        bool
	members     []replica.Member
}

// decideMember finds this member's Raft id, the cluster id and the
// configuration. A log that holds something is the member's own, under
// the ids it saved. An empty one asks the others (replica.Rejoin) whether
// the queue is new, to bootstrap under memberID(name), or has been in
// use, so this member lost its disk (or MemberAdd added it) and joins
// under a new id; meanwhile it answers the same question from the others
// on its peer address, with the peer listener's certificate and policy,
// so that members starting together can tell.
func decideMember(ctx context.Context, cfg Config, dir string, rlog *store.RaftLog, peers []server.Peer, tlsSrc *tlsfiles.Source, log *slog.Logger) (membership, error) {
	var d membership
	for _, p := range peers {
		d.members = append(d.members, replica.Member{ID: p.ID, Name: p.Name, Addr: p.PeerAddr})
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
	jc := replica.JoinConfig{ClusterID: clusterID(peers), Name: cfg.Name, Peers: map[string]string{}, TLS: tlsSrc, Logger: log}
	for _, p := range peers {
		if p.Name == cfg.Name {
			jc.Addr = p.PeerAddr
		} else {
			jc.Peers[p.Name] = p.PeerAddr
		}
	}
	rj, err := replica.Rejoin(ctx, jc)
	stop()
	if err != nil {
		return membership{}, err
	}
	d.id, d.cluster = memberID(cfg.Name), rj.ClusterID
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
	srv := grpc.NewServer(opts...)
	queuev1.RegisterRaftServiceServer(srv, replica.NewEmptyResponder(cluster))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	return func() { srv.Stop(); <-done }, nil
}
