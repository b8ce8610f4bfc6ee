package server

import (
	"context"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/protobuf/types/known/durationpb"
	"strings"
	"testing"
	"time"
)

func openBroker(t *testing.T, dir string) *broker.Broker {
	t.Helper()
	b, err := broker.Open(broker.Config{Queue: workqueue.DefaultConfig()}, store.Options{Dir: dir}, nil, nil)
	if err != nil {
		t.Fatalf("open the queue's store: %v", err)
	}
	return b
}

// FuzzAcceptedIsReplayable holds the server to its promise: whatever a
// request sets in its fields, if the handlers accept it, the store it
// leaves behind opens again, and every key is where it was. A failure ack of
// a long error once passed every check, was logged, and made the queue
// refuse to start ("string length out of range"); this is the test that
// would have caught it.
func FuzzAcceptedIsReplayable(f *testing.F) {
	maxQ := strings.Repeat("q", limits.MaxQueueNameBytes)
	maxK := strings.Repeat("é", limits.MaxKeyBytes/2)
	long := strings.Repeat("stack frame\n", 3<<20/12)
	f.Add("q", "k", "boom", "w", "observer", int64(0), int64(0), uint8(0))
	f.Add(maxQ, maxK, long, strings.Repeat("w", limits.MaxNameBytes), strings.Repeat("s", limits.MaxNameBytes), int64(limits.MaxDelay), int64(limits.MaxDelay), uint8(1))
	f.Add(maxQ, maxK, long, "w", "", int64(1), int64(0), uint8(0))
	f.Add("q", "k", "\xff\xfe\xfd", "w", "", int64(1), int64(limits.MaxDelay+1), uint8(1))
	f.Add(maxQ, maxK, "\xff\xfe\xfd", "w", "", int64(1), int64(limits.MaxDelay), uint8(2))
	f.Add("q", "k", strings.Repeat("é", limits.MaxErrorBytes), "w\xff", "", int64(240*365*24*time.Hour), int64(0), uint8(3))
	f.Fuzz(func(t *testing.T, queue, key, errText, worker, source string, delay, requeue int64, outcome uint8) {
		ctx := context.Background()
		dir := t.TempDir()
		b := openBroker(t, dir)
		s := New(b)
		accepted := false
		_, err := s.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{key}, Source: source})
		if err == nil {
			accepted = true
			_, _ = s.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"later"}, Delay: durationpb.New(time.Duration(delay))})
		}
		var lr *queuev1.LeaseResponse
		if err == nil {
			lr, err = s.Lease(ctx, &queuev1.LeaseRequest{Queue: queue, Worker: worker, MaxItems: 2})
			if err == nil && len(lr.GetLeases()) == 0 {
				t.Fatalf("nothing to lease after an accepted Add")
			}
		}
		if err == nil {
			for _, l := range lr.GetLeases() {
				a := &queuev1.Ack{Key: l.GetKey(), Token: l.GetToken()}
				switch outcome % 4 {
				case 0:
					a.Outcome = &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: errText}}
				case 1:
					a.Outcome = &queuev1.Ack_Terminal{Terminal: &queuev1.AckTerminal{Error: errText}}
				case 2:
					a.Outcome = &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(time.Duration(requeue))}
				default:
					a.Outcome = &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}
				}
				_, _ = s.Ack(ctx, &queuev1.AckRequest{Queue: queue, Acks: []*queuev1.Ack{a}})
			}
		}
		var before []*queuev1.Item
		if accepted {
			resp, err := s.List(ctx, &queuev1.ListRequest{Queue: queue})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			before = resp.GetItems()
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}

		b = openBroker(t, dir) // fails the test if the log does not replay
		defer b.Close()
		if !accepted {
			return
		}
		resp, err := New(b).List(ctx, &queuev1.ListRequest{Queue: queue})
		if err != nil {
			t.Fatalf("list after restart: %v", err)
		}
		after := resp.GetItems()
		if len(after) != len(before) {
			t.Fatalf("%d items after a restart, %d before", len(after), len(before))
		}
		for i, it := range after {
			was := before[i]
			// Leases are not stored: a leased key comes back pending.
			if it.GetKey() != was.GetKey() || it.GetLastError() != was.GetLastError() || it.GetAttempts() != was.GetAttempts() {
				t.Fatalf("after a restart %v, before %v", it, was)
			}
			if len(it.GetLastError()) > limits.MaxErrorBytes {
				t.Fatalf("a %d-byte error was stored", len(it.GetLastError()))
			}
		}
	})
}
