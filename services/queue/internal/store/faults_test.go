package store

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/store/faultfs"
)

const faultDir = "/d"

func faultOpts(disk *faultfs.Disk, segBytes int64) Options {
	return Options{Dir: faultDir, FS: disk.Mount(), SegmentBytes: segBytes}
}

// lastSegment returns the name of the newest live segment.
func lastSegment(t *testing.T, disk *faultfs.Disk) string {
	t.Helper()
	var last string
	for _, n := range disk.Names(faultDir) {
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
func crashAndReopen(t *testing.T, disk *faultfs.Disk, want state) *Store {
	t.Helper()
	disk.Crash()
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
			disk := faultfs.New(1)
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
				disk.FailWriteFrom(tt.failAt)
			} else {
				disk.FailSyncFrom(tt.failAt, tt.once)
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
			syncs, writes := disk.Counts()
			for i, recs := range [][]byte{putRec(nil, "later", 1), nil, delRec(nil, "before-0")} {
				if err := commit(t, s, recs); !errors.Is(err, ErrStopped) {
					t.Errorf("append %d after the failure = %v, want ErrStopped", i, err)
				}
			}
			if err := s.Snapshot(walkOf(want)); err == nil {
				t.Errorf("Snapshot after the failure succeeded")
			}
			if s2, w2 := disk.Counts(); s2 != syncs || w2 != writes {
				t.Errorf("after the failure the store synced %d and wrote %d more times, want none", s2-syncs, w2-writes)
			}
			if err := s.Close(); !errors.Is(err, ErrStopped) {
				t.Errorf("Close = %v, want ErrStopped", err)
			}
			disk.FailSyncFrom(0, false)
			disk.FailWriteFrom(0)
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

// TestFullDisk runs out of space in the middle of a frame: the append is
// refused, the partial frame is cut away, and the store goes on: a frame
// that fits is written (the owner has undone the refused one, so nothing
// in memory depends on it), and once space is back every frame is.
func TestFullDisk(t *testing.T) {
	disk := faultfs.New(1)
	s, _ := mustOpen(t, faultOpts(disk, 0))
	acked := state{}
	for i := range 5 {
		k := fmt.Sprintf("k%d", i)
		mustCommit(t, s, putRec(nil, k, 1))
		acked[k] = 1
	}
	seg := lastSegment(t, disk)
	before := disk.Contents(seg)

	small := putRec(nil, "small", 1)
	disk.SetFree(int64(frameHeader + len(small) + 4)) // the small frame fits, the big one does not
	big, bigState := bigFrame()
	if _, err := s.Append(big); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append on a full disk = %v, want ErrNoSpace", err)
	}
	if got := disk.Contents(seg); !bytes.Equal(got, before) {
		t.Fatalf("segment after the refused frame has %d bytes, want the %d from before (partial frame cut)", len(got), len(before))
	}
	if !s.NoSpace() {
		t.Fatal("NoSpace() = false after a full disk")
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v after a full disk, want nil (not fail-stop)", err)
	}
	mustCommit(t, s, small)
	acked["small"] = 1
	if s.NoSpace() {
		t.Fatal("NoSpace() = true after a frame was written")
	}
	if err := commit(t, s, nil); err != nil {
		t.Fatalf("empty append after a refused one = %v", err)
	}
	if _, err := s.Append(big); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append of the big frame again = %v, want ErrNoSpace", err)
	}
	disk.SetFree(-1)
	mustCommit(t, s, big)
	maps.Copy(acked, bigState)
	_ = s.Close()
	crashAndReopen(t, disk, acked)
}

// TestFullDiskRefusesOnlyThatFrame holds one append inside the write that
// runs out of space while others wait to write: the one that did not fit is
// refused, the ones after it that fit are written and acknowledged, and a
// power loss keeps exactly those.
func TestFullDiskRefusesOnlyThatFrame(t *testing.T) {
	disk := faultfs.New(1)
	s, _ := mustOpen(t, faultOpts(disk, 0))
	mustCommit(t, s, putRec(nil, "k0", 1))

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	disk.OnWrite(func(string) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	disk.SetFree(200)
	big, _ := bigFrame()
	if len(big) <= 200 {
		t.Fatalf("the big frame (%d bytes) fits", len(big))
	}
	first := make(chan error, 1)
	go func() { _, err := s.Append(big); first <- err }()
	<-entered
	next := make(chan error, 1)
	go func() { next <- commit(t, s, putRec(nil, "small", 1)) }()
	close(release)
	if err := <-first; !errors.Is(err, ErrNoSpace) {
		t.Fatalf("the frame that ran out of space = %v, want ErrNoSpace", err)
	}
	if err := <-next; err != nil {
		t.Fatalf("the frame after it, which fits = %v", err)
	}
	_ = s.Close()
	crashAndReopen(t, disk, state{"k0": 1, "small": 1})
}

// TestFullDiskAtRotation runs out of space for a new segment's header: that
// loses nothing, so the store goes on in the old segment and rotates once
// there is space.
func TestFullDiskAtRotation(t *testing.T) {
	disk := faultfs.New(1)
	// Full to the byte after k0: the frame of k1 starts a rotation.
	segBytes := int64(len(walMagic) + frameHeader + len(putRec(nil, "k0", 1)))
	s, _ := mustOpen(t, faultOpts(disk, segBytes))
	mustCommit(t, s, putRec(nil, "k0", 1))
	_, writes := disk.Counts()
	disk.SetFree(int64(frameHeader + len(putRec(nil, "k1", 1)) + 3))
	mustCommit(t, s, putRec(nil, "k1", 1)) // fits; the new header does not
	waitFor(t, "the header write", func() bool { _, w := disk.Counts(); return w >= writes+2 })
	disk.SetFree(-1)
	// The writer handles the failed rotation before it takes this batch.
	mustCommit(t, s, putRec(nil, "k2", 1))
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v after a rotation ran out of space", err)
	}
	waitFor(t, "the rotation once there is space", func() bool {
		return slices.Contains(disk.Names(faultDir), segName(2))
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

// TestFullDiskCrashAtRotation: the part of a frame that a full disk cut
// short may reach the disk (kernel writeback) before the store truncates
// it. Once a rotation makes that segment no longer the last one, its tail
// must really be gone, or Open refuses to start: the rotation syncs the old
// segment first, also with no frame since the cut. A power loss anywhere
// in the snapshot after it loses nothing.
func TestFullDiskCrashAtRotation(t *testing.T) {
	for n := int64(1); n <= 9; n++ {
		t.Run(fmt.Sprintf("crash at operation %d of the snapshot", n), func(t *testing.T) {
			disk := faultfs.New(1)
			disk.SetWriteBack(true)
			s, _ := mustOpen(t, faultOpts(disk, 0))
			mustCommit(t, s, putRec(nil, "k0", 1))
			disk.SetFree(20)
			big, _ := bigFrame()
			if _, err := s.Append(big); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("append on a full disk = %v, want ErrNoSpace", err)
			}
			disk.SetFree(-1)
			disk.CrashAfter(n, false)
			_ = s.Snapshot(walkOf(state{"k0": 1}))
			_ = s.Close()
			crashAndReopen(t, disk, state{"k0": 1})
		})
	}
}
