package robustness

import (
	"fmt"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestScenarioWorkStreamHoldsUntilAnswered: docs/design.md says a work
// stream holds a lease "from its push until its ack is answered, whatever
// the answer", and that the queue pushes a lease while the stream holds
// fewer than max_in_flight. So with max_in_flight 1, the answer to an ack
// comes before the next lease. A worker on the leader acks each lease it
// is pushed, with failure and with requeue_after in turn (answered once
// durable), 200 times; a lease that arrives while an ack is unanswered
// breaks the promise. (It did, 53 to 70 times of 200, while the stream
// freed a slot when it applied the ack, before the durable wait and the
// answer; the slot is now freed once the answer is sent.)
func TestScenarioWorkStreamHoldsUntilAnswered(t *testing.T) {
	skipIfOpen(t)
	ctx, c, l := startThree(t, 2*time.Minute)
	const queue = "order"
	if _, err := c.qcs[l].Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: keys("o", 20)}); err != nil {
		t.Fatal(err)
	}
	s, err := c.qcs[l].Work(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: queue, Worker: "w", MaxInFlight: 1, LeaseDuration: durationpb.New(time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	unanswered := ""
	var early []string
	for acks := 0; acks < 200; {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d acks: %v", acks, errString(err))
		}
		switch r := m.GetResponse().(type) {
		case *queuev1.WorkResponse_Lease:
			if unanswered != "" {
				early = append(early, fmt.Sprintf("lease of %s before the answer to the ack of %s", r.Lease.GetKey(), unanswered))
			}
			a := ackOf(r.Lease.GetKey(), r.Lease.GetToken(), AckFailure, 0)
			if acks%2 == 1 {
				a = ackOf(r.Lease.GetKey(), r.Lease.GetToken(), AckRequeue, time.Millisecond)
			}
			if err := s.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Ack{Ack: a}}); err != nil {
				t.Fatal(err)
			}
			unanswered = r.Lease.GetKey()
			acks++
		case *queuev1.WorkResponse_AckResult:
			if r.AckResult.GetKey() == unanswered {
				unanswered = ""
			}
		}
	}
	if len(early) > 0 {
		t.Errorf("with max_in_flight 1, %d of 200 leases came while the stream still held the lease of an unanswered ack, e.g. %v", len(early), early[:min(3, len(early))])
	}
}
