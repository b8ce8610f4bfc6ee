package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const faultDir = "/d"

func faultOpts(disk *faultDisk, segBytes int64) Options {
	return Options{Dir: faultDir, FS: disk.mount(), SegmentBytes: segBytes}
}

// lastSegment returns the name of the newest live segment.
func lastSegment(t *testing.T, disk *faultDisk) string {
	t.Helper()
	var last string
	for _, n := range disk.names(faultDir) {
		if strings.HasPrefix(n, "wal-") {
			last = n
		}
	}
	if last == "" {
		t.Fatal("no segment")
	}
	return faultDir + "/" + last
}

// crashAndReopen loses power, reopens, and compares what came back.
func crashAndReopen(t *testing.T, disk *faultDisk, want state) *Store {
	t.Helper()
	disk.crash()
	s, got := mustOpen(t, faultOpts(disk, 0))
	if d := diffStates(got, want); d != "" {
		t.Errorf("after the power loss: %s", d)
	}
	return s
}

func TestWriteOrSyncErrorStopsTheStore(t *testing.T) {
	tests := []struct {
		name   string
		before int   // frames committed before the failure
		failAt int64 // the sync, counted from the failing commit, that fails
		once   bool  // only that sync fails
		write  bool  // the failAt-th write fails (EIO), not a sync
		// rotate makes the failing commit fill its segment, so the
		// writer rotates right after it: that commit still succeeds, the
		// failing sync is the rotation's (header, then directory entry).
		rotate bool
	}{
		{name: "first frame", failAt: 1},
		{name: "after three frames", before: 3, failAt: 1},
		{name: "once, at a frame", before: 2, failAt: 1, once: true},
		{name: "write error at a frame", before: 2, failAt: 1, write: true},
		{name: "new segment header", before: 1, failAt: 2, once: true, rotate: true},
		{name: "new segment directory entry", before: 1, failAt: 3, once: true, rotate: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			disk := newFaultDisk(1)
			var segBytes int64
			if tt.rotate {
				// Full to the byte after the frames before: no rotation
				// yet, one right after the next frame.
				segBytes = int64(len(walMagic))
				for i := range tt.before {
					segBytes += int64(frameHeader + len(putRec(nil, fmt.Sprintf("before-%d", i), 1)))
				}
			}
			s, _ := mustOpen(t, faultOpts(disk, segBytes))
			want := state{}
			for i := range tt.before {
				k := fmt.Sprintf("before-%d", i)
				mustCommit(t, s, putRec(nil, k, 1))
				want[k] = 1
			}
			if tt.write {
				disk.failWriteFrom(tt.failAt)
			} else {
				disk.failSyncFrom(tt.failAt, tt.once)
			}
			err := commit(t, s, putRec(nil, "failed", 1))
			if tt.rotate {
				if err != nil {
					t.Fatalf("commit before the failing rotation: %v", err)
				}
				want["failed"] = 1
				// The rotation that fails runs after the commit returned.
				waitFor(t, "the store to stop", func() bool { return s.Err() != nil })
				err = commit(t, s, putRec(nil, "after", 1))
			}
			if !errors.Is(err, ErrStopped) {
				t.Fatalf("commit with a failing write or fsync = %v, want ErrStopped", err)
			}
			if err := s.Err(); !errors.Is(err, ErrStopped) {
				t.Fatalf("Err() = %v, want ErrStopped", err)
			}
			// Fail-stop: nothing is written or synced again, every later
			// call fails, also the ones that would write nothing.
			syncs, writes := disk.counts()
			for i, recs := range [][]byte{putRec(nil, "later", 1), nil, delRec(nil, "before-0")} {
				if err := commit(t, s, recs); !errors.Is(err, ErrStopped) {
					t.Errorf("append %d after the failure = %v, want ErrStopped", i, err)
				}
			}
			if err := s.Snapshot(walkOf(want)); err == nil {
				t.Errorf("Snapshot after the failure succeeded")
			}
			if err := s.Heal(walkOf(want)); err == nil {
				t.Errorf("Heal after the failure succeeded")
			}
			if s2, w2 := disk.counts(); s2 != syncs || w2 != writes {
				t.Errorf("after the failure the store synced %d and wrote %d more times, want none", s2-syncs, w2-writes)
			}
			if err := s.Close(); !errors.Is(err, ErrStopped) {
				t.Errorf("Close = %v, want ErrStopped", err)
			}
			disk.failSyncFrom(0, false)
			disk.failWriteFrom(0)
			crashAndReopen(t, disk, want)
		})
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFullDisk(t *testing.T) {
	for _, healFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("heal=%v", healFirst), func(t *testing.T) {
			disk := newFaultDisk(1)
			s, _ := mustOpen(t, faultOpts(disk, 0))
			acked := state{}
			for i := range 5 {
				k := fmt.Sprintf("k%d", i)
				mustCommit(t, s, putRec(nil, k, 1))
				acked[k] = 1
			}
			seg := lastSegment(t, disk)
			before := disk.contents(seg)

			disk.setFree(20) // room for part of the next frame only
			big, bigState := bigFrame()
			if err := commit(t, s, big); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("commit on a full disk = %v, want ErrNoSpace", err)
			}
			if got := disk.contents(seg); !bytes.Equal(got, before) {
				t.Fatalf("segment after the failed frame has %d bytes, want the %d from before (partial frame cut)", len(got), len(before))
			}
			if !s.Degraded() {
				t.Fatal("Degraded() = false after a full disk")
			}
			if err := s.Err(); err != nil {
				t.Fatalf("Err() = %v after a full disk, want nil (not fail-stop)", err)
			}
			for i, recs := range [][]byte{putRec(nil, "small", 1), nil} {
				if err := commit(t, s, recs); !errors.Is(err, ErrNoSpace) {
					t.Errorf("append %d while degraded = %v, want ErrNoSpace", i, err)
				}
			}
			// The owner's memory holds the failed change: the heal
			// snapshot is what stores it.
			mem := maps.Clone(acked)
			maps.Copy(mem, bigState)
			if err := s.Heal(walkOf(mem)); err == nil {
				t.Fatal("Heal on a full disk succeeded")
			}
			if !s.Degraded() {
				t.Fatal("Degraded() = false after a failed Heal")
			}
			for _, n := range disk.names(faultDir) {
				if strings.HasSuffix(n, ".tmp") {
					t.Errorf("failed Heal left %s behind", n)
				}
			}
			if !healFirst {
				// A power loss before the heal: exactly what was
				// acknowledged comes back, nothing of the failed frame.
				disk.setFree(-1)
				_ = s.Close()
				crashAndReopen(t, disk, acked)
				return
			}
			disk.setFree(-1)
			if err := s.Heal(walkOf(mem)); err != nil {
				t.Fatalf("Heal with space back: %v", err)
			}
			if s.Degraded() {
				t.Fatal("Degraded() = true after Heal")
			}
			mustCommit(t, s, putRec(nil, "after", 1))
			mem["after"] = 1
			if err := commit(t, s, nil); err != nil {
				t.Fatalf("empty append after Heal = %v", err)
			}
			_ = s.Close()
			crashAndReopen(t, disk, mem)
		})
	}
}

// TestFullDiskFailsTheNextBatchToo holds the writer inside the write that
// runs out of space while other callers join the next batch, one of them
// with an empty append (an Add that collapsed into a key the failing frame
// stores). The frame after the failed one fits, but it must not be
// acknowledged: memory holds changes that only the failed frame had.
func TestFullDiskFailsTheNextBatchToo(t *testing.T) {
	disk := newFaultDisk(1)
	s, _ := mustOpen(t, faultOpts(disk, 0))
	mustCommit(t, s, putRec(nil, "k0", 1))

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	disk.onWrite(func(string) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	disk.setFree(200)
	big, _ := bigFrame()
	if len(big) <= 200 {
		t.Fatalf("the big frame (%d bytes) fits", len(big))
	}
	first := s.Append(big)
	<-entered
	next := s.Append(putRec(nil, "small", 1))
	collapsed := s.Append(nil)
	close(release)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := first.Wait(ctx); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("the frame that ran out of space = %v, want ErrNoSpace", err)
	}
	if err := next.Wait(ctx); !errors.Is(err, ErrNoSpace) {
		t.Errorf("the batch after the failed frame = %v, want ErrNoSpace", err)
	}
	if err := collapsed.Wait(ctx); !errors.Is(err, ErrNoSpace) {
		t.Errorf("an empty append made while the frame failed = %v, want ErrNoSpace", err)
	}
	_ = s.Close()
	crashAndReopen(t, disk, state{"k0": 1})
}

// TestFullDiskAtRotation runs out of space for a new segment's header: that
// loses nothing, so the store goes on in the old segment and rotates once
// there is space.
func TestFullDiskAtRotation(t *testing.T) {
	disk := newFaultDisk(1)
	// Full to the byte after k0: the frame of k1 starts a rotation.
	segBytes := int64(len(walMagic) + frameHeader + len(putRec(nil, "k0", 1)))
	s, _ := mustOpen(t, faultOpts(disk, segBytes))
	mustCommit(t, s, putRec(nil, "k0", 1))
	_, writes := disk.counts()
	disk.setFree(int64(frameHeader + len(putRec(nil, "k1", 1)) + 3))
	mustCommit(t, s, putRec(nil, "k1", 1)) // fits; the new header does not
	waitFor(t, "the header write", func() bool { _, w := disk.counts(); return w >= writes+2 })
	disk.setFree(-1)
	// The writer handles the failed rotation before it takes this batch.
	mustCommit(t, s, putRec(nil, "k2", 1))
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v after a rotation ran out of space", err)
	}
	waitFor(t, "the rotation once there is space", func() bool {
		return slices.Contains(disk.names(faultDir), segName(2))
	})
	_ = s.Close()
	crashAndReopen(t, disk, state{"k0": 1, "k1": 1, "k2": 1})
}

// bigFrame returns records of a few hundred bytes and the state they make.
func bigFrame() ([]byte, state) {
	var recs []byte
	st := state{}
	for i := range 5 {
		k := fmt.Sprintf("big%d", i)
		recs = putRec(recs, k, 1)
		st[k] = 1
	}
	return recs, st
}

// TestFullDiskCrashWhileHealing: the part of a frame that a full disk cut
// short may reach the disk (kernel writeback) before the store truncates
// it. If power is lost after the healing snapshot rotated to a new segment
// but before the snapshot is durable, that segment is no longer the last
// one, so its tail must really be gone or Open refuses to start.
func TestFullDiskCrashWhileHealing(t *testing.T) {
	for n := int64(5); n <= 9; n++ {
		t.Run(fmt.Sprintf("crash at operation %d of Heal", n), func(t *testing.T) {
			disk := newFaultDisk(1)
			disk.writeBack = true
			s, _ := mustOpen(t, faultOpts(disk, 0))
			mustCommit(t, s, putRec(nil, "k0", 1))
			disk.setFree(20)
			big, bigState := bigFrame()
			if err := commit(t, s, big); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("commit on a full disk = %v, want ErrNoSpace", err)
			}
			disk.setFree(-1)
			disk.crashAfter(n, false)
			mem := state{"k0": 1}
			maps.Copy(mem, bigState)
			if err := s.Heal(walkOf(mem)); err == nil {
				t.Fatal("Heal succeeded through a power loss")
			}
			_ = s.Close()
			crashAndReopen(t, disk, state{"k0": 1})
		})
	}
}
