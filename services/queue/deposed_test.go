package queue_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestReplicatedResumedLeaderAnswersNothingStale freezes the leader with
// SIGSTOP past the election timeout, so that the others elect a new
// leader, which acknowledges an Add; then it resumes the old leader and
// calls it at once, before it has heard of the new term: for a few hundred
// milliseconds it still believes it leads. In that window it must answer
// no read from its old memory (Inspect of the new key ABSENT, Stats
// without it), and an Ack carrying a token it issued must be refused as a
// retryable UNAVAILABLE with a reason, or as LEASE_LOST, never INTERNAL
// and never OK: the new leader has offered that key again. Each round
// stops the leader of the moment, five rounds in all.
func TestReplicatedResumedLeaderAnswersNothingStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	r := newReplicated(t)
	for round := range 5 {
		old := r.leader(ctx)
		key := fmt.Sprintf("held-%d", round)
		if _, err := r.qcs[old].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{key}}); err != nil {
			t.Fatal(err)
		}
		lr, err := r.qcs[old].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 100, LeaseDuration: durationpb.New(10 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		var held *queuev1.Lease
		for _, l := range lr.GetLeases() {
			if l.GetKey() == key {
				held = l
			}
		}
		if held == nil {
			t.Fatalf("round %d: %s was not leased: %v", round, key, lr.GetLeases())
		}

		if err := r.procs[old].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		resume := func() {
			if stopped {
				stopped = false
				_ = r.procs[old].cmd.Process.Signal(syscall.SIGCONT)
			}
		}
		defer resume()
		fresh := fmt.Sprintf("fresh-%d", round)
		next := addThroughAnother(t, ctx, r, old, fresh)
		// The new leader's word: the fresh key is there, and Stats counts it.
		st, err := r.qcs[next].Stats(ctx, &queuev1.StatsRequest{Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		want := st.GetQueues()[0].GetAddsTotal()

		resume()
		var wg sync.WaitGroup
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		wg.Go(func() {
			resp, err := r.qcs[old].Inspect(cctx, &queuev1.InspectRequest{Queue: "q", Key: fresh})
			if err == nil && resp.GetItem().GetState() != queuev1.ItemState_ITEM_STATE_PENDING {
				t.Errorf("round %d: the resumed leader's Inspect of %s, which the new leader acknowledged: %v", round, fresh, resp.GetItem().GetState())
			}
			checkRefusal(t, fmt.Sprintf("round %d: Inspect on the resumed leader", round), err)
		})
		wg.Go(func() {
			resp, err := r.qcs[old].Stats(cctx, &queuev1.StatsRequest{Queue: "q"})
			if err == nil && resp.GetQueues()[0].GetAddsTotal() < want {
				t.Errorf("round %d: the resumed leader's Stats counts %d adds, the new leader %d", round, resp.GetQueues()[0].GetAddsTotal(), want)
			}
			checkRefusal(t, fmt.Sprintf("round %d: Stats on the resumed leader", round), err)
		})
		wg.Go(func() {
			resp, err := r.qcs[old].Ack(cctx, &queuev1.AckRequest{Queue: "q", Acks: []*queuev1.Ack{{
				Key: held.GetKey(), Token: held.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}},
			}}})
			if err == nil && resp.GetResults()[0].GetStatus() != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
				t.Errorf("round %d: the resumed leader answered %v to an Ack of its own token, after another member led", round, resp.GetResults()[0].GetStatus())
			}
			checkRefusal(t, fmt.Sprintf("round %d: Ack on the resumed leader", round), err)
		})
		wg.Wait()
		ccancel()
	}
}

// addThroughAnother adds key through a member other than old, retrying
// until one of them leads and acknowledges it, and returns that member.
func addThroughAnother(t *testing.T, ctx context.Context, r *replicated, old int, key string) int {
	t.Helper()
	for ctx.Err() == nil {
		for _, i := range followersOf(old) {
			actx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := r.ccs[i].Status(actx, &queuev1.StatusRequest{})
			if err == nil && st.GetMember().GetLeader() {
				_, err = r.qcs[i].Add(actx, &queuev1.AddRequest{Queue: "q", Keys: []string{key}})
				cancel()
				if err == nil {
					return i
				}
				continue
			}
			cancel()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no other member than m%d acknowledged %s", old+1, key)
	return -1
}

// checkRefusal fails t unless err is nil or a refusal a client retries:
// UNAVAILABLE carrying a reason (NOT_LEADER, LEADERSHIP_LOST), or the
// deadline.
func checkRefusal(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	switch r := reasonOf(err); {
	case status.Code(err) == codes.Unavailable && (r == queueclient.ReasonNotLeader || r == queueclient.ReasonLeadershipLost):
	case status.Code(err) == codes.DeadlineExceeded:
		t.Errorf("%s: no answer within 10 s", what)
	default:
		t.Errorf("%s: %v, want UNAVAILABLE with reason NOT_LEADER or LEADERSHIP_LOST", what, err)
	}
}

// reasonOf is the reason of the queue's ErrorInfo in err's status, if any.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == queueclient.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// TestReplicatedResumedLeaderConfirmsNoOps: an operation that changes
// nothing writes no entry, so nothing in its own commit proves that the
// member still leads. A leader frozen by SIGSTOP while the others elect
// another, which changes the queue, and resumed, still believes it leads
// for a moment; whatever it answers then from its memory must be the
// queue's truth or a retryable refusal. Each round, with the old leader
// frozen, the new leader forgets a key the old one holds pending, adds one
// the old one never saw, and leases two more; then the calls that the old
// leader's memory would answer as no-ops go to it on connections dialed
// before (sent while it is still stopped, so that it reads them as it
// wakes): an Add of the forgotten key (its memory: collapsed, the truth:
// absent, so it must be queued), a Forget of the key it never saw (its
// memory: nothing, the truth: one), an Extend and an Ack of a lease the
// new leader granted (its memory: not live, the truth: live).
func TestReplicatedResumedLeaderConfirmsNoOps(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	r := newReplicated(t)
	for round := range 6 {
		old := r.leader(ctx)
		gone, unseen := fmt.Sprintf("gone-%d", round), fmt.Sprintf("unseen-%d", round)
		ext, ack := fmt.Sprintf("extend-%d", round), fmt.Sprintf("ack-%d", round)
		if _, err := r.qcs[old].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{gone}}); err != nil {
			t.Fatal(err)
		}
		// Wait until the others have applied it: the new leader must hold
		// it to forget it.
		for _, i := range followersOf(old) {
			waitLocal(t, ctx, r, i, gone, queuev1.ItemState_ITEM_STATE_PENDING)
		}

		if err := r.procs[old].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := true
		resume := func() {
			if stopped {
				stopped = false
				_ = r.procs[old].cmd.Process.Signal(syscall.SIGCONT)
			}
		}
		defer resume()
		next := addThroughAnother(t, ctx, r, old, unseen)
		if resp, err := r.qcs[next].Forget(ctx, &queuev1.ForgetRequest{Queue: "q", Keys: []string{gone}}); err != nil || resp.GetForgotten() != 1 {
			t.Fatalf("round %d: Forget %s on the new leader: %v %v", round, gone, resp, err)
		}
		if _, err := r.qcs[next].Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{ext, ack}}); err != nil {
			t.Fatal(err)
		}
		tokens := map[string]uint64{}
		for len(tokens) < 2 {
			lr, err := r.qcs[next].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 100, LeaseDuration: durationpb.New(10 * time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range lr.GetLeases() {
				if l.GetKey() == ext || l.GetKey() == ack {
					tokens[l.GetKey()] = l.GetToken()
				}
			}
		}

		var (
			wg           sync.WaitGroup
			addedGone    bool
			extendAnswer []*queuev1.ExtendResult
			ackAnswer    queuev1.AckStatus
		)
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		what := fmt.Sprintf("round %d: on the resumed leader m%d", round, old+1)
		wg.Go(func() {
			resp, err := r.qcs[old].Add(cctx, &queuev1.AddRequest{Queue: "q", Keys: []string{gone}})
			if err == nil && resp.GetQueued() != 1 {
				t.Errorf("%s, Add of %s, which the new leader forgot: queued %d, collapsed %d", what, gone, resp.GetQueued(), resp.GetCollapsed())
			}
			addedGone = err == nil
			checkRefusal(t, what+", Add", err)
		})
		wg.Go(func() {
			resp, err := r.qcs[old].Forget(cctx, &queuev1.ForgetRequest{Queue: "q", Keys: []string{unseen}})
			if err == nil && resp.GetForgotten() != 1 {
				t.Errorf("%s, Forget of %s, which the new leader holds: forgot %d", what, unseen, resp.GetForgotten())
			}
			checkRefusal(t, what+", Forget", err)
		})
		wg.Go(func() {
			resp, err := r.qcs[old].Extend(cctx, &queuev1.ExtendRequest{Queue: "q", Leases: []*queuev1.LeaseRef{{Key: ext, Token: tokens[ext]}}})
			if err == nil {
				extendAnswer = resp.GetResults()
			}
			checkRefusal(t, what+", Extend", err)
		})
		wg.Go(func() {
			resp, err := r.qcs[old].Ack(cctx, &queuev1.AckRequest{Queue: "q", Acks: []*queuev1.Ack{{
				Key: ack, Token: tokens[ack], Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}},
			}}})
			if err == nil {
				ackAnswer = resp.GetResults()[0].GetStatus()
			}
			checkRefusal(t, what+", Ack", err)
		})
		// The calls go out while the old leader is still stopped, so that
		// it reads them as it wakes, before it hears of the new term. The
		// pause only makes that likelier; nothing waits on it.
		time.Sleep(50 * time.Millisecond)
		resume()
		wg.Wait()
		ccancel()

		// What the queue holds now, on whichever member leads.
		lead := r.leader(ctx)
		resp, err := r.qcs[lead].Inspect(ctx, &queuev1.InspectRequest{Queue: "q", Key: gone})
		if err != nil {
			t.Fatal(err)
		}
		if addedGone && resp.GetItem().GetState() != queuev1.ItemState_ITEM_STATE_PENDING {
			t.Errorf("round %d: %s was acknowledged as added on the resumed leader, and the queue holds it %v", round, gone, resp.GetItem().GetState())
		}
		// The old leader cannot know the new leader's leases. An answer
		// is either the new leader's (the old one, a follower by then,
		// handed the call on) or wrong, and the leader's state now tells
		// which: a lease the old one called lost must be lost (as after
		// another change of leader); an Ack it answered OK must have
		// taken the lease (the leader now refuses the same token).
		if extendAnswer != nil {
			now, err := r.qcs[lead].Extend(ctx, &queuev1.ExtendRequest{Queue: "q", Leases: []*queuev1.LeaseRef{{Key: ext, Token: tokens[ext]}}})
			if err != nil {
				t.Fatal(err)
			}
			if extendAnswer[0].GetStatus() == queuev1.AckStatus_ACK_STATUS_LEASE_LOST && now.GetResults()[0].GetStatus() == queuev1.AckStatus_ACK_STATUS_OK {
				t.Errorf("%s, Extend of a lease the new leader granted: %v; the leader now: %v", what, extendAnswer, now.GetResults())
			}
		}
		if ackAnswer != queuev1.AckStatus_ACK_STATUS_UNSPECIFIED {
			now, err := r.qcs[lead].Ack(ctx, &queuev1.AckRequest{Queue: "q", Acks: []*queuev1.Ack{{
				Key: ack, Token: tokens[ack], Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if now.GetResults()[0].GetStatus() == queuev1.AckStatus_ACK_STATUS_OK {
				t.Errorf("%s, Ack of a lease the new leader granted: %v, yet the lease was live on the leader after it", what, ackAnswer)
			}
		}
		// Clear the round's keys for the next.
		if _, err := r.qcs[lead].Forget(ctx, &queuev1.ForgetRequest{Queue: "q", Keys: []string{gone, unseen, ext, ack}}); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
}

// waitLocal waits until member i's own state (a serializable Inspect)
// shows key in state.
func waitLocal(t *testing.T, ctx context.Context, r *replicated, i int, key string, state queuev1.ItemState) {
	t.Helper()
	for {
		resp, err := r.qcs[i].Inspect(ctx, &queuev1.InspectRequest{Queue: "q", Key: key, Serializable: true})
		if err == nil && resp.GetItem().GetState() == state {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("m%d never showed %s %v: %v %v", i+1, key, state, resp, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
