package refs

import (
	"context"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// startRelay serves the references on loopback and returns a client of
// them.
func startRelay(t *testing.T) *queueclient.Client {
	t.Helper()
	c, closeC, err := RelayClient(serveRefs(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeC)
	return c
}

// nextLease returns the next lease pushed on s, answering nothing else.
func nextLease(t *testing.T, s *queueclient.Stream) queueclient.Lease {
	t.Helper()
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if ev.Lease != nil {
			return *ev.Lease
		}
	}
}

// TestRelay: a relay pushes each added key as a lease with baton-queue's
// fields, holds a stream to its max_in_flight, answers an ack OK (and a
// second ack of the same token LEASE_LOST), and hands the keys a stream
// held back to the others when it ends.
func TestRelay(t *testing.T) {
	c := startRelay(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	a, err := c.Work(ctx, "q", queueclient.WorkOptions{Worker: "a", MaxInFlight: 1, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	before := time.Now()
	if _, err := c.Add(ctx, "q", []string{"k1", "k2"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	l := nextLease(t, a)
	if l.Key != "k1" || l.Token == 0 || l.Attempt != 1 || l.PendingSince.Before(before.Add(-time.Second)) || time.Until(l.ExpiresAt) < 30*time.Second {
		t.Fatalf("first lease %+v", l)
	}

	// One in flight: k2 waits for k1's ack. A second stream takes it.
	b, err := c.Work(ctx, "q", queueclient.WorkOptions{Worker: "b", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if l2 := nextLease(t, b); l2.Key != "k2" {
		t.Fatalf("second stream got %+v, want k2", l2)
	}

	// a acks k1 twice: OK, then LEASE_LOST.
	for i, want := range []queueclient.Status{queueclient.OK, queueclient.LeaseLost} {
		if err := a.Ack(queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()}); err != nil {
			t.Fatal(err)
		}
		ev, err := a.Recv()
		if err != nil || ev.Ack == nil || ev.Ack.Key != "k1" || ev.Ack.Status != want {
			t.Fatalf("ack %d: %+v, %v; want %v", i, ev.Ack, err, want)
		}
	}

	// b ends holding k2: a, free again, is pushed it.
	b.Close()
	if l3 := nextLease(t, a); l3.Key != "k2" {
		t.Fatalf("after b ended a got %+v, want k2 handed back", l3)
	}
}

// TestCarryIsNotRelayed: Carry's Adds are only counted, never kept for a
// stream (millions of them would fill a relay).
func TestCarryIsNotRelayed(t *testing.T) {
	c := &carrier{}
	for range 3 {
		res, err := c.Add(t.Context(), &queuev1.AddRequest{Queue: carryQueue, Keys: Keys("car", 0, relayBacklog)})
		if err != nil || res.GetQueued() != relayBacklog {
			t.Fatalf("carry add: %v %v", res, err)
		}
	}
	if len(c.relays.m) != 0 {
		t.Fatalf("relays %v after Carry's Adds", c.relays.m)
	}
	if _, err := c.Add(t.Context(), &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}}); err != nil || len(c.relays.m["q"].keys) != 1 {
		t.Fatalf("another queue's key is not relayed (%v)", err)
	}
}
