package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// TestReplicatedMoveLeaderAndRollingRestart: MoveLeader asked of a
// follower (handed on to the leader) moves leadership to the member named;
// then, under two adders, every member in turn is stopped with SIGTERM and
// started again. A leader told to stop hands its leadership over first
// (its log says so) and exits cleanly. Nothing acknowledged is lost. The
// longest time between two acknowledged Adds while each member restarts
// is what a client sees of the restart; it is logged, not asserted (the
// machine is shared), and docs/operations.md reports it.
func TestReplicatedMoveLeaderAndRollingRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	r := newReplicated(t, "--log-level", "info") // the handover's line is INFO
	lead := r.leader(ctx)
	f := followersOf(lead)
	to := fmt.Sprintf("m%d", f[1]+1)
	resp, err := r.ccs[f[0]].MoveLeader(ctx, &queuev1.MoveLeaderRequest{To: to})
	if err != nil || resp.GetLeaderName() != to {
		t.Fatalf("MoveLeader to %s, asked of a follower: %v %v", to, resp, err)
	}
	if st, err := r.ccs[f[1]].Status(ctx, &queuev1.StatusRequest{}); err != nil || !st.GetMember().GetLeader() {
		t.Fatalf("after MoveLeader %s does not lead: %v %v", to, st, err)
	}

	c := r.client()
	var (
		mu     sync.Mutex
		acked  []string
		ackAt  []time.Time
		wg     sync.WaitGroup
		failed error
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				k := fmt.Sprintf("w%d-%06d", w, i)
				actx, acancel := context.WithTimeout(loadCtx, 10*time.Second)
				_, err := c.Add(actx, "q", []string{k}, queueclient.AddOptions{})
				acancel()
				mu.Lock()
				if err == nil {
					acked, ackAt = append(acked, k), append(ackAt, time.Now())
				} else if loadCtx.Err() == nil && failed == nil {
					failed = fmt.Errorf("Add %s: %w", k, err)
				}
				mu.Unlock()
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitAcks := func(n int) {
		t.Helper()
		for before := count(); count() < before+n; time.Sleep(5 * time.Millisecond) {
			if ctx.Err() != nil {
				t.Fatal("the load stalled")
			}
		}
	}
	waitAcks(100)
	var gaps []string
	for round := range 3 {
		lead := r.leader(ctx)
		// The leader first, then each follower: every kind of restart.
		victim := (lead + round) % 3
		wasLeader := victim == lead
		start := time.Now()
		if _, err := r.procs[victim].signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatalf("m%d exited with %v after SIGTERM", victim+1, err)
		}
		if wasLeader && !strings.Contains(r.procs[victim].log(), "handed leadership over") {
			t.Errorf("m%d led and stopped without handing leadership over:\n%s", victim+1, r.procs[victim].log())
		}
		r.procs[victim].start()
		r.settle()
		waitAcks(100)
		mu.Lock()
		gap := time.Duration(0)
		for i := 1; i < len(ackAt); i++ {
			if ackAt[i].After(start) && ackAt[i].Sub(ackAt[i-1]) > gap {
				gap = ackAt[i].Sub(ackAt[i-1])
			}
		}
		mu.Unlock()
		gaps = append(gaps, fmt.Sprintf("m%d (leader %v): longest gap between acknowledged Adds %v", victim+1, wasLeader, gap.Round(time.Millisecond)))
	}
	stopLoad()
	wg.Wait()
	if failed != nil {
		t.Errorf("an Add failed during the rolling restart: %v", failed)
	}
	for _, g := range gaps {
		t.Log(g)
	}
	offered := offeredBy(t, ctx, c)
	lost := 0
	for _, k := range acked {
		if !offered[k] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged keys lost over the restarts", lost, len(acked))
	}
}

// TestReplicatedUnreachableMemberShown: the leader's MemberList marks a
// member it no longer hears from (SIGKILLed) as unreachable, within an
// election timeout or so, and stops once it is back; a follower's list
// knows nothing of reachability and marks none.
func TestReplicatedUnreachableMemberShown(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	lead := r.leader(ctx)
	f := followersOf(lead)
	victim := fmt.Sprintf("m%d", f[0]+1)
	unreachable := func(i int) map[string]bool {
		t.Helper()
		ml, err := r.ccs[i].MemberList(ctx, &queuev1.MemberListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, m := range ml.GetMembers() {
			out[m.GetName()] = m.GetUnreachable()
		}
		return out
	}
	r.procs[f[0]].signal(syscall.SIGKILL, 10*time.Second)
	for deadline := time.Now().Add(20 * time.Second); !unreachable(lead)[victim]; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the leader does not mark %s, killed, unreachable: %v", victim, unreachable(lead))
		}
	}
	if u := unreachable(f[1]); u[victim] {
		t.Errorf("a follower marks %s unreachable, which only the leader can know: %v", victim, u)
	}
	r.procs[f[0]].start()
	for deadline := time.Now().Add(30 * time.Second); unreachable(lead)[victim]; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the leader still marks %s unreachable after it restarted", victim)
		}
	}
}
