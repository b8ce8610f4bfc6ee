package queue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// previousRelease is the commit of this repository the upgrade test
// starts from: the queue as it last shipped before the formats of package
// format were versioned, one version back. Move it forward when a release
// ships (and keep the test passing from it: an upgrade is by one version).
const previousRelease = "a191d396ff79b1234b2c00f7e3f9b306bc2069ca"

// buildRelease builds baton-queue at commit from this repository's history
// (git archive of the whole tree, since the queue's module replaces its
// siblings by relative paths), once per test binary.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): the upgrade test builds an earlier release from its history", err)
	}
	top := strings.TrimSpace(string(root))
	if out, err := exec.Command("git", "-C", top, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("commit %s is not in this repository's history (a shallow clone?): %v %s", commit, err, out)
	}
	dir := filepath.Join(os.TempDir(), "baton-release-"+commit[:12])
	bin := filepath.Join(dir, "baton-queue")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o750); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", top, commit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v %s", commit, err, out)
	}
	build := exec.Command("go", "build", "-o", bin+".tmp", "./cmd/baton-queue")
	build.Dir = filepath.Join(src, "services", "queue")
	build.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build baton-queue at %s: %v %s", commit, err, out)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestRollingUpgradeAndRollback runs three members of the previous release
// under load (adders, and a worker that leases and acks), replaces them one
// at a time with this build, the leader last, checking at each step that
// the mixed queue answers and acknowledges, then rolls one member back to
// the previous release, which must read what this build wrote. Nothing
// acknowledged is lost, and every member ends with the same state.
func TestRollingUpgradeAndRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier release")
	}
	old := buildRelease(t, previousRelease)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	r := newReplicatedWith(t, func(_ int, p *proc) { p.bin = old })
	c := r.client()

	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		done  = map[string]bool{} // acked by the worker: gone for good
		// leased, then an Ack whose answer did not come: it may have
		// landed, and the key may be gone
		maybe = map[string]bool{}
		wg    sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				k := fmt.Sprintf("w%d-%06d", w, i)
				actx, acancel := context.WithTimeout(loadCtx, 10*time.Second)
				_, err := c.Add(actx, "q", []string{k}, queueclient.AddOptions{})
				acancel()
				if err == nil {
					mu.Lock()
					acked[k] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		for loadCtx.Err() == nil {
			lctx, lcancel := context.WithTimeout(loadCtx, 5*time.Second)
			// Short leases: a lease granted as the load stops, its answer
			// lost, lapses before the end's count.
			leases, err := c.Lease(lctx, "q", queueclient.LeaseOptions{Worker: "w", MaxItems: 10, Duration: 2 * time.Second, Wait: time.Second})
			if err == nil && len(leases) > 0 {
				var acks []queueclient.Ack
				for _, l := range leases {
					acks = append(acks, queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()})
				}
				res, err := c.Ack(lctx, "q", acks)
				mu.Lock()
				for _, l := range leases {
					maybe[l.Key] = maybe[l.Key] || err != nil
				}
				for _, rr := range res {
					if rr.Status == queueclient.OK {
						done[rr.Key] = true
					}
				}
				mu.Unlock()
			}
			lcancel()
		}
	})
	progress := func(what string) {
		t.Helper()
		mu.Lock()
		before := len(acked)
		mu.Unlock()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= before+50 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no Adds acknowledged for 30 s", what)
			}
		}
	}
	restart := func(i int, bin, what string) {
		t.Helper()
		if _, err := r.procs[i].signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatalf("%s: m%d exited with %v", what, i+1, err)
		}
		r.procs[i].bin = bin
		r.procs[i].start()
		r.settle()
		progress(what)
	}
	progress("the previous release")
	lead := r.leader(ctx)
	order := append(followersOf(lead), lead)
	for step, i := range order {
		restart(i, binary, fmt.Sprintf("upgrade %d of 3 (m%d)", step+1, i+1))
	}
	// Every member on this build now; one goes back.
	restart(order[0], old, fmt.Sprintf("rollback of m%d", order[0]+1))
	stopLoad()
	wg.Wait()

	// Leases granted as the load stopped lapse first.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Stats(ctx, "q")
		if err == nil && len(st) == 1 && st[0].GetLeased() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys still leased 20 s after the load stopped: %v %v", st, err)
		}
	}
	offered := offeredBy(t, ctx, c)
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for k := range acked {
		if !offered[k] && !done[k] && !maybe[k] {
			lost++
			if lost <= 10 {
				t.Errorf("%s: acknowledged, not acked by the worker, and not offered after the upgrade", k)
			}
		}
	}
	t.Logf("%d Adds acknowledged, %d acked by the worker, %d offered at the end, through 3 upgrades and a rollback", len(acked), len(done), len(offered))
	if lost > 0 {
		t.Fatalf("%d acknowledged keys lost", lost)
	}
	// The members agree: each has applied as far as the leader committed.
	st, err := r.ccs[r.leader(ctx)].Status(ctx, &queuev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// With a member of the previous release, which says no level, the
	// queue's level is 1 (a leader of the previous release says none).
	if l := st.GetClusterFormatLevel(); l > 1 {
		t.Errorf("the queue's format level with a member of the previous release is %d, want at most 1", l)
	}
	for i, cc := range r.ccs {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ms, err := cc.Status(ctx, &queuev1.StatusRequest{})
			if err == nil && ms.GetMember().GetAppliedIndex() >= st.GetCommitIndex() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("m%d has not applied the leader's commit %d: %v %v", i+1, st.GetCommitIndex(), ms, err)
			}
		}
	}
}
