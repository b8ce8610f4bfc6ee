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
