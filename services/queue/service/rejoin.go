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

// memberIDFile, in the Raft log's directory, holds this member's Raft id
// once it has one: memberID(name) for a member that bootstrapped the queue,
// a fresh one for a member that rejoined after losing its disk
// (replica.Rejoin). A log from before the file existed is memberID(name)'s.
const memberIDFile = "member-id"

// emptyLog reports whether the Raft log holds nothing: a member that never
// started, or one that lost its disk.
func emptyLog(l *store.RaftLog) bool {
	ms := l.MemoryStorage()
	hs, _, _ := ms.InitialState()
	last, _ := ms.LastIndex()
	snap, _ := ms.Snapshot()
	return hs.Term == 0 && hs.Commit == 0 && last == 0 && snap.Metadata.Index == 0
}

// readMemberID reads memberIDFile; ok is false when there is none.
func readMemberID(dir string) (id uint64, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, memberIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the member id: %w", err)
	}
	id, err = strconv.ParseUint(strings.TrimSpace(string(b)), 16, 64)
	if err != nil || id == 0 {
		return 0, false, fmt.Errorf("%s holds %q, not a member id", filepath.Join(dir, memberIDFile), b)
	}
	return id, true, nil
}

// writeMemberID makes memberIDFile durable before the node starts under
// the id: a crash before leaves an empty log, which rejoins again.
func writeMemberID(dir string, id uint64) error {
	p := filepath.Join(dir, memberIDFile)
	tmp := p + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("write the member id: %w", err)
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
		return fmt.Errorf("write the member id: %w", err)
	}
	return nil
}

// decideMember finds this member's Raft id and configuration. A log that
// holds something is the member's own, under the id it saved. An empty one
// asks the others (replica.Rejoin) whether the queue is new, to bootstrap
// under memberID(name), or has been in use, so this member lost its disk
// and comes back under a new id; meanwhile it answers the same question
// from the others on its peer address, with the peer listener's
// certificate and policy, so that members starting together can tell.
func decideMember(ctx context.Context, cfg Config, dir string, rlog *store.RaftLog, peers []server.Peer, tlsSrc *tlsfiles.Source, log *slog.Logger) (id uint64, join bool, members []replica.Member, err error) {
	for _, p := range peers {
		members = append(members, replica.Member{ID: p.ID, Name: p.Name, Addr: p.PeerAddr})
	}
	if !emptyLog(rlog) {
		saved, ok, err := readMemberID(dir)
		if err != nil {
			return 0, false, nil, err
		}
		if !ok {
			saved = memberID(cfg.Name)
		}
		// This member under the id it has; the others as they started
		// (the log's configuration changes and snapshot move those that
		// rejoined since to their ids).
		for i := range members {
			if members[i].Name == cfg.Name {
				members[i].ID = saved
			}
		}
		return saved, false, members, nil
	}
	stop, err := serveEmpty(cfg, clusterID(peers), tlsSrc, log)
	if err != nil {
		return 0, false, nil, err
	}
	jc := replica.JoinConfig{ClusterID: clusterID(peers), Name: cfg.Name, Peers: map[string]string{}, TLS: tlsSrc, Logger: log}
	for _, p := range peers {
		if p.Name == cfg.Name {
			jc.Addr = p.PeerAddr
		} else {
			jc.Peers[p.Name] = p.PeerAddr
		}
	}
	d, err := replica.Rejoin(ctx, jc)
	stop()
	if err != nil {
		return 0, false, nil, err
	}
	id = memberID(cfg.Name)
	if !d.Bootstrap {
		id, join, members = d.ID, true, d.Members
	}
	if err := writeMemberID(dir, id); err != nil {
		return 0, false, nil, err
	}
	return id, join, members, nil
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
