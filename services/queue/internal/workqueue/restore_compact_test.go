package workqueue

import (
	"fmt"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// TestRestoreKeepsReplacedItemsBounded: a follower restores the records of
// ten keys replaced a hundred thousand times; the items it keeps for
// Settle stay bounded, and Settle still finds every key pending, in age
// order.
func TestRestoreKeepsReplacedItemsBounded(t *testing.T) {
	cfg := DefaultConfig()
	q := New("q", &cfg, &seqTokens{}, nil)
	for i := range 100000 {
		k := fmt.Sprintf("k%d", i%10)
		q.Restore(&record.Record{Kind: record.KindPut, Queue: "q", Key: k, State: record.StatePending, PendingSince: int64(i)})
		if len(q.restored) > 2*q.pending+1024+1 {
			t.Fatalf("after %d records, %d items kept for %d pending keys", i+1, len(q.restored), q.pending)
		}
	}
	q.Settle(1 << 40)
	if q.PendingCount() != 10 || q.Len() != 10 {
		t.Fatalf("pending %d, held %d, want 10 and 10", q.PendingCount(), q.Len())
	}
	grants := q.Lease(nil, LeaseRequest{Max: 10, MaxBytes: 1 << 20, Worker: "w", Duration: 1e9}, 1<<40)
	for i, g := range grants {
		if want := fmt.Sprintf("k%d", i); g.Key != want {
			t.Fatalf("lease %d: %s, want %s (oldest first)", i, g.Key, want)
		}
	}
}
