package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// replicated is three baton-queue processes of one replicated queue, with
// 50 ms heartbeats and a 500 ms election timeout, and a client of each.
type replicated struct {
	t     *testing.T
	procs []*proc
	qcs   []queuev1.QueueServiceClient
	ccs   []queuev1.ClusterServiceClient
}

func newReplicated(t *testing.T) *replicated {
	r := &replicated{t: t}
	peers := make([]string, 3)
	var cluster []string
	for i := range peers {
		peers[i] = freePort(t)
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, peers[i]))
	}
	for i := range peers {
		p := newProc(t, "--name", fmt.Sprintf("m%d", i+1), "--peer-addr", peers[i], "--initial-cluster", strings.Join(cluster, ","),
			"--heartbeat-interval", "50ms", "--election-timeout", "500ms")
		p.start()
		conn := dial(t, p.grpcAddr)
		r.procs = append(r.procs, p)
		r.qcs = append(r.qcs, queuev1.NewQueueServiceClient(conn))
		r.ccs = append(r.ccs, queuev1.NewClusterServiceClient(conn))
	}
	return r
}

// notLeader reports whether err is a member's refusal for not leading, or
// a member that is down: the caller tries another.
func notLeader(err error) bool { return status.Code(err) == codes.Unavailable }

// leader waits for a running member that answers an Add (to the queue
// "probe"), and returns its index.
func (r *replicated) leader(ctx context.Context) int {
	r.t.Helper()
	for {
		for i, p := range r.procs {
			if !p.running() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := r.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: "probe", Keys: []string{"p"}})
			cancel()
			if err == nil {
				return i
			}
			if !notLeader(err) && status.Code(err) != codes.DeadlineExceeded {
				r.t.Fatalf("member %d: %v", i+1, err)
			}
		}
		if ctx.Err() != nil {
			r.t.Fatal("no member leads")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// add adds key through whichever member leads, trying each in turn; it
// returns whether a member acknowledged it.
func (r *replicated) add(ctx context.Context, key string) bool {
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		i := attempt % len(r.procs)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: "q", Keys: []string{key}})
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// TestReplicatedQueueSurvivesLeaderKills: three real processes under two
// concurrent adders; the leader, holding leases, is SIGKILLed ten times
// (and restarted from its disk before the next kill). After each kill a
// new leader is elected, and the tokens of the killed leader get
// LEASE_LOST there. At the end, every Add a member acknowledged is offered
// by the leader.
func TestReplicatedQueueSurvivesLeaderKills(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r := newReplicated(t)
	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-%06d", w, i)
				if r.add(ctx, k) {
					mu.Lock()
					acked[k] = true
					mu.Unlock()
				}
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	for kill := range 10 {
		lead := r.leader(ctx)
		before := count()
		for count() < before+50 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 3, LeaseDuration: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatalf("kill %d: Lease on the leader m%d: %v", kill, lead+1, err)
		}
		r.procs[lead].signal(syscall.SIGKILL, 10*time.Second)
		next := r.leader(ctx)
		var acks []*queuev1.Ack
		for _, l := range lr.GetLeases() {
			acks = append(acks, &queuev1.Ack{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}})
		}
		if len(acks) > 0 {
			ar, err := r.qcs[next].Ack(ctx, &queuev1.AckRequest{Queue: "q", Acks: acks})
			if err != nil {
				t.Fatalf("kill %d: Ack on the new leader m%d: %v", kill, next+1, err)
			}
			for _, res := range ar.GetResults() {
				if res.GetStatus() != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
					t.Errorf("kill %d: the killed leader's token for %s: %v on the new leader, want LEASE_LOST", kill, res.GetKey(), res.GetStatus())
				}
			}
		}
		r.procs[lead].start()
	}
	close(stop)
	wg.Wait()

	lead := r.leader(ctx)
	offered := map[string]bool{}
	for {
		lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "check", MaxItems: 10000, LeaseDuration: durationpb.New(5 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if len(lr.GetLeases()) == 0 {
			break
		}
		for _, l := range lr.GetLeases() {
			offered[l.GetKey()] = true
		}
	}
	lost := 0
	for k := range acked {
		if !offered[k] {
			lost++
			if lost <= 10 {
				t.Errorf("%s: acknowledged, never acked, not offered after the kills", k)
			}
		}
	}
	t.Logf("%d Adds acknowledged over 10 leader kills, %d offered at the end, %d lost", len(acked), len(offered), lost)
	if lost > 0 {
		t.Fatalf("%d acknowledged keys lost", lost)
	}
}
