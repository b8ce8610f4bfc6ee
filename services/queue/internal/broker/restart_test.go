package broker

import (
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// TestSecondRestartKeepsReplayedKeys: a key with several records in the log
// (added, then failed) must survive two restarts in a row, also when the
// first restarted process only reads (Stats) before it stops. Recovery once
// replayed such a key through Forget, which wrote a Delete record at the
// restarted process's first operation, and the next restart lost the key.
func TestSecondRestartKeepsReplayedKeys(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := open(t, dir, 0)
	if _, _, err := b.Add(ctx, "jobs", []string{"ns/failed", "ns/plain"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	grants, err := b.Lease(ctx, "jobs", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute})
	if err != nil || len(grants) != 1 || grants[0].Key != "ns/failed" {
		t.Fatalf("lease: %v %v", grants, err)
	}
	ok, err := b.Ack(ctx, "jobs", nil, []AckItem{{Key: "ns/failed", Token: grants[0].Token, Outcome: workqueue.Outcome{Failed: true, Error: "boom"}}})
	if err != nil || !ok[0] {
		t.Fatalf("failure ack: %v %v", ok, err)
	}
	b.j.Close() // crash: no snapshot

	for restart := 1; restart <= 2; restart++ {
		b = open(t, dir, 0)
		st, err := b.Stats(t.Context(), "jobs", ReadOptions{}) // an operation, that could write
		if err != nil {
			t.Fatal(err)
		}
		if got := st[0].Pending + st[0].Delayed; got != 2 {
			t.Fatalf("restart %d: %d keys stored (%+v), want 2", restart, got, st[0])
		}
		if v := b.inspect("jobs", "ns/failed"); v.State == workqueue.Absent || v.Attempts != 1 || v.LastError != "boom" {
			t.Fatalf("restart %d: failed key %+v", restart, v)
		}
		b.j.Close()
	}
}
