package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/batonrun/baton/services/queue/internal/store/faultfs"
)

const raftDir = "/r"

// raftModel is what a Raft log must hold: a plain copy of every Save and
// CreateSnapshot that returned nil, with raft's rule that an entry at index
// i replaces the stored ones from i on.
type raftModel struct {
	snap raftpb.Snapshot
	ents []raftpb.Entry // from snap's index + 1 on
	hs   raftpb.HardState
}

func (m *raftModel) clone() *raftModel {
	c := *m
	c.ents = slices.Clone(m.ents)
	return &c
}

func (m *raftModel) first() uint64 { return m.snap.Metadata.Index + 1 }
func (m *raftModel) last() uint64  { return m.snap.Metadata.Index + uint64(len(m.ents)) }

func (m *raftModel) term(i uint64) uint64 {
	if i == m.snap.Metadata.Index {
		return m.snap.Metadata.Term
	}
	return m.ents[i-m.first()].Term
}

func (m *raftModel) save(hs raftpb.HardState, ents []raftpb.Entry, snap raftpb.Snapshot) {
	if !raft.IsEmptySnap(snap) {
		m.snap, m.ents = snap, nil
	}
	if len(ents) > 0 {
		m.ents = append(m.ents[:ents[0].Index-m.first()], ents...)
	}
	if !raft.IsEmptyHardState(hs) {
		m.hs = hs
	}
}

func (m *raftModel) createSnapshot(i uint64, cs *raftpb.ConfState, data []byte) {
	t := m.term(i)
	m.ents = slices.Clone(m.ents[i-m.first()+1:])
	m.snap.Metadata.Index, m.snap.Metadata.Term, m.snap.Data = i, t, data
	if cs != nil {
		m.snap.Metadata.ConfState = *cs
	}
}

// diff compares what st serves with the model, "" when they agree.
func (m *raftModel) diff(st raft.Storage) string {
	var out []string
	hs, cs, _ := st.InitialState()
	if hs != m.hs {
		out = append(out, fmt.Sprintf("hard state %+v, want %+v", hs, m.hs))
	}
	if err := cs.Equivalent(m.snap.Metadata.ConfState); err != nil {
		out = append(out, fmt.Sprintf("conf state: %v", err))
	}
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	if first != m.first() || last != m.last() {
		out = append(out, fmt.Sprintf("first, last index %d, %d, want %d, %d", first, last, m.first(), m.last()))
		return strings.Join(out, "; ")
	}
	for i := first - 1; i <= last; i++ {
		if got, err := st.Term(i); err != nil || got != m.term(i) {
			out = append(out, fmt.Sprintf("term(%d) = %d, %v, want %d", i, got, err, m.term(i)))
		}
	}
	if len(m.ents) > 0 {
		got, err := st.Entries(first, last+1, math.MaxUint64)
		if err != nil || len(got) != len(m.ents) {
			out = append(out, fmt.Sprintf("entries: %d, %v, want %d", len(got), err, len(m.ents)))
		} else {
			for i, e := range got {
				w := m.ents[i]
				if e.Index != w.Index || e.Term != w.Term || e.Type != w.Type || !bytes.Equal(e.Data, w.Data) {
					out = append(out, fmt.Sprintf("entry %d: (%d, %d, %v, %q), want (%d, %d, %v, %q)",
						w.Index, e.Index, e.Term, e.Type, e.Data, w.Index, w.Term, w.Type, w.Data))
				}
			}
		}
	}
	snap, _ := st.Snapshot()
	if snap.Metadata.Index != m.snap.Metadata.Index || snap.Metadata.Term != m.snap.Metadata.Term || !bytes.Equal(snap.Data, m.snap.Data) {
		out = append(out, fmt.Sprintf("snapshot (%d, %d, %q), want (%d, %d, %q)", snap.Metadata.Index, snap.Metadata.Term, snap.Data,
			m.snap.Metadata.Index, m.snap.Metadata.Term, m.snap.Data))
	}
	if len(out) > 6 {
		out = append(out[:6], fmt.Sprintf("... and %d more", len(out)-6))
	}
	return strings.Join(out, "; ")
}

// raftEnts returns entries from..to of one term, with data that names them.
func raftEnts(term, from, to uint64) []raftpb.Entry {
	var out []raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, raftpb.Entry{Index: i, Term: term, Data: fmt.Appendf(nil, "t%d-i%d-%s", term, i, strings.Repeat("x", int(i%7)))})
	}
	return out
}

func openRaft(t *testing.T, opts RaftLogOptions) *RaftLog {
	t.Helper()
	l, err := OpenRaftLog(opts)
	if err != nil {
		t.Fatalf("OpenRaftLog: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func faultRaftOpts(disk *faultfs.Disk) RaftLogOptions {
	return RaftLogOptions{Dir: raftDir, FS: disk.Mount()}
}

// saveBoth saves into the log and, if that succeeds, into the model.
func saveBoth(t *testing.T, l *RaftLog, m *raftModel, hs raftpb.HardState, ents []raftpb.Entry, snap raftpb.Snapshot) {
	t.Helper()
	if err := l.Save(hs, ents, snap); err != nil {
		t.Fatalf("Save: %v", err)
	}
	m.save(hs, ents, snap)
}

func checkModel(t *testing.T, when string, l *RaftLog, m *raftModel) {
	t.Helper()
	if d := m.diff(l.Storage()); d != "" {
		t.Fatalf("%s: %s", when, d)
	}
}

func TestRaftLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := openRaft(t, RaftLogOptions{Dir: dir})
	m := &raftModel{}
	checkModel(t, "empty", l, m)
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1}, raftEnts(1, 1, 3), raftpb.Snapshot{})
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 2}, raftEnts(1, 4, 6), raftpb.Snapshot{})
	conf := raftpb.Entry{Index: 7, Term: 1, Type: raftpb.EntryConfChangeV2, Data: []byte{1, 2, 3}}
	saveBoth(t, l, m, raftpb.HardState{}, []raftpb.Entry{conf, {Index: 8, Term: 1}}, raftpb.Snapshot{})
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 8}, nil, raftpb.Snapshot{})
	checkModel(t, "after the saves", l, m)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l = openRaft(t, RaftLogOptions{Dir: dir})
	checkModel(t, "reopened", l, m)
	saveBoth(t, l, m, raftpb.HardState{Term: 2, Vote: 3, Commit: 9}, raftEnts(2, 9, 9), raftpb.Snapshot{})
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l = openRaft(t, RaftLogOptions{Dir: dir})
	checkModel(t, "reopened again", l, m)
	if l.Repairs() != 0 {
		t.Errorf("Repairs() = %d after clean shutdowns, want 0", l.Repairs())
	}
}

// One Save is one frame: one write and one fdatasync, however many entries
// it holds (one Ready, one group commit).
func TestRaftLogSaveIsOneWriteAndOneSync(t *testing.T) {
	disk := faultfs.New(1)
	l := openRaft(t, faultRaftOpts(disk))
	syncs, writes := disk.Counts()
	if err := l.Save(raftpb.HardState{Term: 1, Vote: 1, Commit: 50}, raftEnts(1, 1, 100), raftpb.Snapshot{}); err != nil {
		t.Fatalf("Save: %v", err)
	}
	s2, w2 := disk.Counts()
	if s2-syncs != 1 || w2-writes != 1 {
		t.Errorf("a Save of 100 entries made %d syncs and %d writes, want 1 and 1", s2-syncs, w2-writes)
	}
	if err := l.Save(raftpb.HardState{}, nil, raftpb.Snapshot{}); err != nil {
		t.Fatalf("empty Save: %v", err)
	}
	if s3, w3 := disk.Counts(); s3 != s2 || w3 != w2 {
		t.Errorf("an empty Save wrote or synced")
	}
}

func TestRaftLogConflictingEntriesAcrossReopen(t *testing.T) {
	disk := faultfs.New(1)
	l := openRaft(t, faultRaftOpts(disk))
	m := &raftModel{}
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 4}, raftEnts(1, 1, 10), raftpb.Snapshot{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openRaft(t, faultRaftOpts(disk))
	// A new leader of term 2 overwrites the uncommitted 6..10 with 6..8.
	saveBoth(t, l, m, raftpb.HardState{Term: 2, Vote: 2, Commit: 4}, raftEnts(2, 6, 8), raftpb.Snapshot{})
	checkModel(t, "after the conflicting append", l, m)
	disk.Crash() // every Save returned, so all of it is durable
	l = openRaft(t, faultRaftOpts(disk))
	checkModel(t, "after a power loss", l, m)
	if last, _ := l.Storage().LastIndex(); last != 8 {
		t.Fatalf("LastIndex = %d, want 8: the superseded entries 9 and 10 came back", last)
	}
	if _, err := l.Storage().Term(9); !errors.Is(err, raft.ErrUnavailable) {
		t.Errorf("Term(9) error = %v, want ErrUnavailable", err)
	}
	// And again at an index inside the same frame, across two more reopens.
	saveBoth(t, l, m, raftpb.HardState{Term: 3, Vote: 3, Commit: 5}, raftEnts(3, 7, 12), raftpb.Snapshot{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openRaft(t, faultRaftOpts(disk))
	checkModel(t, "after the second conflicting append", l, m)
	if term, _ := l.Storage().Term(6); term != 2 {
		t.Errorf("Term(6) = %d, want 2", term)
	}
}

// A power loss in the middle of a Save leaves a torn last frame: reopening
// cuts it, and lands on the last Save that returned or on the torn one
// whole, never on anything before the last Save that returned.
func TestRaftLogTornLastFrame(t *testing.T) {
	repaired := 0
	for seed := uint64(1); seed <= 60; seed++ {
		disk := faultfs.New(seed)
		l, err := OpenRaftLog(faultRaftOpts(disk))
		if err != nil {
			t.Fatal(err)
		}
		m := &raftModel{}
		saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 2}, raftEnts(1, 1, 3), raftpb.Snapshot{})
		saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 5}, raftEnts(1, 4, 6), raftpb.Snapshot{})
		before := m.clone()
		hs := raftpb.HardState{Term: 2, Vote: 2, Commit: 5}
		ents := raftEnts(2, 6, 40) // large enough to be cut at many places
		after := m.clone()
		after.save(hs, ents, raftpb.Snapshot{})
		// The Save's write runs, then the crash comes at its fdatasync and
		// keeps a random part of the unsynced bytes (sometimes as zeros).
		disk.CrashAfter(2, true)
		if err := l.Save(hs, ents, raftpb.Snapshot{}); err == nil {
			t.Fatalf("seed %d: Save returned nil through a power loss", seed)
		}
		l2, err := OpenRaftLog(faultRaftOpts(disk))
		if err != nil {
			t.Fatalf("seed %d: reopen after a torn write: %v", seed, err)
		}
		repaired += l2.Repairs()
		if d1, d2 := before.diff(l2.Storage()), after.diff(l2.Storage()); d1 != "" && d2 != "" {
			t.Fatalf("seed %d: neither the last returned Save (%s) nor the torn one (%s)", seed, d1, d2)
		}
		_ = l2.Close()
		// Repaired once is repaired for good: a clean reopen agrees.
		l3 := openRaft(t, faultRaftOpts(disk))
		if l3.Repairs() != 0 {
			t.Fatalf("seed %d: a second reopen repaired again", seed)
		}
		_ = l3.Close()
	}
	if repaired == 0 {
		t.Fatal("no seed left a torn frame to repair: the test did not test repair")
	}
	t.Logf("%d of 60 power losses left a torn frame that was repaired", repaired)
}

// TestRaftLogRepairsTornSegmentHeader: a crash right after a new segment
// was created can leave it empty, with part of its magic, or with zeros;
// nothing was written after it, so opening rewrites its header, counts the
// repair, and the log goes on.
func TestRaftLogRepairsTornSegmentHeader(t *testing.T) {
	for name, header := range map[string][]byte{
		"empty":          {},
		"part of it":     []byte(raftMagic[:3]),
		"all but a byte": []byte(raftMagic[:len(raftMagic)-1]),
		"zeros":          make([]byte, len(raftMagic)),
	} {
		t.Run(name, func(t *testing.T) {
			files, m := raftFiles(t)
			delete(files, cleanName) // a crash, not a clean shutdown
			seg := raftSegName(2)
			files[seg] = header
			disk := faultfs.NewWith(raftDir, files)
			l := openRaft(t, faultRaftOpts(disk))
			if l.Repairs() != 1 {
				t.Errorf("Repairs() = %d, want 1", l.Repairs())
			}
			checkModel(t, "after the repair", l, m)
			if b := disk.Contents(raftDir + "/" + seg); string(b) != raftMagic {
				t.Errorf("repaired segment holds %q, want the magic", b)
			}
			saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 6}, raftEnts(1, 6, 6), raftpb.Snapshot{})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openRaft(t, faultRaftOpts(disk))
			if l.Repairs() != 0 {
				t.Errorf("a clean reopen repaired again")
			}
			checkModel(t, "after a Save past the repair", l, m)
		})
	}
}

// raftFiles saves a small log on a fault disk and returns its files.
func raftFiles(t *testing.T) (map[string][]byte, *raftModel) {
	t.Helper()
	disk := faultfs.New(1)
	l := openRaft(t, faultRaftOpts(disk))
	m := &raftModel{}
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 1}, raftEnts(1, 1, 2), raftpb.Snapshot{})
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 3}, raftEnts(1, 3, 4), raftpb.Snapshot{})
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 4}, raftEnts(1, 5, 5), raftpb.Snapshot{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return disk.Files(raftDir), m
}

func TestRaftLogDamage(t *testing.T) {
	seg := raftSegName(1)
	t.Run("a frame cut short at the end is repaired", func(t *testing.T) {
		files, m := raftFiles(t)
		delete(files, cleanName) // a crash, not a clean shutdown
		clean := len(files[seg])
		files[seg] = append(files[seg], 0, 0, 0, 100, 1, 2, 3, 4, 'E', 6) // header says 100 bytes
		disk := faultfs.NewWith(raftDir, files)
		l := openRaft(t, faultRaftOpts(disk))
		if l.Repairs() != 1 {
			t.Errorf("Repairs() = %d, want 1", l.Repairs())
		}
		checkModel(t, "after the repair", l, m)
		if n := len(disk.Contents(raftDir + "/" + seg)); n != clean {
			t.Errorf("segment is %d bytes after the repair, want %d", n, clean)
		}
	})
	t.Run("a whole frame that fails its checksum is corruption", func(t *testing.T) {
		files, _ := raftFiles(t)
		files[seg][len(raftMagic)+frameHeader+3] ^= 0x40 // inside the first frame
		_, err := OpenRaftLog(faultRaftOpts(faultfs.NewWith(raftDir, files)))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), seg) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", len(raftMagic))) {
			t.Fatalf("OpenRaftLog = %v, want ErrCorrupt naming %s at offset %d", err, seg, len(raftMagic))
		}
	})
	t.Run("a damaged last frame with no zeros is corruption", func(t *testing.T) {
		files, _ := raftFiles(t)
		delete(files, cleanName)
		files[seg][len(files[seg])-1] ^= 0x01
		if _, err := OpenRaftLog(faultRaftOpts(faultfs.NewWith(raftDir, files))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("OpenRaftLog = %v, want ErrCorrupt", err)
		}
	})
	t.Run("a log cut below its clean shutdown is corruption", func(t *testing.T) {
		files, _ := raftFiles(t)
		files[seg] = files[seg][:len(files[seg])-3] // looks torn, but was synced
		if _, err := OpenRaftLog(faultRaftOpts(faultfs.NewWith(raftDir, files))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("OpenRaftLog = %v, want ErrCorrupt", err)
		}
	})
	t.Run("a log whose segments are gone is corruption", func(t *testing.T) {
		files, _ := raftFiles(t)
		delete(files, seg)
		if _, err := OpenRaftLog(faultRaftOpts(faultfs.NewWith(raftDir, files))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("OpenRaftLog = %v, want ErrCorrupt", err)
		}
	})
	t.Run("a single member's data directory is refused", func(t *testing.T) {
		disk := faultfs.New(1)
		s, _ := mustOpen(t, Options{Dir: raftDir, FS: disk.Mount()})
		mustCommit(t, s, putRec(nil, "k", 1))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		before := disk.Files(raftDir)
		if _, err := OpenRaftLog(faultRaftOpts(disk)); !errors.Is(err, ErrNotRaftDir) {
			t.Fatalf("OpenRaftLog on a single member's directory = %v, want ErrNotRaftDir", err)
		}
		if after := disk.Files(raftDir); len(after) != len(before) {
			t.Errorf("the refused open changed the directory: %d files, were %d", len(after), len(before))
		}
	})
	t.Run("a single member's segment under a raft name is refused", func(t *testing.T) {
		files, _ := raftFiles(t)
		copy(files[seg], walMagic)
		_, err := OpenRaftLog(faultRaftOpts(faultfs.NewWith(raftDir, files)))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "single member") {
			t.Fatalf("OpenRaftLog = %v, want ErrCorrupt saying it is a single member's segment", err)
		}
	})
}

func TestRaftLogSyncOrWriteErrorStops(t *testing.T) {
	for _, write := range []bool{false, true} {
		t.Run(fmt.Sprintf("write=%v", write), func(t *testing.T) {
			disk := faultfs.New(1)
			l := openRaft(t, faultRaftOpts(disk))
			m := &raftModel{}
			saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 2}, raftEnts(1, 1, 3), raftpb.Snapshot{})
			if write {
				disk.FailWriteFrom(1)
			} else {
				disk.FailSyncFrom(1, true) // once: the disk would work again
			}
			err := l.Save(raftpb.HardState{Term: 1, Vote: 1, Commit: 3}, raftEnts(1, 4, 5), raftpb.Snapshot{})
			if !errors.Is(err, ErrStopped) {
				t.Fatalf("Save with a failing fdatasync or write = %v, want ErrStopped", err)
			}
			checkModel(t, "after the failed Save", l, m) // the node never sees it
			disk.FailWriteFrom(0)
			syncs, writes := disk.Counts()
			if err := l.Save(raftpb.HardState{Term: 1, Vote: 1, Commit: 3}, raftEnts(1, 4, 5), raftpb.Snapshot{}); !errors.Is(err, ErrStopped) {
				t.Errorf("Save after the failure = %v, want ErrStopped", err)
			}
			if err := l.CreateSnapshot(2, nil, nil); !errors.Is(err, ErrStopped) {
				t.Errorf("CreateSnapshot after the failure = %v, want ErrStopped", err)
			}
			if err := l.Close(); !errors.Is(err, ErrStopped) {
				t.Errorf("Close after the failure = %v, want ErrStopped", err)
			}
			if s2, w2 := disk.Counts(); s2 != syncs || w2 != writes {
				t.Errorf("after the failure the log synced %d and wrote %d more times, want none", s2-syncs, w2-writes)
			}
			disk.Crash()
			l = openRaft(t, faultRaftOpts(disk))
			checkModel(t, "recovered after the failure", l, m)
		})
	}
}

func TestRaftLogNoSpace(t *testing.T) {
	for _, writeBack := range []bool{false, true} {
		t.Run(fmt.Sprintf("writeBack=%v", writeBack), func(t *testing.T) {
			disk := faultfs.New(1)
			disk.SetWriteBack(writeBack) // the cut-short bytes reach the disk anyway
			l := openRaft(t, faultRaftOpts(disk))
			m := &raftModel{}
			saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 2}, raftEnts(1, 1, 3), raftpb.Snapshot{})
			segBefore := disk.Contents(raftDir + "/" + raftSegName(1))
			disk.SetFree(20) // less than the frame
			hs, ents := raftpb.HardState{Term: 1, Vote: 1, Commit: 4}, raftEnts(1, 4, 9)
			if err := l.Save(hs, ents, raftpb.Snapshot{}); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Save on a full disk = %v, want ErrNoSpace", err)
			}
			if !l.NoSpace() || l.Err() != nil {
				t.Errorf("NoSpace() = %v, Err() = %v; want true, nil", l.NoSpace(), l.Err())
			}
			checkModel(t, "after the refused Save", l, m)
			if got := disk.Contents(raftDir + "/" + raftSegName(1)); !bytes.Equal(got, segBefore) {
				t.Errorf("the refused Save left %d bytes in the segment, had %d", len(got), len(segBefore))
			}
			if err := l.CreateSnapshot(2, nil, bytes.Repeat([]byte("s"), 100)); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("CreateSnapshot on a full disk = %v, want ErrNoSpace", err)
			}
			checkModel(t, "after the refused CreateSnapshot", l, m)
			if names := disk.Names(raftDir); slices.Contains(names, raftSegName(2)) {
				t.Errorf("the refused CreateSnapshot left its segment behind: %v", names)
			}

			// Nothing durable changed: a power loss now recovers the old state.
			disk.Crash()
			disk.SetFree(-1)
			l = openRaft(t, faultRaftOpts(disk))
			checkModel(t, "recovered after the refused Save", l, m)

			// Space is back: the same Save goes through.
			saveBoth(t, l, m, hs, ents, raftpb.Snapshot{})
			if l.NoSpace() {
				t.Error("NoSpace() still true after a Save went through")
			}
			disk.Crash()
			l = openRaft(t, faultRaftOpts(disk))
			checkModel(t, "recovered after the retried Save", l, m)
		})
	}
}

func TestRaftLogSnapshots(t *testing.T) {
	disk := faultfs.New(1)
	l := openRaft(t, faultRaftOpts(disk))
	m := &raftModel{}
	voters := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 15}, raftEnts(1, 1, 20), raftpb.Snapshot{})
	if err := l.CreateSnapshot(16, voters, nil); err == nil {
		t.Error("CreateSnapshot past the commit index succeeded")
	}
	if err := l.CreateSnapshot(10, voters, []byte("state@10")); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	m.createSnapshot(10, voters, []byte("state@10"))
	checkModel(t, "after CreateSnapshot", l, m)
	if err := l.CreateSnapshot(10, voters, nil); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Errorf("CreateSnapshot at the same index = %v, want ErrSnapOutOfDate", err)
	}
	if names := disk.Names(raftDir); slices.Contains(names, raftSegName(1)) {
		t.Errorf("the segment the snapshot covers is still there: %v", names)
	}
	if _, err := l.Storage().Entries(10, 12, math.MaxUint64); !errors.Is(err, raft.ErrCompacted) {
		t.Errorf("Entries(10, 12) = %v, want ErrCompacted", err)
	}
	disk.Crash()
	l = openRaft(t, faultRaftOpts(disk))
	checkModel(t, "reopened after CreateSnapshot", l, m)

	saveBoth(t, l, m, raftpb.HardState{Term: 2, Vote: 2, Commit: 20}, raftEnts(2, 18, 25), raftpb.Snapshot{})
	// A snapshot without a new conf state keeps the last one's.
	if err := l.CreateSnapshot(20, nil, []byte("state@20")); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	m.createSnapshot(20, nil, []byte("state@20"))
	// A leader's snapshot, far ahead, with the entries after it.
	leader := raftpb.Snapshot{Data: []byte("state@40"), Metadata: raftpb.SnapshotMetadata{Index: 40, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{4}}}}
	saveBoth(t, l, m, raftpb.HardState{Term: 3, Vote: 0, Commit: 40}, raftEnts(3, 41, 42), leader)
	checkModel(t, "after a leader's snapshot", l, m)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openRaft(t, faultRaftOpts(disk))
	checkModel(t, "reopened after a leader's snapshot", l, m)
	if err := l.Save(raftpb.HardState{}, raftEnts(3, 40, 40), raftpb.Snapshot{}); err == nil {
		t.Error("Save of an entry inside the snapshot succeeded")
	}
	if err := l.Save(raftpb.HardState{}, raftEnts(3, 44, 44), raftpb.Snapshot{}); err == nil {
		t.Error("Save of an entry after a gap succeeded")
	}
	checkModel(t, "after refused Saves", l, m)
}

// A power loss at every file-system operation of CreateSnapshot recovers
// either the state before it or after it, and the log goes on from there.
func TestRaftLogPowerLossDuringCreateSnapshot(t *testing.T) {
	for _, torn := range []bool{false, true} {
		for n := int64(1); ; n++ {
			disk := faultfs.New(uint64(n))
			l, err := OpenRaftLog(faultRaftOpts(disk))
			if err != nil {
				t.Fatal(err)
			}
			m := &raftModel{}
			saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 5}, raftEnts(1, 1, 6), raftpb.Snapshot{})
			saveBoth(t, l, m, raftpb.HardState{Term: 1, Vote: 1, Commit: 12}, raftEnts(1, 7, 14), raftpb.Snapshot{})
			before, after := m.clone(), m.clone()
			cs := &raftpb.ConfState{Voters: []uint64{1}}
			after.createSnapshot(10, cs, []byte("state@10"))
			disk.CrashAfter(n, torn)
			err = l.CreateSnapshot(10, cs, []byte("state@10"))
			done := err == nil
			if done {
				disk.Crash() // past its last operation: a power loss just after
			}
			l2, err := OpenRaftLog(faultRaftOpts(disk))
			if err != nil {
				t.Fatalf("torn=%v, crash at op %d: reopen: %v", torn, n, err)
			}
			d1, d2 := before.diff(l2.Storage()), after.diff(l2.Storage())
			if done && d2 != "" {
				t.Fatalf("torn=%v: CreateSnapshot returned nil but did not survive: %s", torn, d2)
			}
			if d1 != "" && d2 != "" {
				t.Fatalf("torn=%v, crash at op %d: neither before (%s) nor after (%s)", torn, n, d1, d2)
			}
			cur := before
			if d2 == "" {
				cur = after
			}
			saveBoth(t, l2, cur, raftpb.HardState{Term: 2, Vote: 2, Commit: 15}, raftEnts(2, 15, 16), raftpb.Snapshot{})
			disk.Crash()
			l3, err := OpenRaftLog(faultRaftOpts(disk))
			if err != nil {
				t.Fatalf("torn=%v, crash at op %d: second reopen: %v", torn, n, err)
			}
			if d := cur.diff(l3.Storage()); d != "" {
				t.Fatalf("torn=%v, crash at op %d: after a Save on the recovered log: %s", torn, n, d)
			}
			_ = l3.Close()
			if done {
				break
			}
			if n > 100 {
				t.Fatal("CreateSnapshot never completed")
			}
		}
	}
}

// The log against the model over random Saves (appends that overwrite a
// suffix, new terms, commits, a leader's snapshots), CreateSnapshots, clean
// reopens, power losses between calls and power losses inside a call (torn
// or not), the last of which must recover the state before the call or
// after it.
func TestRaftLogRandomAgainstModel(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 7))
		disk := faultfs.New(seed)
		l, err := OpenRaftLog(faultRaftOpts(disk))
		if err != nil {
			t.Fatal(err)
		}
		m := &raftModel{}
		term := uint64(1)
		reopen := func(step int, alt *raftModel) {
			l2, err := OpenRaftLog(faultRaftOpts(disk))
			if err != nil {
				t.Fatalf("seed %d step %d: reopen: %v", seed, step, err)
			}
			l = l2
			if d := m.diff(l.Storage()); d != "" {
				if alt == nil || alt.diff(l.Storage()) != "" {
					t.Fatalf("seed %d step %d: after reopen: %s", seed, step, d)
				}
				m = alt
			}
		}
		for step := range 200 {
			var crashIn bool
			if rng.IntN(15) == 0 {
				disk.CrashAfter(1+rng.Int64N(6), rng.IntN(2) == 0)
				crashIn = true
			}
			next := m.clone()
			var err error
			switch op := rng.IntN(20); {
			case op < 15:
				if rng.IntN(4) == 0 {
					term++
				}
				// Overwrite from anywhere after the commit index.
				from := m.last() + 1
				if rng.IntN(3) == 0 && m.last() > m.hs.Commit {
					from = m.hs.Commit + 1 + rng.Uint64N(m.last()-m.hs.Commit)
				}
				ents := raftEnts(term, from, from+rng.Uint64N(6)-1)
				last := from - 1 + uint64(len(ents))
				hs := raftpb.HardState{Term: term, Vote: rng.Uint64N(4), Commit: m.hs.Commit}
				if last > hs.Commit && rng.IntN(2) == 0 {
					hs.Commit += 1 + rng.Uint64N(last-hs.Commit)
				}
				if rng.IntN(5) == 0 {
					hs = raftpb.HardState{}
				}
				next.save(hs, ents, raftpb.Snapshot{})
				err = l.Save(hs, ents, raftpb.Snapshot{})
			case op < 17:
				if m.hs.Commit <= m.snap.Metadata.Index {
					disk.CancelCrash() // nothing runs: the crash must not hit the next call
					continue
				}
				i := m.snap.Metadata.Index + 1 + rng.Uint64N(m.hs.Commit-m.snap.Metadata.Index)
				cs := &raftpb.ConfState{Voters: []uint64{1, rng.Uint64N(5) + 2}}
				data := fmt.Appendf(nil, "state@%d", i)
				next.createSnapshot(i, cs, data)
				err = l.CreateSnapshot(i, cs, data)
			case op < 18:
				term++
				idx := m.last() + 1 + rng.Uint64N(5)
				snap := raftpb.Snapshot{Data: fmt.Appendf(nil, "leader@%d", idx), Metadata: raftpb.SnapshotMetadata{
					Index: idx, Term: term, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
				hs := raftpb.HardState{Term: term, Commit: idx}
				ents := raftEnts(term, idx+1, idx+rng.Uint64N(3))
				next.save(hs, ents, snap)
				err = l.Save(hs, ents, snap)
			case op < 19:
				if err := l.Close(); err != nil && !crashIn {
					t.Fatalf("seed %d step %d: Close: %v", seed, step, err)
				}
				if crashIn {
					disk.Crash()
				}
				reopen(step, nil)
				continue
			default:
				disk.Crash()
				reopen(step, nil)
				continue
			}
			if crashIn {
				// The call may have run past the crash point or not.
				disk.Crash()
				alt := next
				if err == nil {
					m, alt = next, nil
				}
				reopen(step, alt)
				continue
			}
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			m = next
			if d := m.diff(l.Storage()); d != "" {
				t.Fatalf("seed %d step %d: %s", seed, step, d)
			}
		}
		_ = l.Close()
	}
}
