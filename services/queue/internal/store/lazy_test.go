package store

import (
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/store/faultfs"
)

// TestLazyFramesShareTheNextSync: a frame of AppendLazy starts no
// fdatasync of its own; the next Append's sync covers it (one sync for
// both), and an empty Append, whose caller waits, syncs it at once.
func TestLazyFramesShareTheNextSync(t *testing.T) {
	disk := faultfs.New(1)
	opts := faultOpts(disk, 0)
	opts.LazyDelay = time.Hour // nothing but an Append may sync them here
	s, _ := mustOpen(t, opts)
	syncs0, _ := disk.Counts()

	lazy, err := s.AppendLazy(putRec(nil, "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, putRec(nil, "b", 1))
	if err := lazy.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if syncs, _ := disk.Counts(); syncs-syncs0 != 1 {
		t.Fatalf("a lazy frame and an Append took %d fdatasyncs, want one", syncs-syncs0)
	}
	if got := s.Durable(); got != 2 {
		t.Fatalf("Durable = %d, want both frames", got)
	}

	if _, err := s.AppendLazy(putRec(nil, "c", 1)); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, nil) // an empty Append covers it and waits: it is synced
	if got := s.Durable(); got != 3 {
		t.Fatalf("Durable after an empty Append = %d, want 3", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	crashAndReopen(t, disk, state{"a": 1, "b": 1, "c": 1})
}

// TestLazyFramesAloneAreSynced: lazy frames that no Append follows are
// synced once they have waited LazyDelay; a power loss before that may
// lose them (their callers did not wait), one after it may not.
func TestLazyFramesAloneAreSynced(t *testing.T) {
	disk := faultfs.New(1)
	opts := faultOpts(disk, 0)
	opts.LazyDelay = 20 * time.Millisecond
	s, _ := mustOpen(t, opts)
	b, err := s.AppendLazy(putRec(nil, "a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(t.Context()); err != nil { // returns only once synced
		t.Fatal(err)
	}
	if got := s.Durable(); got != 1 {
		t.Fatalf("Durable = %d once the lazy frame's batch is done, want 1", got)
	}
	disk.Crash() // the store is not closed: nothing but that sync kept it
	_ = s.Close()
	s2, got := mustOpen(t, faultOpts(disk, 0))
	defer s2.Close()
	if d := diffStates(got, state{"a": 1}); d != "" {
		t.Fatalf("after the power loss: %s", d)
	}
}

// TestCloseSyncsLazyFrames: Close syncs lazy frames that are still waiting.
func TestCloseSyncsLazyFrames(t *testing.T) {
	disk := faultfs.New(1)
	opts := faultOpts(disk, 0)
	opts.LazyDelay = time.Hour
	s, _ := mustOpen(t, opts)
	if _, err := s.AppendLazy(putRec(nil, "a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	crashAndReopen(t, disk, state{"a": 1})
}
