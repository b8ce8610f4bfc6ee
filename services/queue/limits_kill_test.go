package queue_test

import (
	"context"
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMaxValuesSurviveKill writes the largest value the API takes into
// every field through the real baton-queue, SIGKILLs it and starts it again
// on the same data: it must start, and every key must be where it was. It
// replays the sequence that once made the queue refuse to start (Add,
// Lease, an Ack whose failure error is 3 MiB, kill -9, restart).
// The request limit is raised so the 3 MiB error reaches the server; by
// default gRPC refuses such a request whole.
func TestMaxValuesSurviveKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p := newProc(t, "--max-request-bytes", fmt.Sprint(16<<20))
	p.start()
	conn := dial(t, p.grpcAddr)
	p.waitServing(ctx, conn)
	qc := queuev1.NewQueueServiceClient(conn)

	queue := strings.Repeat("q", limits.MaxQueueNameBytes)
	longKey := func(i int) string {
		k := fmt.Sprintf("%04d/", i)
		return k + strings.Repeat("é", (limits.MaxKeyBytes-len(k))/2)
	}
	many := make([]string, limits.MaxBatch)
	for i := range many {
		many[i] = fmt.Sprintf("ns/k%05d", i)
	}
	long := make([]string, 1000) // 1 MB of keys of 1023 or 1024 bytes
	for i := range long {
		long[i] = longKey(i)
	}
	source := strings.Repeat("s", limits.MaxNameBytes)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := qc.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: many, Priority: queuev1.Priority_PRIORITY_LOW, Source: source})
	must("add 10,000 keys", err)
	_, err = qc.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"later/max"}, Delay: durationpb.New(limits.MaxDelay), Source: source})
	must("add with the longest delay", err)
	lr, err := qc.Lease(ctx, &queuev1.LeaseRequest{Queue: queue, Worker: strings.Repeat("w", limits.MaxNameBytes), MaxItems: 4, LeaseDuration: durationpb.New(limits.MaxLease)})
	must("lease", err)
	if len(lr.GetLeases()) != 4 {
		t.Fatalf("leased %d keys, want 4", len(lr.GetLeases()))
	}
	_, err = qc.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: long, Priority: queuev1.Priority_PRIORITY_HIGH, Source: source})
	must("add 1,000 keys of 1 KiB", err)

	stack := strings.Repeat("goroutine 7 [running]:\nmain.reconcile()\n", 3<<20/40)
	ls := lr.GetLeases()
	acks := []*queuev1.Ack{
		{Key: ls[0].GetKey(), Token: ls[0].GetToken(), Outcome: &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: stack}}},
		{Key: ls[1].GetKey(), Token: ls[1].GetToken(), Outcome: &queuev1.Ack_Terminal{Terminal: &queuev1.AckTerminal{Error: "bad \xff\xfe bytes"}}},
		{Key: ls[2].GetKey(), Token: ls[2].GetToken(), Outcome: &queuev1.Ack_Terminal{Terminal: &queuev1.AckTerminal{Error: strings.Repeat("é", limits.MaxErrorBytes/2)}}},
		{Key: ls[3].GetKey(), Token: ls[3].GetToken(), Outcome: &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(limits.MaxDelay)}},
	}
	ar, err := qc.Ack(ctx, &queuev1.AckRequest{Queue: queue, Acks: acks})
	must("ack", err)
	for i, r := range ar.GetResults() {
		if r.GetStatus() != queuev1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("ack %d: %v", i, r.GetStatus())
		}
	}
	before := map[string]*queuev1.Item{}
	for _, k := range []string{ls[0].GetKey(), ls[1].GetKey(), ls[2].GetKey(), ls[3].GetKey(), "later/max", long[999]} {
		r, err := qc.Inspect(ctx, &queuev1.InspectRequest{Queue: queue, Key: k})
		must("inspect", err)
		before[k] = r.GetItem()
	}
	if e := before[ls[0].GetKey()].GetLastError(); len(e) > limits.MaxErrorBytes || !strings.HasSuffix(e, fmt.Sprintf("[truncated from %d bytes]", len(stack))) {
		t.Fatalf("the 3 MiB error was stored as %d bytes ending %q", len(e), e[max(0, len(e)-40):])
	}
	if e := before[ls[1].GetKey()].GetLastError(); e != "bad \uFFFD bytes" {
		t.Fatalf("an error that is not UTF-8 was stored as %q", e)
	}
	year := time.Now().Add(limits.MaxDelay - time.Hour)
	for _, k := range []string{"later/max", ls[3].GetKey()} {
		if nb := before[k].GetNotBefore().AsTime(); before[k].GetState() != queuev1.ItemState_ITEM_STATE_DELAYED || nb.Before(year) {
			t.Fatalf("%s: %v not before %v, want delayed for a year", k, before[k].GetState(), nb)
		}
	}

	if _, err := p.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("baton-queue exited cleanly on SIGKILL")
	}
	p.start()
	p.waitServing(ctx, conn)
	for k, was := range before {
		r, err := qc.Inspect(ctx, &queuev1.InspectRequest{Queue: queue, Key: k})
		must("inspect after the restart", err)
		got := r.GetItem()
		// A backoff of a few milliseconds has passed by now; a year has not.
		longDelay := was.GetNotBefore().AsTime().After(year)
		if got.GetLastError() != was.GetLastError() || got.GetAttempts() != was.GetAttempts() || (longDelay && !got.GetNotBefore().AsTime().Equal(was.GetNotBefore().AsTime())) {
			t.Errorf("%.20s… after the restart: %v attempts, not before %v, error %.40q; before: %v, %v, %.40q", k,
				got.GetAttempts(), got.GetNotBefore().AsTime(), got.GetLastError(), was.GetAttempts(), was.GetNotBefore().AsTime(), was.GetLastError())
		}
	}
	st, err := qc.Stats(ctx, &queuev1.StatsRequest{Queue: queue})
	must("stats", err)
	q := st.GetQueues()[0]
	if held := q.GetPending() + q.GetDelayed() + q.GetParked(); held != uint64(len(many)+len(long)+1) {
		t.Errorf("%d keys after the restart, want %d", held, len(many)+len(long)+1)
	}
}
