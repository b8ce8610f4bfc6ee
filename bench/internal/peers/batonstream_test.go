package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
)

// startQueue starts the repository's built baton-queue, or skips: `make
// build` (scripts/build.sh) makes it.
func startQueue(t *testing.T) *baton.Server {
	t.Helper()
	bin, err := filepath.Abs("../../../bin/baton-queue")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%v (run `make build`)", err)
	}
	s, err := baton.Start(t.Context(), bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestBatonStreamCycle runs workload 1 through the work stream against a
// real baton-queue: every key added is acked, none is left, and the callers
// that finish first hand back what their streams were pushed (Leave), so the
// last rounds do not wait out the grace period for keys held by a worker
// that left.
func TestBatonStreamCycle(t *testing.T) {
	s := startQueue(t)
	ctx := t.Context()
	for i, sh := range [][2]int{{1, 1}, {1, 8}, {100, 4}} {
		q := &BatonStream{Client: s.Client, Name: fmt.Sprintf("cycle%d", i)}
		r, err := Cycle(ctx, q, "c", sh[0], sh[1], 300*time.Millisecond)
		if err != nil || r.Keys == 0 {
			t.Fatalf("batch %d, %d callers: %+v, %v", sh[0], sh[1], r, err)
		}
		if r.Elapsed > 5*time.Second {
			t.Errorf("batch %d, %d callers took %v for a 300 ms run: keys stuck in a stream that left?", sh[0], sh[1], r.Elapsed)
		}
		if n, err := q.Unfinished(ctx); err != nil || n != 0 {
			t.Errorf("batch %d, %d callers: %d keys unfinished after the run (%v)", sh[0], sh[1], n, err)
		}
		if r.Keys%int64(sh[0]) != 0 {
			t.Errorf("batch %d: %d keys acked, not whole rounds", sh[0], r.Keys)
		}
		q.Close()
	}
}

// TestBatonStreamLeaseAckLeave: Lease waits for a push and returns none
// when nothing comes; the stream's max_in_flight is its first Lease's max;
// an ack with a stale token (LEASE_LOST) fails the next call; and a worker that
// leaves hands back what it was pushed, so another worker gets it.
func TestBatonStreamLeaseAckLeave(t *testing.T) {
	s := startQueue(t)
	ctx := t.Context()
	q := &BatonStream{Client: s.Client, Name: "las"}
	defer q.Close()

	ls, err := q.Lease(ctx, "a", 2, 50*time.Millisecond)
	if err != nil || len(ls) != 0 {
		t.Fatalf("lease of an empty queue: %v, %v", ls, err)
	}
	if err := q.Add(ctx, []string{"k1", "k2", "k3"}); err != nil {
		t.Fatal(err)
	}
	// a's stream holds at most 2 (its first Lease's max): the third key
	// waits for a slot.
	var got []Leased
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		ls, err := q.Lease(ctx, "a", 10, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ls...)
	}
	if len(got) != 2 {
		t.Fatalf("a got %d leases, want its max_in_flight of 2", len(got))
	}
	if ls, _ := q.Lease(ctx, "a", 10, 100*time.Millisecond); len(ls) != 0 {
		t.Fatalf("a was pushed %d more while holding 2", len(ls))
	}

	stale := got[0]
	stale.handle = streamLease{w: stale.handle.(streamLease).w, token: stale.handle.(streamLease).token + 1000}
	// Acks go unanswered: the refusal fails the worker's next call.
	if err := q.Ack(ctx, "a", []Leased{stale}); err != nil {
		t.Fatalf("ack with a stale token: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, err := q.Lease(ctx, "a", 10, 10*time.Millisecond)
		if err != nil && strings.Contains(err.Error(), "refused") {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("after an ack with a stale token: %v, want it refused", err)
		}
	}
	// The stream still works after a refused ack: the real ack of the same
	// key is answered OK and frees the slot, and the third key is pushed.
	if err := q.Ack(ctx, "a", got[:1]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	third, err := q.Lease(ctx, "a", 10, 5*time.Second)
	if err != nil || len(third) != 1 {
		t.Fatalf("after an ack a was pushed %v (%v), want the third key", third, err)
	}

	// a leaves holding two leases it never acked: both are handed back and
	// go to b.
	q.Leave("a")
	keys := map[string]bool{}
	if err := Drain(ctx, q, func(ls []Leased) {
		for _, l := range ls {
			keys[l.Key] = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{got[1].Key: true, third[0].Key: true}
	if len(keys) != 2 || !keys[got[1].Key] || !keys[third[0].Key] {
		t.Fatalf("after a left, the drain got %v, want %v", keys, want)
	}
	if n, err := q.Unfinished(ctx); err != nil || n != 0 {
		t.Fatalf("%d unfinished after the drain (%v)", n, err)
	}
}
