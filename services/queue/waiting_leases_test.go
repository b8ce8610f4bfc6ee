package queue_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMaxWaitingLeasesFlag: the real baton-queue with
// --max-waiting-leases-per-conn 1 lets one connection wait on one Lease at
// a time: a second gets RESOURCE_EXHAUSTED naming the bound, a Lease that
// does not wait still passes, and once the first has its key a new one
// waits again.
func TestMaxWaitingLeasesFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p := newProc(t, "--max-waiting-leases-per-conn", "1")
	p.start()
	conn := dial(t, p.grpcAddr)
	p.waitServing(ctx, conn)
	qc := queuev1.NewQueueServiceClient(conn)

	first := make(chan error, 1)
	go func() {
		for {
			lr, err := qc.Lease(ctx, &queuev1.LeaseRequest{Queue: "idle", Worker: "w", Wait: durationpb.New(30 * time.Second)})
			// The first can reach the server while a second is waiting
			// its millisecond, and be the one refused: it asks again.
			if status.Code(err) == codes.ResourceExhausted && ctx.Err() == nil {
				continue
			}
			if err == nil && len(lr.GetLeases()) != 1 {
				t.Errorf("the waiting Lease got %d keys, want the one added", len(lr.GetLeases()))
			}
			first <- err
			return
		}
	}()
	second := func() error {
		_, err := qc.Lease(ctx, &queuev1.LeaseRequest{Queue: "idle", Worker: "w", Wait: durationpb.New(time.Millisecond)})
		return err
	}
	// The first Lease reaches the server at some point: until then a
	// second waits its millisecond and returns OK. Only the first can be
	// the waiting Lease that refuses a second, since seconds run one at a
	// time.
	want := regexp.MustCompile(`^too many waiting Leases on connection 127\.0\.0\.1:\d+: 1 in flight \(limit 1\)$`)
	for {
		err := second()
		if status.Code(err) == codes.ResourceExhausted {
			if msg := status.Convert(err).Message(); !want.MatchString(msg) {
				t.Fatalf("refusal %q, want it to match %s", msg, want)
			}
			break
		}
		if err != nil || ctx.Err() != nil {
			t.Fatalf("a second waiting Lease: %v (context %v)", err, ctx.Err())
		}
	}
	if _, err := qc.Lease(ctx, &queuev1.LeaseRequest{Queue: "idle", Worker: "w"}); err != nil {
		t.Fatalf("a Lease that does not wait, beside the waiting one: %v", err)
	}
	if _, err := qc.Add(ctx, &queuev1.AddRequest{Queue: "idle", Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first waiting Lease: %v", err)
	}
	if err := second(); err != nil {
		t.Fatalf("a waiting Lease once the first returned: %v", err)
	}
}
