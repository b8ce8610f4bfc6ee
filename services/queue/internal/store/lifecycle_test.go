package store

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/store/faultfs"
)

// liveFiles lists dir's files, sorted.
func liveFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := OS{}.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestRaiseEpoch: a store raised to an epoch opens next above it, and a
// raise below the epoch it has changes nothing.
func TestRaiseEpoch(t *testing.T) {
	dir := t.TempDir()
	s, _ := mustOpen(t, Options{Dir: dir})
	if err := s.RaiseEpoch(1000); err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseEpoch(5); err != nil {
		t.Fatal(err)
	}
	if s.Epoch() != 1000 {
		t.Fatalf("epoch %d after raising it to 1000, then to 5", s.Epoch())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = mustOpen(t, Options{Dir: dir})
	defer s.Close()
	if s.Epoch() != 1001 {
		t.Fatalf("reopened after a raise to 1000: epoch %d, want 1001", s.Epoch())
	}
}

func TestEpochGrows(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for i := range 4 {
		s, _ := mustOpen(t, Options{Dir: dir})
		e := s.Epoch()
		if e <= last {
			t.Fatalf("open %d: epoch %d after %d", i, e, last)
		}
		last = e
		if i == 2 {
			n, err := s.NextEpoch()
			if err != nil {
				t.Fatalf("NextEpoch: %v", err)
			}
			if n <= e || s.Epoch() != n {
				t.Fatalf("NextEpoch = %d, Epoch() = %d, after %d", n, s.Epoch(), e)
			}
			last = n
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// On the in-memory disk, a power loss right after Open or NextEpoch
	// returned: neither epoch may come back.
	disk := faultfs.New(1)
	last = 0
	for i := range 6 {
		s, _ := mustOpen(t, faultOpts(disk, 0))
		e := s.Epoch()
		if e <= last {
			t.Fatalf("power loss %d: epoch %d after %d", i, e, last)
		}
		last = e
		if i%2 == 1 {
			if last, _ = s.NextEpoch(); last <= e {
				t.Fatalf("NextEpoch = %d after %d", last, e)
			}
		}
		_ = s.Close()
		disk.Crash()
	}
}

func TestSegmentsRotateAtSegmentBytes(t *testing.T) {
	const segBytes = 600
	dir := t.TempDir()
	s, _ := mustOpen(t, Options{Dir: dir, SegmentBytes: segBytes})
	want := state{}
	maxFrame := 0
	for i := range 60 {
		k := fmt.Sprintf("k%02d", i)
		recs := putRec(nil, k, uint32(i+1))
		maxFrame = max(maxFrame, frameHeader+len(recs))
		mustCommit(t, s, recs)
		want[k] = uint32(i + 1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range liveFiles(t, dir) {
		if strings.HasPrefix(n, "wal-") {
			segs = append(segs, n)
		}
	}
	if len(segs) < 5 {
		t.Fatalf("%d segments after 60 frames of up to %d bytes with SegmentBytes %d: %v", len(segs), maxFrame, segBytes, segs)
	}
	for i, n := range segs {
		if n != segName(uint64(i+1)) {
			t.Fatalf("segment %d is %s, want %s", i, n, segName(uint64(i+1)))
		}
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		// A segment rotates after the frame that takes it past the limit.
		if last := i == len(segs)-1; !last && (fi.Size() <= segBytes || fi.Size() > segBytes+int64(maxFrame)) {
			t.Errorf("%s is %d bytes, want (%d, %d]", n, fi.Size(), segBytes, segBytes+maxFrame)
		}
	}
	_, got := mustOpen(t, Options{Dir: dir, SegmentBytes: segBytes})
	if d := diffStates(got, want); d != "" {
		t.Errorf("recovered: %s", d)
	}
}

func TestSnapshotCompactsAndRecovers(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 400}
	s, _ := mustOpen(t, opts)
	want := state{}
	put := func(k string, v uint32) {
		t.Helper()
		mustCommit(t, s, putRec(nil, k, v))
		want[k] = v
	}
	del := func(k string) {
		t.Helper()
		mustCommit(t, s, delRec(nil, k))
		delete(want, k)
	}
	for i := range 20 {
		put(fmt.Sprintf("a%02d", i), 1)
	}
	del("a03")
	put("a04", 2)

	if err := s.Snapshot(walkOf(want)); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	files := liveFiles(t, dir)
	seq := s.segSeq
	if wantFiles := []string{"epoch", "lock", snapName(seq), segName(seq)}; !slices.Equal(files, wantFiles) {
		t.Fatalf("files after the snapshot: %v, want %v", files, wantFiles)
	}
	if wal, snap := s.WALBytes(); wal != 0 || snap <= int64(len(snapMagic)+len(snapFooter)) {
		t.Errorf("WALBytes() = %d, %d after a snapshot, want 0 and its size", wal, snap)
	}

	// More segments after the snapshot, changing keys it holds.
	for i := range 20 {
		put(fmt.Sprintf("b%02d", i), 1)
	}
	del("a05")
	put("a06", 3)
	if wal, _ := s.WALBytes(); wal == 0 {
		t.Errorf("WALBytes() = 0 after appends")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(liveFiles(t, dir)); n < 4 {
		t.Fatalf("want more segments after the snapshot, files: %v", liveFiles(t, dir))
	}
	s, got := mustOpen(t, opts)
	if d := diffStates(got, want); d != "" {
		t.Fatalf("recovered after snapshot and more segments: %s", d)
	}

	// A second snapshot replaces the first and its segments.
	if err := s.Snapshot(walkOf(want)); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	seq2 := s.segSeq
	if seq2 <= seq {
		t.Fatalf("second snapshot at seq %d, first at %d", seq2, seq)
	}
	// ("clean" records where the log ended at the last Close; "lock" is
	// the directory's lock.)
	if wantFiles := []string{cleanName, "epoch", "lock", snapName(seq2), segName(seq2)}; !slices.Equal(liveFiles(t, dir), wantFiles) {
		t.Fatalf("files after the second snapshot: %v, want %v", liveFiles(t, dir), wantFiles)
	}
	put("c", 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, got = mustOpen(t, opts)
	if d := diffStates(got, want); d != "" {
		t.Fatalf("recovered after the second snapshot: %s", d)
	}
}

// TestSnapshotIsTheBase: recovery starts from what the walk emitted, not
// from the segments it replaced (the owner's memory is the truth, e.g. after
// Heal).
func TestSnapshotIsTheBase(t *testing.T) {
	dir := t.TempDir()
	s, _ := mustOpen(t, Options{Dir: dir})
	mustCommit(t, s, putRec(nil, "logged", 1))
	base := state{"walked": 4}
	if err := s.Snapshot(walkOf(base)); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, putRec(nil, "after", 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := newReplayer()
	if _, err := Open(Options{Dir: dir}, r.apply); err != nil {
		t.Fatal(err)
	}
	if d := diffStates(r.st, state{"walked": 4, "after": 1}); d != "" {
		t.Errorf("recovered: %s", d)
	}
	if r.queues != 1 {
		t.Errorf("%d Queue records replayed, want the snapshot's 1", r.queues)
	}
}

func TestCloseWritesPending(t *testing.T) {
	disk := faultfs.New(1)
	s, _ := mustOpen(t, faultOpts(disk, 0))
	want := state{}
	var batches []*Batch
	for i := range 50 {
		k := fmt.Sprintf("k%d", i)
		batches = append(batches, mustAppend(t, s, putRec(nil, k, 1)))
		want[k] = 1
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		if err := b.Wait(t.Context()); err != nil {
			t.Fatalf("batch %d after Close: %v", i, err)
		}
	}
	for i, recs := range [][]byte{putRec(nil, "late", 1), nil} {
		if err := commit(t, s, recs); !errors.Is(err, ErrClosed) {
			t.Errorf("append %d after Close = %v, want ErrClosed", i, err)
		}
	}
	if err := s.Snapshot(walkOf(want)); !errors.Is(err, ErrClosed) {
		t.Errorf("Snapshot after Close = %v, want ErrClosed", err)
	}
	crashAndReopen(t, disk, want)
}

// TestEmptyAppendCoversEarlierAppends: an empty Append (an Add that changed
// nothing) must not return before every earlier change is durable: neither
// while the frame before it is being synced, nor while one waits for the
// next sync.
func TestEmptyAppendCoversEarlierAppends(t *testing.T) {
	disk := faultfs.New(1)
	s, _ := mustOpen(t, faultOpts(disk, 0))
	if err := commit(t, s, nil); err != nil {
		t.Fatalf("empty append on an idle store = %v", err)
	}
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	disk.OnSync(func(string) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	inflight := mustAppend(t, s, putRec(nil, "a", 1))
	<-entered
	onInflight := mustAppend(t, s, nil) // only the frame being synced is pending
	queued := mustAppend(t, s, putRec(nil, "b", 1))
	onQueued := mustAppend(t, s, nil)
	for name, b := range map[string]*Batch{"being synced": onInflight, "waiting for a sync": onQueued} {
		select {
		case <-b.done:
			t.Fatalf("empty append while a frame is %s returned before it was durable", name)
		default:
		}
	}
	close(release)
	for _, b := range []*Batch{inflight, onInflight, queued, onQueued} {
		if err := b.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	crashAndReopen(t, disk, maps.Clone(state{"a": 1, "b": 1}))
}

// TestDurableCountsSyncedFrames: Durable counts a frame once its fsync is
// done, before its caller is answered; not while it waits for the sync, not
// for an empty Append, and from 0 again after a restart.
func TestDurableCountsSyncedFrames(t *testing.T) {
	disk := faultfs.New(1)
	s, _ := mustOpen(t, faultOpts(disk, 0))
	if got := s.Durable(); got != 0 {
		t.Fatalf("Durable after Open = %d, want 0", got)
	}
	mustCommit(t, s, putRec(nil, "a", 1))
	mustCommit(t, s, nil)
	if got := s.Durable(); got != 1 {
		t.Fatalf("Durable after one frame and an empty append = %d, want 1", got)
	}

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	disk.OnSync(func(string) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	held := mustAppend(t, s, putRec(nil, "b", 1))
	<-entered
	if got := s.Durable(); got != 1 {
		t.Fatalf("Durable while a frame's fsync is in flight = %d, want 1", got)
	}
	close(release)
	if err := held.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.Durable(); got != 2 {
		t.Fatalf("Durable once the held frame was answered = %d, want 2", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, st := mustOpen(t, faultOpts(disk, 0))
	if len(st) != 2 || s2.Durable() != 0 {
		t.Fatalf("after a restart: %d keys and Durable %d, want 2 keys and 0", len(st), s2.Durable())
	}
}
