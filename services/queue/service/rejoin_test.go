package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/idfile"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// usedLog opens a Raft log in a new directory and gives it an entry, so
// that decide takes it for a member's own log, under its id files.
func usedLog(t *testing.T) (string, *store.RaftLog) {
	t.Helper()
	dir := t.TempDir()
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rlog.Close() })
	if err := rlog.Save(raftpb.HardState{Term: 1, Commit: 1}, []raftpb.Entry{{Term: 1, Index: 1}}, raftpb.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	return dir, rlog
}

func threePeers() []server.Peer {
	var peers []server.Peer
	for i, name := range []string{"a", "b", "c"} {
		peers = append(peers, server.Peer{Name: name, PeerAddr: fmt.Sprintf("127.0.0.1:%d", 7001+i), ID: memberID(name)})
	}
	return peers
}

// TestDecideMemberReadsItsIDs: a member with a log starts under the ids
// its files hold, as this build writes them and as the releases before
// wrote them (hex text, no checksum).
func TestDecideMemberReadsItsIDs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = "b"
	for name, write := range map[string]func(dir, file string, id uint64) error{
		"this build": writeID,
		"previous release": func(dir, file string, id uint64) error {
			return os.WriteFile(filepath.Join(dir, file), fmt.Appendf(nil, "%016x\n", id), 0o640)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, rlog := usedLog(t)
			if err := write(dir, memberIDFile, 0x77); err != nil {
				t.Fatal(err)
			}
			if err := write(dir, clusterIDFile, 0xba70); err != nil {
				t.Fatal(err)
			}
			d, err := (&replicated{o: memberOptions{cfg: cfg, log: slog.New(slog.DiscardHandler)}, peers: threePeers()}).decide(t.Context(), dir, rlog)
			if err != nil || d.id != 0x77 || d.cluster != 0xba70 || d.join {
				t.Fatalf("decide = %+v, %v; want member 0x77 of cluster 0xba70, not joining", d, err)
			}
		})
	}
}

// TestDecideMemberRefusesADamagedIDFile: a flipped bit in an id file
// that leaves hex digits (another id, if the file had no checksum) stops
// the member before it starts, naming the file and what to do, and
// changes nothing on disk.
func TestDecideMemberRefusesADamagedIDFile(t *testing.T) {
	for _, file := range []string{clusterIDFile, memberIDFile, forcedFile} {
		t.Run(file, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name = "b"
			// forced-cluster-id is read under --force-new-cluster alone.
			cfg.ForceNewCluster = file == forcedFile
			dir, rlog := usedLog(t)
			for _, f := range []string{memberIDFile, clusterIDFile, forcedFile} {
				if err := writeID(dir, f, 0x1234567890abcdef); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(dir, file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[11] ^= 1 // '3' to '2': still a hex digit
			if err := os.WriteFile(p, b, 0o640); err != nil {
				t.Fatal(err)
			}
			d, err := (&replicated{o: memberOptions{cfg: cfg, log: slog.New(slog.DiscardHandler)}, peers: threePeers()}).decide(t.Context(), dir, rlog)
			if !errors.Is(err, idfile.ErrDamaged) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "empty --data-dir") {
				t.Fatalf("decide = %+v, %v; want idfile.ErrDamaged naming %s and saying to empty --data-dir", d, err, p)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(after, b) {
				t.Errorf("%s changed: %q, was %q", file, after, b)
			}
			if id, _, err := idfile.Read(dir, clusterIDFile); file != clusterIDFile && (err != nil || id != 0x1234567890abcdef) {
				t.Errorf("the cluster id changed: %x, %v", id, err)
			}
		})
	}
}

// TestServeEmptyRefusesQueueCalls: while its log is empty, a member's peer
// listener answers a QueueService call, which a member that still takes
// it for the leader hands on, UNAVAILABLE NOT_LEADER (retried elsewhere,
// nothing changed), not UNIMPLEMENTED; its RaftService still answers.
func TestServeEmptyRefusesQueueCalls(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.PeerAddr = lis.Addr().String()
	lis.Close()
	stop, err := serveEmpty(cfg, 0xba70, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	conn, err := grpc.NewClient(cfg.PeerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}})
	st := status.Convert(err)
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if st.Code() != codes.Unavailable || reason != queueclient.ReasonNotLeader {
		t.Fatalf("Add on an empty member's peer listener: %v (reason %q), want UNAVAILABLE %s", err, reason, queueclient.ReasonNotLeader)
	}
	if _, err := queuev1.NewRaftServiceClient(conn).Join(ctx, &queuev1.JoinRequest{ClusterId: 0xba70}); err != nil {
		t.Fatalf("Join of the member's cluster: %v", err)
	}
}
