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
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// saveBackup takes a backup through cc (ClusterService Snapshot), as
// batonctl queue snapshot save does, into a file, and returns its path.
func saveBackup(t *testing.T, ctx context.Context, cc queuev1.ClusterServiceClient) string {
	t.Helper()
	var file bytes.Buffer
	stream, err := cc.Snapshot(ctx, &queuev1.SnapshotRequest{})
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
	p := filepath.Join(t.TempDir(), "queue.bak")
	if err := os.WriteFile(p, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// restoreInto runs baton-queue restore of file into p's data directory,
// as member name of p's --initial-cluster (a single member if p has none).
func restoreInto(t *testing.T, file string, p *proc) {
	t.Helper()
	args := []string{"restore", "--from", file, "--data-dir", p.dir}
	if i := slices.Index(p.args, "--initial-cluster"); i >= 0 {
		args = append(args, "--name", p.args[slices.Index(p.args, "--name")+1], "--initial-cluster", p.args[i+1])
	}
	if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
}

// stopAndEmpty SIGTERMs p, waits for it, and empties its data directory.
func stopAndEmpty(t *testing.T, p *proc) {
	t.Helper()
	if p.running() {
		if _, err := p.signal(syscall.SIGTERM, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.dir, 0o750); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreKeepsFencing follows the documented restore with a lease
// taken before the save: Add k, lease it (token T1), save a backup, stop
// the three members, empty them, restore the file into the first, start
// the three. The old holder's Ack with T1 must be refused LEASE_LOST, and
// the restored queue's lease of k must carry a token above T1: a queue
// restored from a backup never hands out a token of the queue it was
// taken from.
func TestRestoreKeepsFencing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r := newReplicated(t)
	lead := r.leader(ctx)
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 1, LeaseDuration: durationpb.New(10 * time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("Lease: %v %v", lr, err)
	}
	t1 := lr.GetLeases()[0].GetToken()
	file := saveBackup(t, ctx, r.ccs[lead])
	for _, p := range r.procs {
		stopAndEmpty(t, p)
	}
	restoreInto(t, file, r.procs[0])
	for _, p := range r.procs {
		p.start()
	}
	r.settle()
	lead = r.leader(ctx)
	// A new worker leases k on the restored queue; then the old holder
	// acks with its token from before the backup.
	lr, err = r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w2", MaxItems: 1, LeaseDuration: durationpb.New(time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 || lr.GetLeases()[0].GetKey() != "k" {
		t.Fatalf("Lease on the restored queue: %v %v", lr, err)
	}
	t2 := lr.GetLeases()[0].GetToken()
	ack, err := r.qcs[lead].Ack(ctx, &queuev1.AckRequest{Queue: "q", Acks: []*queuev1.Ack{{Key: "k", Token: t1, Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := ack.GetResults()[0].GetStatus(); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("the restored queue answered %v to an Ack of a lease taken before the backup (token %x), want LEASE_LOST", st, t1)
	}
	if t2 <= t1 {
		t.Errorf("the restored queue leased k with token %x, not above %x, the last token before the backup", t2, t1)
	}
}

// TestRestoreKeepsFencingSingle is TestRestoreKeepsFencing for a single
// member restored into a fresh one, whose run epoch starts over: its
// tokens must be above the backup's all the same.
func TestRestoreKeepsFencingSingle(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	src := newProc(t)
	// Restarts, so that the source's epoch is above a fresh store's.
	for range 3 {
		src.start()
		conn := dial(t, src.grpcAddr)
		src.waitServing(ctx, conn)
		if _, err := queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := src.signal(syscall.SIGTERM, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	qc, cc := queuev1.NewQueueServiceClient(conn), queuev1.NewClusterServiceClient(conn)
	lr, err := qc.Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 1, LeaseDuration: durationpb.New(10 * time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("Lease: %v %v", lr, err)
	}
	t1 := lr.GetLeases()[0].GetToken()
	file := saveBackup(t, ctx, cc)

	dst := newProc(t)
	restoreInto(t, file, dst)
	dst.start()
	dconn := dial(t, dst.grpcAddr)
	dst.waitServing(ctx, dconn)
	dqc := queuev1.NewQueueServiceClient(dconn)
	for range 2 { // the first lease, then one after a restart
		lr, err := dqc.Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w2", MaxItems: 1, LeaseDuration: durationpb.New(time.Second)})
		if err != nil || len(lr.GetLeases()) != 1 {
			t.Fatalf("Lease on the restored member: %v %v", lr, err)
		}
		if t2 := lr.GetLeases()[0].GetToken(); t2 <= t1 {
			t.Errorf("the restored member leased k with token %x, not above %x", t2, t1)
		}
		ack, err := dqc.Ack(ctx, &queuev1.AckRequest{Queue: "q", Acks: []*queuev1.Ack{{Key: "k", Token: t1, Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if st := ack.GetResults()[0].GetStatus(); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
			t.Fatalf("the restored member answered %v to an Ack of a lease taken before the backup, want LEASE_LOST", st)
		}
		if _, err := dst.signal(syscall.SIGTERM, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		dst.start()
		dconn = dial(t, dst.grpcAddr)
		dst.waitServing(ctx, dconn)
		dqc = queuev1.NewQueueServiceClient(dconn)
	}
}

// TestRestoredMemberNeedsAMajority: a member restored from a backup is one
// voter of the whole restored queue. Started alone it elects itself
// leader of nothing and acknowledges no write; once one other member
// starts on an empty directory, the two lead, and the third joins later.
// Restoring the same file twice gives a fresh cluster id and fresh member
// ids each time.
func TestRestoredMemberNeedsAMajority(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	src := newReplicated(t)
	if _, err := src.qcs[src.leader(ctx)].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: keysOf("k", 10)}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, src.ccs[0])

	// Twice into two directories: nothing of the two is the same.
	ids := map[string][]string{}
	for range 2 {
		p := &proc{dir: t.TempDir(), args: src.procs[0].args}
		restoreInto(t, file, p)
		for _, f := range []string{"cluster-id", "member-id"} {
			b, err := os.ReadFile(filepath.Join(p.dir, "raft", f))
			if err != nil {
				t.Fatal(err)
			}
			ids[f] = append(ids[f], string(b))
		}
	}
	for f, v := range ids {
		if v[0] == v[1] {
			t.Errorf("two restores of one file wrote the same %s", f)
		}
	}

	dst := &replicated{t: t}
	var cluster []string
	for i := range 3 {
		addr := freePort(t)
		dst.peers = append(dst.peers, addr)
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, addr))
	}
	for i := range 3 {
		p := newProc(t, "--name", fmt.Sprintf("m%d", i+1), "--peer-addr", dst.peers[i], "--initial-cluster", strings.Join(cluster, ","),
			"--heartbeat-interval", "50ms", "--election-timeout", "500ms")
		dst.procs = append(dst.procs, p)
		conn := dial(t, p.grpcAddr)
		dst.qcs = append(dst.qcs, queuev1.NewQueueServiceClient(conn))
		dst.ccs = append(dst.ccs, queuev1.NewClusterServiceClient(conn))
	}
	restoreInto(t, file, dst.procs[0])
	dst.procs[0].start()
	// Alone for ten election timeouts: no leader, no write acknowledged.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := dst.qcs[0].Add(actx, &queuev1.AddRequest{Queue: "q", Keys: []string{"alone"}})
		acancel()
		if err == nil {
			t.Fatal("the restored member acknowledged an Add alone, one voter of three")
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			t.Fatalf("an Add on the restored member alone: %v, want UNAVAILABLE", err)
		}
	}
	dst.procs[1].start()
	waitLeader(t, ctx, dst, 0, 1)
	resp, err := dst.qcs[1].Stats(ctx, &queuev1.StatsRequest{Queue: "q"})
	if err != nil || resp.GetQueues()[0].GetPending() != 10 {
		t.Fatalf("Stats of the restored queue of two: %v %v, want 10 pending", resp, err)
	}
	dst.procs[2].start()
	dst.settle()
	awaitVoters(t, ctx, dst, 3)
}

// waitLeader waits until each of members knows a leader.
func waitLeader(t *testing.T, ctx context.Context, r *replicated, members ...int) {
	t.Helper()
	for _, i := range members {
		for {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := r.ccs[i].Status(cctx, &queuev1.StatusRequest{})
			cancel()
			if err == nil && st.GetLeaderName() != "" {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("m%d knows no leader: %v %v", i+1, st, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// awaitVoters waits until every running member lists n voters.
func awaitVoters(t *testing.T, ctx context.Context, r *replicated, n int) {
	t.Helper()
	for i, cc := range r.ccs {
		if !r.procs[i].running() {
			continue
		}
		for {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			ml, err := cc.MemberList(cctx, &queuev1.MemberListRequest{})
			cancel()
			voters := 0
			for _, m := range ml.GetMembers() {
				if !m.GetLearner() && m.GetName() != "" {
					voters++
				}
			}
			if err == nil && voters == n {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("m%d lists %v (%v), want %d voters", i+1, ml.GetMembers(), err, n)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// addsDuring tries an Add of a fresh key through each of members for d,
// and returns the keys acknowledged, by member.
func addsDuring(ctx context.Context, r *replicated, d time.Duration, members ...int) map[int][]string {
	acked := map[int][]string{}
	for n, deadline := 0, time.Now().Add(d); time.Now().Before(deadline); n++ {
		for _, i := range members {
			k := fmt.Sprintf("split-%d-%d", i, n)
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := r.qcs[i].Add(actx, &queuev1.AddRequest{Queue: "q", Keys: []string{k}})
			cancel()
			if err == nil {
				acked[i] = append(acked[i], k)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return acked
}

// TestRestoreIntoALiveQueueServesNothing: a backup restored into one
// member of a queue that runs, and that member started among the others,
// serves nothing: it is one voter of a restored queue whose other members
// never start, and the others, members of another queue, refuse it. The
// queue that runs goes on without it.
func TestRestoreIntoALiveQueueServesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	if _, err := c.Add(ctx, "q", keysOf("k", 10), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, r.ccs[0])
	stopAndEmpty(t, r.procs[0])
	restoreInto(t, file, r.procs[0])
	r.procs[0].start()
	if acked := addsDuring(ctx, r, 3*time.Second, 0); len(acked[0]) > 0 {
		t.Fatalf("the restored member, one voter of a queue whose other members never started, acknowledged %d Adds", len(acked[0]))
	}
	// The others lead the queue that runs, with m1's old id still a voter.
	for _, i := range []int{1, 2} {
		if _, err := r.qcs[i].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{fmt.Sprintf("after-%d", i)}}); err != nil {
			t.Fatalf("m%d of the queue that runs: %v", i+1, err)
		}
	}
	st, err := r.ccs[0].Status(ctx, &queuev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetMember().GetLeader() || st.GetLeaderName() != "" {
		t.Fatalf("the restored member, among members of another queue: %v", st)
	}
}

// TestRestoreRepeatedIntoOneMember: a queue restored from a backup runs
// and takes more keys; then one member is stopped, emptied and restored
// again from the same file (an operator repeating a step), and started
// with one other member while the third is down. Neither half may
// acknowledge a write: the member restored again is a queue of its own
// (another cluster id) that no other member joins, and the one left of
// the queue that runs is no majority. When the third returns, the queue
// that runs leads again with every key it held.
func TestRestoreRepeatedIntoOneMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	src := newReplicated(t)
	if _, err := src.client().Add(ctx, "q", keysOf("k", 10), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, src.ccs[0])
	r := newReplicatedWith(t, func(i int, p *proc) {
		if i == 0 {
			restoreInto(t, file, p)
		}
	})
	c := r.client()
	if _, err := c.Add(ctx, "q", keysOf("more", 100), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	stopAndEmpty(t, r.procs[0])
	if _, err := r.procs[2].signal(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	restoreInto(t, file, r.procs[0])
	r.procs[0].start()
	acked := addsDuring(ctx, r, 4*time.Second, 0, 1)
	for i, keys := range acked {
		t.Errorf("m%d acknowledged %d Adds while neither half was a majority", i+1, len(keys))
	}
	r.procs[2].start()
	waitLeader(t, ctx, r, 1, 2)
	// Every key the queue that runs held is there (and an Add that timed
	// out above may be too: it was ambiguous).
	for _, i := range []int{1, 2} {
		resp, err := r.qcs[i].List(ctx, &queuev1.ListRequest{Queue: "q", PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var have []string
		for _, it := range resp.GetItems() {
			have = append(have, it.GetKey())
		}
		for _, k := range append(keysOf("k", 10), keysOf("more", 100)...) {
			if !slices.Contains(have, k) {
				t.Fatalf("through m%d once the third is back, %s is missing (%d keys)", i+1, k, len(have))
			}
		}
	}
}

// TestRestoreRefusesWhatIsNoBackupAtOnce: the standard input of /dev/zero,
// or a backup's first bytes followed by endless zeros, is refused at once
// (the header is read first, then each frame as it comes), and leaves no
// data directory behind.
func TestRestoreRefusesWhatIsNoBackupAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	src := newProc(t)
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	if _, err := queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(saveBackup(t, ctx, queuev1.NewClusterServiceClient(conn)))
	if err != nil {
		t.Fatal(err)
	}
	for name, prefix := range map[string][]byte{"zeros": nil, "a header, then zeros": good[:24]} {
		dir := filepath.Join(t.TempDir(), "data")
		cmd := exec.CommandContext(ctx, binary, "restore", "--from", "-", "--data-dir", dir)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer stdin.Close()
			if _, err := stdin.Write(prefix); err != nil {
				return
			}
			zeros := make([]byte, 64<<10)
			for {
				if _, err := stdin.Write(zeros); err != nil {
					return // the restore ended
				}
			}
		}()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "damaged") || ctx.Err() != nil {
			t.Errorf("restore of %s: %v: %s, want it refused at once as no backup", name, err, out)
		}
		if ents, err := os.ReadDir(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("restore of %s left the data directory with %d entries (%v)", name, len(ents), err)
		}
	}
}

// TestRestoreKilledHalfWayIsRefused: a restore SIGKILLed while it reads
// its input leaves a data directory the queue refuses to start on, naming
// what to do, rather than one it would take for an empty queue.
func TestRestoreKilledHalfWayIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	src := newProc(t)
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	if _, err := queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: keysOf("k", 100)}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(saveBackup(t, ctx, queuev1.NewClusterServiceClient(conn)))
	if err != nil {
		t.Fatal(err)
	}
	dst := newProc(t)
	cmd := exec.CommandContext(ctx, binary, "restore", "--from", "-", "--data-dir", dst.dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// All but the footer, and the pipe kept open: the restore waits for
	// the rest, having begun to write.
	if _, err := stdin.Write(good[:len(good)-20]); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dst.dir, "restore-incomplete")); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the restore never began to write")
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	stdin.Close()
	dst.start()
	if out := dst.waitExit(30 * time.Second); !strings.Contains(out, "did not finish") {
		t.Fatalf("baton-queue on the directory of a restore killed half way: %s", out)
	}
}

// TestRestoreFencesLeasesAfterTheBackup: a lease taken on the backup's
// queue after the backup was saved, under a later leader (a term the
// fence does not cover), is still refused by the restored queue: it
// starts many terms above the fence, so its tokens are not that lease's.
func TestRestoreFencesLeasesAfterTheBackup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r := newReplicated(t)
	lead := r.leader(ctx)
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, r.ccs[lead])
	// Two changes of leader after the backup, then the lease.
	for range 2 {
		to := fmt.Sprintf("m%d", followersOf(r.leader(ctx))[0]+1)
		if _, err := r.ccs[0].MoveLeader(ctx, &queuev1.MoveLeaderRequest{To: to}); err != nil {
			t.Fatalf("MoveLeader to %s: %v", to, err)
		}
	}
	lead = r.leader(ctx)
	lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 1, LeaseDuration: durationpb.New(10 * time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("Lease: %v %v", lr, err)
	}
	stale := lr.GetLeases()[0].GetToken()
	for _, p := range r.procs {
		stopAndEmpty(t, p)
	}
	restoreInto(t, file, r.procs[0])
	for _, p := range r.procs {
		p.start()
	}
	r.settle()
	lead = r.leader(ctx)
	lr, err = r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w2", MaxItems: 1, LeaseDuration: durationpb.New(time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("Lease on the restored queue: %v %v", lr, err)
	}
	if got := lr.GetLeases()[0].GetToken(); got == stale {
		t.Fatalf("the restored queue handed out token %x again, a lease of the old queue taken after the backup", got)
	}
	ack, err := r.qcs[lead].Ack(ctx, &queuev1.AckRequest{Queue: "q", Acks: []*queuev1.Ack{{Key: "x", Token: stale, Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
	if err != nil || ack.GetResults()[0].GetStatus() != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Fatalf("the stale holder's Ack on the restored queue: %v %v, want LEASE_LOST", ack, err)
	}
}

// TestRestoreMisuses: what the procedure meets when a step is done with
// the wrong thing, each refused with what to do, or done right although
// it looks odd.
func TestRestoreMisuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	src := newProc(t)
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	if _, err := queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: keysOf("k", 10)}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, queuev1.NewClusterServiceClient(conn))
	restore := func(stdin io.Reader, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, binary, append([]string{"restore"}, args...)...)
		cmd.Stdin = stdin
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	t.Run("a volume's lost+found is no queue", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := restore(nil, "--from", file, "--data-dir", dir); err != nil {
			t.Fatalf("restore into a directory holding lost+found alone: %v: %s", err, out)
		}
	})
	t.Run("a FIFO is refused at once", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skip(err)
		}
		out, err := restore(nil, "--from", fifo, "--data-dir", filepath.Join(t.TempDir(), "d"))
		if err == nil || !strings.Contains(out, "not a regular file") || ctx.Err() != nil {
			t.Fatalf("restore --from a FIFO: %v: %s", err, out)
		}
	})
	t.Run("the longest member names", func(t *testing.T) {
		long := func(c byte) string { return strings.Repeat(string(c), 253) }
		ic := fmt.Sprintf("%s=127.0.0.1:1,%s=127.0.0.1:2,%s=127.0.0.1:3", long('a'), long('b'), long('c'))
		if out, err := restore(nil, "--from", file, "--data-dir", t.TempDir(), "--name", long('a'), "--initial-cluster", ic); err != nil {
			t.Fatalf("restore with member names of 253 bytes: %v: %s", err, out)
		}
	})
	t.Run("one restore at a time", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		good, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		pr, pw := io.Pipe()
		first := exec.CommandContext(ctx, binary, "restore", "--from", "-", "--data-dir", dir)
		first.Stdin = pr
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = pw.Write(good[:len(good)/2]) }()
		for {
			if _, err := os.Stat(filepath.Join(dir, "restore-incomplete")); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the first restore never began")
			case <-time.After(10 * time.Millisecond):
			}
		}
		out, err := restore(nil, "--from", file, "--data-dir", dir)
		if err == nil || !strings.Contains(out, "in use by another process") {
			t.Errorf("a second restore into a directory a restore is writing: %v: %s", err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "restore-incomplete")); err != nil {
			t.Errorf("the second restore's refusal took the first one's files: %v", err)
		}
		_ = first.Process.Kill()
		pw.Close() // before Wait, which waits for the copy of the standard input
		_ = first.Wait()
		out, err = restore(nil, "--from", file, "--data-dir", dir)
		if err == nil || !strings.Contains(out, "did not finish") {
			t.Errorf("a restore into the directory of one killed half way: %v: %s", err, out)
		}
		rout, err := exec.CommandContext(ctx, binary, "repair", "--data-dir", dir).CombinedOutput()
		if err == nil || !strings.Contains(string(rout), "did not finish") {
			t.Errorf("repair of the directory of a restore killed half way: %v: %s", err, rout)
		}
	})
	t.Run("a replicated member started alone", func(t *testing.T) {
		p := newProc(t, "--name", "m1", "--peer-addr", freePort(t), "--initial-cluster", "m1=127.0.0.1:1,m2=127.0.0.1:2,m3=127.0.0.1:3")
		restoreInto(t, file, p)
		p.args = nil // started as a single member, --initial-cluster forgotten
		p.start()
		if out := p.waitExit(30 * time.Second); !strings.Contains(out, "replicated member's log") {
			t.Fatalf("a single member on a replicated member's directory: %s", out)
		}
		out, err := exec.CommandContext(ctx, binary, "repair", "--data-dir", p.dir).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "replicated member's log") {
			t.Errorf("repair of a replicated member's directory: %v: %s", err, out)
		}
	})
}

// TestRestoredMemberStartedWithAnotherCluster: a restored member started
// with an --initial-cluster other than its restore's is refused, naming
// both, rather than take in a member the restore did not name.
func TestRestoredMemberStartedWithAnotherCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	src := newProc(t)
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	if _, err := queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, queuev1.NewClusterServiceClient(conn))
	peer := freePort(t)
	p := newProc(t, "--name", "m1", "--peer-addr", peer, "--initial-cluster", "m1="+peer+",m2=127.0.0.1:2,m4=127.0.0.1:4")
	restoreInto(t, file, p)
	p.args = []string{"--name", "m1", "--peer-addr", peer, "--initial-cluster", "m1=" + peer + ",m2=127.0.0.1:2,m3=127.0.0.1:3"}
	p.start()
	if out := p.waitExit(30 * time.Second); !strings.Contains(out, "was restored from a backup with --initial-cluster") || !strings.Contains(out, "m4=127.0.0.1:4") {
		t.Fatalf("a restored member started with another --initial-cluster: %s", out)
	}
}

// TestRestoredMemberBesideAnotherQueueTakesNoJoiner: a queue restored
// from a backup runs on m1 and m2 (m3 never started); m1 is stopped,
// emptied and restored again (a step repeated), and started; then m3
// starts on an empty directory. m3 hears two queues, the one m2 holds and
// the one m1 was restored into again, and joins neither: had it taken the
// id the second restore offers, m1 and m3 would serve the backup's state,
// and the writes the queue that ran acknowledged would be gone from view.
func TestRestoredMemberBesideAnotherQueueTakesNoJoiner(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	src := newProc(t)
	src.start()
	conn := dial(t, src.grpcAddr)
	src.waitServing(ctx, conn)
	if _, err := queuev1.NewQueueServiceClient(conn).Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: keysOf("k", 3)}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, ctx, queuev1.NewClusterServiceClient(conn))

	r := &replicated{t: t}
	var cluster []string
	for i := range 3 {
		addr := freePort(t)
		r.peers = append(r.peers, addr)
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, addr))
	}
	for i := range 3 {
		p := newProc(t, "--name", fmt.Sprintf("m%d", i+1), "--peer-addr", r.peers[i], "--initial-cluster", strings.Join(cluster, ","),
			"--heartbeat-interval", "50ms", "--election-timeout", "500ms")
		r.procs = append(r.procs, p)
		conn := dial(t, p.grpcAddr)
		r.qcs = append(r.qcs, queuev1.NewQueueServiceClient(conn))
		r.ccs = append(r.ccs, queuev1.NewClusterServiceClient(conn))
	}
	restoreInto(t, file, r.procs[0])
	r.procs[0].start()
	r.procs[1].start()
	waitLeader(t, ctx, r, 0, 1)
	for _, k := range []string{"ran-1", "ran-2"} {
		if _, err := r.qcs[1].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{k}}); err != nil {
			t.Fatal(err)
		}
	}
	stopAndEmpty(t, r.procs[0])
	restoreInto(t, file, r.procs[0])
	r.procs[0].start()
	r.procs[2].start()
	if acked := addsDuring(ctx, r, 4*time.Second, 0, 2); len(acked) > 0 {
		t.Fatalf("a member acknowledged Adds while m3 heard two queues: %v", acked)
	}
	for !strings.Contains(r.procs[2].log(), "hold another queue and answer") {
		select {
		case <-ctx.Done():
			t.Fatalf("m3 does not say it hears two queues:\n%s", r.procs[2].log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if acked := addsDuring(ctx, r, time.Second, 0, 2); len(acked) > 0 {
		t.Fatalf("a member acknowledged Adds while m3 heard two queues: %v", acked)
	}
}
