package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/backup"
	"github.com/batonrun/baton/services/queue/internal/record"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestBackupAndRestore saves a backup of a replicated queue under load
// (ClusterService Snapshot, asked of a follower, which hands it to the
// leader), restores it into a fresh three-member queue (baton-queue
// restore seeds one member; the other two join it on empty data
// directories) and compares every key's state with the backup's: state,
// attempts, last error, priority. Every Add acknowledged before the save
// began is in it. A backup damaged anywhere (one flipped bit) or cut short
// is refused by name, and leaves the data directory empty.
func TestBackupAndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	src := newReplicated(t)
	c := src.client()
	for q, keys := range map[string][]string{"jobs": keysOf("job", 40), "pods": keysOf("pod", 25)} {
		if _, err := c.Add(ctx, q, keys, queueclient.AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Add(ctx, "jobs", []string{"high"}, queueclient.AddOptions{Priority: queuev1.Priority_PRIORITY_HIGH}); err != nil {
		t.Fatal(err)
	}
	// A failure (attempts, last error, a delay) and a terminal one (parked).
	leases, err := c.Lease(ctx, "pods", queueclient.LeaseOptions{Worker: "w", MaxItems: 2, Duration: time.Minute})
	if err != nil || len(leases) != 2 {
		t.Fatalf("Lease: %v %v", leases, err)
	}
	if _, err := c.Ack(ctx, "pods", []queueclient.Ack{
		{Key: leases[0].Key, Token: leases[0].Token, Outcome: queueclient.Failure("boom")},
		{Key: leases[1].Key, Token: leases[1].Token, Outcome: queueclient.Terminal("for good")},
	}); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				k := fmt.Sprintf("load-%d-%06d", w, i)
				if _, err := c.Add(loadCtx, "load", []string{k}, queueclient.AddOptions{}); err == nil {
					mu.Lock()
					acked = append(acked, k)
					mu.Unlock()
				}
			}
		})
	}
	for loaded := 0; loaded < 200; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		loaded = len(acked)
		mu.Unlock()
	}
	mu.Lock()
	before := slices.Clone(acked)
	mu.Unlock()
	follower := followersOf(src.leader(ctx))[0]
	var file bytes.Buffer
	stream, err := src.ccs[follower].Snapshot(ctx, &queuev1.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		file.Write(m.GetData())
	}
	stopLoad()
	wg.Wait()

	backupPath := filepath.Join(t.TempDir(), "queue.bak")
	if err := os.WriteFile(backupPath, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // queue/key → its state as the backup holds it
	var queues []string
	info, err := backup.Read(backupPath, file.Bytes(), func(r *record.Record) error {
		if r.Kind == record.KindQueue {
			queues = append(queues, r.Queue)
		}
		if r.Kind == record.KindPut {
			want[r.Queue+"/"+r.Key] = fmt.Sprintf("state %d attempts %d error %q priority %d", r.State, r.Attempts, r.LastError, r.Priority)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the saved backup does not read: %v", err)
	}
	for _, k := range before {
		if _, ok := want["load/"+k]; !ok {
			t.Errorf("%s was acknowledged before the save began and is not in the backup", k)
		}
	}
	if !slices.Contains(queues, "jobs") || !slices.Contains(queues, "pods") || !slices.Contains(queues, "load") || len(want) < 65+len(before) {
		t.Fatalf("the backup holds %d queues and %d keys (%+v)", info.Queues, len(want), info)
	}

	// Damaged or cut short: refused by name, nothing written.
	for name, b := range map[string][]byte{
		"flipped": flipped(file.Bytes(), len(file.Bytes())/2),
		"cut":     file.Bytes()[:len(file.Bytes())-5],
	} {
		p := filepath.Join(t.TempDir(), name+".bak")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		out, err := exec.Command(binary, "restore", "--from", p, "--data-dir", dir).CombinedOutput()
		if err == nil || !strings.Contains(string(out), p) || !strings.Contains(string(out), "damaged") {
			t.Errorf("restore of a %s backup: %v: %s, want it refused naming the file", name, err, out)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("restore of a %s backup left %d entries in the data directory", name, len(ents))
		}
	}

	// Restored into a fresh queue of three.
	dst := newReplicatedWith(t, func(i int, p *proc) {
		if i != 0 {
			return
		}
		cluster := p.args[slices.Index(p.args, "--initial-cluster")+1]
		out, err := exec.Command(binary, "restore", "--from", backupPath, "--data-dir", p.dir, "--name", "m1", "--initial-cluster", cluster).CombinedOutput()
		if err != nil {
			t.Fatalf("restore: %v: %s", err, out)
		}
	})
	dc := dst.client()
	got := map[string]string{}
	for _, q := range queues {
		items, err := dc.List(ctx, q, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 10000)
		if err != nil {
			t.Fatalf("List %s on the restored queue: %v", q, err)
		}
		for _, it := range items {
			got[q+"/"+it.GetKey()] = fmt.Sprintf("state %d attempts %d error %q priority %d", it.GetState(), it.GetAttempts(), it.GetLastError(), it.GetPriority())
		}
	}
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s: restored as %q, the backup holds %q", k, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("the restored queue holds %d keys, the backup %d", len(got), len(want))
	}
	for i, cc := range dst.ccs {
		ml, err := cc.MemberList(ctx, &queuev1.MemberListRequest{})
		if err != nil || len(ml.GetMembers()) != 3 {
			t.Errorf("m%d of the restored queue lists %v (%v), want three members", i+1, ml.GetMembers(), err)
		}
	}
	// It works: a key is leased and acked there.
	ls, err := dc.Lease(ctx, "jobs", queueclient.LeaseOptions{Worker: "w", MaxItems: 1, Duration: time.Minute})
	if err != nil || len(ls) != 1 || ls[0].Key != "high" {
		t.Fatalf("the first lease of the restored queue: %v %v, want the high-priority key", ls, err)
	}
}

func keysOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func flipped(b []byte, at int) []byte {
	b = slices.Clone(b)
	b[at] ^= 0x10
	return b
}

// TestBackupAndRestoreSingle: a single member's backup (ClusterService
// Snapshot answers on a queue of one too) restores into a single member
// that holds the same keys in the same states.
func TestBackupAndRestoreSingle(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	src := newProc(t)
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	qc := queuev1.NewQueueServiceClient(conn)
	if _, err := qc.Add(ctx, &queuev1.AddRequest{Queue: "jobs", Keys: keysOf("k", 30)}); err != nil {
		t.Fatal(err)
	}
	if _, err := qc.Add(ctx, &queuev1.AddRequest{Queue: "jobs", Keys: []string{"later"}, Delay: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	stream, err := queuev1.NewClusterServiceClient(conn).Snapshot(ctx, &queuev1.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		file.Write(m.GetData())
	}
	// From the standard input, as a container that cannot read the
	// host's file is given it.
	dst := newProc(t)
	restore := exec.Command(binary, "restore", "--from", "-", "--data-dir", dst.dir)
	restore.Stdin = bytes.NewReader(file.Bytes())
	if out, err := restore.CombinedOutput(); err != nil || !strings.Contains(string(out), "from the standard input") {
		t.Fatalf("restore --from -: %v: %s", err, out)
	}
	dst.start()
	dconn := dial(t, dst.grpcAddr)
	dst.waitServing(ctx, dconn)
	list := func(qc queuev1.QueueServiceClient) []string {
		t.Helper()
		resp, err := qc.List(ctx, &queuev1.ListRequest{Queue: "jobs", PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range resp.GetItems() {
			out = append(out, fmt.Sprintf("%s %v %v", it.GetKey(), it.GetState(), it.GetNotBefore().AsTime()))
		}
		return out
	}
	if got, want := list(queuev1.NewQueueServiceClient(dconn)), list(qc); !slices.Equal(got, want) || len(got) != 31 {
		t.Fatalf("restored:\n%v\nwant:\n%v", got, want)
	}
}
