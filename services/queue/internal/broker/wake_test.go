package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// waitingLease starts a Lease of one key that waits up to 30 s, and
// returns what it gets.
func waitingLease(t *testing.T, b *Broker, queue, worker string) <-chan []workqueue.Grant {
	t.Helper()
	out := make(chan []workqueue.Grant, 1)
	go func() {
		g, err := b.Lease(t.Context(), queue, LeaseOptions{Worker: worker, Max: 1, Duration: time.Minute, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		out <- g
	}()
	return out
}

// waitWaiters waits until n Leases wait on queue.
func waitWaiters(t *testing.T, b *Broker, queue string, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.RLock()
		qs := b.queues[queue]
		b.mu.RUnlock()
		if qs != nil && qs.waiters.Load() == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Leases never waited on %s", n, queue)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDueKeyFoundByAnotherCallWakesAWaiter: a delayed key that becomes
// ready when another call (here Inspect) applies the due deadlines, before
// the queue's own timer does, wakes a waiting Lease: it used to wait until
// its wait ran out, since the timer then found nothing due.
func TestDueKeyFoundByAnotherCallWakesAWaiter(t *testing.T) {
	b := open(t, t.TempDir(), 0)
	defer b.Close()
	ctx := t.Context()
	if _, _, err := b.Add(ctx, "q", []string{"x"}, AddOptions{}); err != nil { // the queue exists
		t.Fatal(err)
	}
	if g, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute}); err != nil || len(g) != 1 {
		t.Fatal(g, err)
	}
	got := waitingLease(t, b, "q", "w")
	waitWaiters(t, b, "q", 1)
	if _, _, err := b.Add(ctx, "q", []string{"k"}, AddOptions{Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// The race this test makes certain: the timer has not fired when
	// another call applies the deadline.
	b.mu.RLock()
	qs := b.queues["q"]
	b.mu.RUnlock()
	qs.mu.Lock()
	qs.timer.Stop()
	qs.mu.Unlock()
	time.Sleep(60 * time.Millisecond) // past the key's not_before
	if v, _ := b.Inspect(t.Context(), "q", "k", ReadOptions{}); v.State != workqueue.Pending {
		t.Fatalf("k is %v after its delay", v.State)
	}
	select {
	case g := <-got:
		if len(g) != 1 || g[0].Key != "k" {
			t.Fatalf("the waiting Lease got %v, want k", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Lease was not woken for the key another call made ready")
	}
}

// TestOneKeyWakesOneWaiter: with many Leases waiting, a key added wakes
// one of them, the one waiting longest, and the others go on waiting
// without having been woken for nothing.
func TestOneKeyWakesOneWaiter(t *testing.T) {
	b := open(t, t.TempDir(), 0)
	defer b.Close()
	ctx := t.Context()
	if _, _, err := b.Add(ctx, "q", []string{"x"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if g, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute}); err != nil || len(g) != 1 {
		t.Fatal(g, err)
	}
	first := waitingLease(t, b, "q", "first")
	waitWaiters(t, b, "q", 1)
	var rest []<-chan []workqueue.Grant
	for i := range 8 {
		rest = append(rest, waitingLease(t, b, "q", fmt.Sprint("w", i)))
	}
	waitWaiters(t, b, "q", 9)
	if _, _, err := b.Add(ctx, "q", []string{"k"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := <-first; len(g) != 1 || g[0].Key != "k" {
		t.Fatalf("the longest waiter got %v, want k", g)
	}
	waitWaiters(t, b, "q", 8)
	b.mu.RLock()
	qs := b.queues["q"]
	b.mu.RUnlock()
	qs.mu.Lock()
	queued := len(qs.waitq)
	qs.mu.Unlock()
	if queued != 8 {
		t.Fatalf("%d waiters in line, want the 8 that were not woken", queued)
	}
	for _, c := range rest {
		select {
		case g := <-c:
			t.Fatalf("a waiter returned %v with nothing for it", g)
		default:
		}
	}
	b.Drain()
	for _, c := range rest {
		<-c
	}
}
