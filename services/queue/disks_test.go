package queue_test

import (
	"context"
	"fmt"
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

// TestReplicatedTwoDisksLost is the attack that found two empty members
// forming a new, empty queue: three members hold 1,000 acknowledged keys
// of queue "precious"; all three stop (a reboot); two lose their data
// directories and start while the third, which holds the queue, is still
// down. They must not form a queue: nothing answers NOT_FOUND for
// "precious", nothing acknowledges an Add, and each says whom it waits
// for. The survivor started alone forms nothing either (one of three is no
// majority). The operator's recovery: the survivor restarted with
// --force-new-cluster is a queue of one holding every key, under a new
// cluster id; the two empty members rejoin it; every key is there. A
// member started afterwards on a copy of its old data directory (the old
// queue's log and cluster id) is refused, and the queue goes on without
// it: its damage does not spread.
func TestReplicatedTwoDisksLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	var keys []string
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("precious-%04d", i))
	}
	for i := 0; i < len(keys); i += 100 {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Add(actx, "precious", keys[i:i+100], queueclient.AddOptions{})
		acancel()
		if err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	// The reboot: every member stops; m1 and m2 lose their disks. m1's old
	// directory is kept aside, to come back later as a stale copy.
	for _, p := range r.procs {
		p.signal(syscall.SIGTERM, 30*time.Second)
	}
	stale := filepath.Join(t.TempDir(), "m1-old")
	if out, err := exec.Command("cp", "-a", r.procs[0].dir, stale).CombinedOutput(); err != nil {
		t.Fatalf("copy m1's data directory: %v: %s", err, out)
	}
	for _, i := range []int{0, 1} {
		emptyDir(t, r.procs[i].dir)
		r.procs[i].start()
	}
	// Past the first WARN (5 s of waiting): no queue, nothing acknowledged.
	refuses := func(what string, d time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, i := range []int{0, 1} {
				cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, serr := r.qcs[i].Stats(cctx, &queuev1.StatsRequest{Queue: "precious"})
				_, aerr := r.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: "precious", Keys: []string{"intruder"}})
				ccancel()
				if status.Code(serr) == codes.NotFound {
					t.Fatalf("%s: m%d answers Stats of the queue NOT_FOUND: a new, empty queue was formed", what, i+1)
				}
				if aerr == nil {
					t.Fatalf("%s: m%d acknowledged an Add", what, i+1)
				}
			}
		}
	}
	refuses("m1 and m2 on empty disks, m3 down", 6*time.Second)
	for _, i := range []int{0, 1} {
		if !strings.Contains(r.procs[i].log(), `"waiting_for":"m3"`) {
			t.Errorf("m%d does not say that it waits for m3:\n%s", i+1, r.procs[i].log())
		}
	}
	r.procs[2].start()
	refuses("m3 back alone with the queue", 3*time.Second)

	// The operator's recovery.
	r.procs[2].signal(syscall.SIGTERM, 30*time.Second)
	args := r.procs[2].args
	r.procs[2].args = append(slices.Clone(args), "--force-new-cluster")
	r.procs[2].start()
	r.procs[2].args = args
	r.settle()
	if !strings.Contains(r.procs[2].log(), "force-new-cluster") {
		t.Errorf("m3 does not say it was forced into a queue of one:\n%s", r.procs[2].log())
	}
	wantAll := func(when string) {
		t.Helper()
		got := map[string]bool{}
		items, err := c.List(ctx, "precious", queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 10000)
		if err != nil {
			t.Fatalf("%s: List: %v", when, err)
		}
		for _, it := range items {
			got[it.GetKey()] = true
		}
		missing := 0
		for _, k := range keys {
			if !got[k] {
				missing++
			}
		}
		if missing > 0 || len(got) != len(keys) {
			t.Fatalf("%s: the queue holds %d keys, %d of the 1,000 acknowledged ones missing", when, len(got), missing)
		}
	}
	wantAll("after the recovery")
	// A member that rejoined applies the queue's history from its start,
	// the members of before the recovery among it: it lists three once it
	// has caught up.
	for i, cc := range r.ccs {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ml, err := cc.MemberList(ctx, &queuev1.MemberListRequest{})
			if err == nil && len(ml.GetMembers()) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("m%d's MemberList after the recovery: %v %v, want three members", i+1, ml.GetMembers(), err)
			}
		}
	}

	// m1 comes back on its old data directory, the old queue's log and
	// cluster id: it must not be taken back, nor disturb the others.
	r.procs[0].signal(syscall.SIGTERM, 30*time.Second)
	emptyDir(t, r.procs[0].dir)
	if out, err := exec.Command("cp", "-a", stale+"/.", r.procs[0].dir).CombinedOutput(); err != nil {
		t.Fatalf("restore m1's old data directory: %v: %s", err, out)
	}
	r.procs[0].start()
	for i := range 20 {
		k := fmt.Sprintf("after-%02d", i)
		if !r.addVia(ctx, []int{1, 2}, k) {
			t.Fatalf("with m1 on its old disk, m2 and m3 acknowledge no Add of %s", k)
		}
		keys = append(keys, k)
	}
	lr, err := r.qcs[1].Lease(ctx, &queuev1.LeaseRequest{Queue: "precious", Worker: "w", MaxItems: 1, LeaseDuration: durationpb.New(time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("Lease through m2 with m1 on its old disk: %v %v", lr, err)
	}
	if _, err := r.qcs[1].Ack(ctx, &queuev1.AckRequest{Queue: "precious", Acks: []*queuev1.Ack{{Key: lr.GetLeases()[0].GetKey(), Token: lr.GetLeases()[0].GetToken(), Outcome: &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(0)}}}}); err != nil {
		t.Fatal(err)
	}
	if !r.procs[0].running() {
		t.Fatalf("m1, on the old queue's disk, exited: %v\n%s", r.procs[0].waitErr, r.procs[0].log())
	}
	wantAll("with m1 on its old disk")
	st, err := r.ccs[2].Status(ctx, &queuev1.StatusRequest{})
	if err != nil || st.GetLeaderName() == "m1" {
		t.Fatalf("m3's Status with m1 on its old disk: %v %v", st, err)
	}
	// And the way back for m1: an empty directory; it rejoins.
	r.procs[0].signal(syscall.SIGTERM, 30*time.Second)
	emptyDir(t, r.procs[0].dir)
	r.procs[0].start()
	r.settle()
	wantAll("after m1 rejoined")
	// The flag left set by mistake: m3 restarted with --force-new-cluster
	// again while the others hold the queue must start as it is, not take
	// them out.
	r.procs[2].signal(syscall.SIGTERM, 30*time.Second)
	r.procs[2].args = append(slices.Clone(args), "--force-new-cluster")
	r.procs[2].start()
	r.procs[2].args = args
	r.settle()
	if l := r.procs[2].log(); !strings.Contains(l, "starts as it is") || strings.Contains(l, "this member is now a queue of one") {
		t.Errorf("m3, restarted with the flag left set while the others hold the queue, does not say it starts as it is, or forced again:\n%s", l)
	}
	for i, cc := range r.ccs {
		ml, err := cc.MemberList(ctx, &queuev1.MemberListRequest{})
		if err != nil || len(ml.GetMembers()) != 3 {
			t.Fatalf("m%d's MemberList after m3 restarted with the flag left set: %v %v, want three members", i+1, ml.GetMembers(), err)
		}
	}
	wantAll("after m3 restarted with the flag left set")
}

// emptyDir removes everything in dir, as a lost disk leaves it.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// log is the output of the process's latest run.
func (p *proc) log() string {
	b, _ := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("run-%03d.log", p.n)))
	return string(b)
}

// addVia adds key through the members at idx, trying each in turn until
// one acknowledges it.
func (r *replicated) addVia(ctx context.Context, idx []int, key string) bool {
	for attempt := 0; attempt < 100 && ctx.Err() == nil; attempt++ {
		i := idx[attempt%len(idx)]
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: "precious", Keys: []string{key}})
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestForceNewClusterBesideALiveQueueRefused: --force-new-cluster on a
// member whose two peers run the queue with a leader would make two
// queues, each acknowledging writes the other never sees. The member asks
// first and refuses, naming them; its log is left as it was, and started
// without the flag it rejoins the queue that runs.
func TestForceNewClusterBesideALiveQueueRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	if _, err := c.Add(ctx, "q", keysOf("k", 20), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.procs[2].signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	args := r.procs[2].args
	r.procs[2].args = append(slices.Clone(args), "--force-new-cluster")
	r.procs[2].start()
	r.procs[2].args = args
	out := r.procs[2].waitExit(30 * time.Second)
	for _, want := range []string{"--force-new-cluster refused", "m1", "m2", "leads it"} {
		if !strings.Contains(out, want) {
			t.Fatalf("m3 forced beside two members that lead the queue: its log does not say %q:\n%s", want, out)
		}
	}
	if _, err := c.Add(ctx, "q", []string{"after"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	r.procs[2].start()
	r.settle()
	awaitVoters(t, ctx, r, 3)
	resp, err := r.qcs[2].Stats(ctx, &queuev1.StatsRequest{Queue: "q", Serializable: true})
	for err == nil && resp.GetQueues()[0].GetPending() != 21 {
		time.Sleep(20 * time.Millisecond)
		resp, err = r.qcs[2].Stats(ctx, &queuev1.StatsRequest{Queue: "q", Serializable: true})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestForceNewClusterBesideAHolderRefused: --force-new-cluster on a member
// whose one live peer holds the queue but knows no leader, because the
// member being forced is the vote it lacks (m3 down, m1 stopped, m2 up):
// with it the two are a majority, and forcing would make a queue of m1
// beside the one m2 and m3 lead once m3 is back. The flag refuses; m1
// started without it makes a majority with m2.
func TestForceNewClusterBesideAHolderRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	if _, err := c.Add(ctx, "q", keysOf("k", 5), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 0} {
		if _, err := r.procs[i].signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	args := r.procs[0].args
	r.procs[0].args = append(slices.Clone(args), "--force-new-cluster")
	r.procs[0].start()
	r.procs[0].args = args
	out := r.procs[0].waitExit(30 * time.Second)
	for _, want := range []string{"--force-new-cluster refused", "m2 hold the queue", "without the flag"} {
		if !strings.Contains(out, want) {
			t.Fatalf("m1 forced beside m2, which holds the queue: its log does not say %q:\n%s", want, out)
		}
	}
	r.procs[0].start()
	waitLeader(t, ctx, r, 0, 1)
	if _, err := r.qcs[1].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"after"}}); err != nil {
		t.Fatal(err)
	}
	r.procs[2].start()
	r.settle()
	awaitVoters(t, ctx, r, 3)
}
