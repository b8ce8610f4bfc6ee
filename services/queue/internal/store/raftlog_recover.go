package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"

	"github.com/batonrun/baton/services/queue/internal/format"

	"go.etcd.io/raft/v3/raftpb"
)

// segments lists the Raft log's segment seqs, sorted. It refuses a
// directory that holds a single member's files, and removes .tmp files
// (interrupted writes, never renamed into place) when clean is set.
func (l *RaftLog) segments(clean bool) ([]uint64, error) {
	names, err := l.fs.List(l.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("list raft log dir: %w", err)
	}
	var segs []uint64
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".tmp"):
			if clean {
				_ = l.fs.Remove(l.path(n))
			}
		case n == "epoch" || strings.HasPrefix(n, "wal-") || strings.HasPrefix(n, "snap-"):
			return nil, fmt.Errorf("%w: %s", ErrNotRaftDir, l.path(n))
		case strings.HasPrefix(n, raftSegPfx):
			if seq, ok := parseSeq(n, raftSegPfx, raftSegSfx); ok {
				segs = append(segs, seq)
			}
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	return segs, nil
}

// recover rebuilds the MemoryStorage from the newest base segment (one
// whose first frame is a snapshot, written by CreateSnapshot) or from
// segment 1, and every segment after it; repairs a torn tail of the last;
// and opens that one for Save.
func (l *RaftLog) recover() error {
	segs, err := l.segments(true)
	if err != nil {
		return err
	}
	l.readRaftClean()
	if len(segs) == 0 && l.cleanSeq != 0 {
		// A clean shutdown left a log here: starting empty would let the
		// member vote and accept entries again as if it had never promised
		// anything.
		return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: l.path(raftSegName(l.cleanSeq)), Why: "segment is missing"})
	}
	if len(segs) == 0 {
		f, size, err := l.newRaftSegment(1)
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("fdatasync raft segment: %w", err)
		}
		if err := l.fs.SyncDir(l.opts.Dir); err != nil {
			f.Close()
			return fmt.Errorf("sync raft log dir: %w", err)
		}
		l.seg, l.segSeq, l.segSize = f, 1, size
		return nil
	}
	// Find where replay starts, reading from the newest segment back: a
	// base holds the whole state up to its snapshot, so what lies before
	// it is left over from a removal a crash interrupted.
	files := make([][]byte, len(segs))
	start := -1
	for i := len(segs) - 1; i >= 0; i-- {
		b, err := l.fs.ReadFile(l.path(raftSegName(segs[i])))
		if err != nil {
			return fmt.Errorf("read raft segment: %w", err)
		}
		files[i] = b
		if isRaftBase(b) {
			start = i
			break
		}
	}
	if start < 0 {
		if segs[0] != 1 {
			// Segments are only removed once a base after them is
			// durable: without one, the log must start at 1.
			return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: l.path(raftSegName(1)), Why: "segment is missing"})
		}
		start = 0
	}
	for i := start + 1; i < len(segs); i++ {
		if segs[i] != segs[i-1]+1 {
			return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: l.path(raftSegName(segs[i-1] + 1)), Why: "segment is missing"})
		}
	}
	for i := start; i < len(segs); i++ {
		seq, last := segs[i], i == len(segs)-1
		floor := int64(0)
		if seq == l.cleanSeq {
			floor = l.cleanSize
		}
		size, err := l.replaySegment(raftSegName(seq), files[i], last, int(floor))
		if err != nil {
			return err
		}
		files[i] = nil // replayed: let it go
		if seq == l.cleanSeq && size < l.cleanSize {
			return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: l.path(raftSegName(seq)), Offset: size, Bytes: l.cleanSize - size,
				Why: fmt.Sprintf("the log ends here, but it held %d bytes at its last clean shutdown: it was cut short", l.cleanSize)})
		}
		if last {
			l.segSeq, l.segSize = seq, size
		}
	}
	for _, seq := range segs[:start] {
		_ = l.fs.Remove(l.path(raftSegName(seq))) // covered by the base
	}
	hs, _, _ := l.ms.InitialState()
	lastIndex, _ := l.ms.LastIndex()
	if hs.Commit > lastIndex {
		// raft would panic on it; it means committed entries were lost.
		return fmt.Errorf("%w: %s: the commit index %d is past the last entry %d", ErrCorrupt, l.opts.Dir, hs.Commit, lastIndex)
	}
	l.hs = hs
	f, err := l.fs.OpenAppend(l.path(raftSegName(l.segSeq)))
	if err != nil {
		return fmt.Errorf("open raft segment: %w", err)
	}
	l.seg = f
	return nil
}

// isRaftBase reports whether segment b starts with a whole frame whose
// first record is a snapshot: a base that CreateSnapshot wrote and synced.
func isRaftBase(b []byte) bool {
	if _, err := format.ParseHeader(b, raftKind, format.RaftSegment); err != nil {
		return false
	}
	payload, _, err := readFrame(b, len(raftMagic))
	return err == nil && payload[0] == raftKindSnapshot
}

// replaySegment applies segment b's frames to the MemoryStorage and returns
// its valid length. The rules are the Store's (recover.go): in the last
// segment a frame torn by a crash (tornAt) ends the log and is cut away,
// unless it lies below floor, the end a clean shutdown synced; any other
// bad frame, anywhere, is corruption.
func (l *RaftLog) replaySegment(name string, b []byte, last bool, floor int) (int64, error) {
	p := l.path(name)
	// A segment's version says how its frames are laid out, not what the
	// entries hold (their data carries format.RaftEntry's version): the
	// last segment is appended to as it is, which a new RaftSegment
	// version would have to change (a new segment of its own, as the
	// single member's store starts).
	if _, herr := readHeader(p, b, raftKind, format.RaftSegment); herr != nil {
		if !errors.Is(herr, format.ErrNotHeader) {
			return 0, herr
		}
		if last && (allZero(b) || strings.HasPrefix(raftMagic, string(b))) {
			// Created, but its header never fully reached the disk:
			// nothing was ever written after it.
			return int64(len(raftMagic)), repairTornHeader(l.fs, l.log, p, raftMagic, &l.repairs)
		}
		why := "bad raft segment header"
		if len(b) >= len(walKind) && string(b[:len(walKind)]) == walKind {
			why = "a single member's log segment, not a Raft log's"
		}
		return 0, fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: p, Bytes: int64(min(len(b), len(raftMagic))), Why: why})
	}
	off := len(raftMagic)
	for off < len(b) {
		payload, n, err := readFrame(b, off)
		if err == nil {
			if err := l.applyFrame(p, off+frameHeader, payload); err != nil {
				return int64(off), err
			}
			off += n
			continue
		}
		if last {
			if torn, why := tornAt(b, off); torn && off < floor {
				return int64(off), fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: p, Offset: int64(off), Bytes: int64(floor - off),
					Why: fmt.Sprintf("%s, but the log held %d bytes at its last clean shutdown: it was cut short", why, floor)})
			} else if torn {
				l.log.Error("repairing a write torn by a crash at the end of the raft log: it was never acknowledged",
					"file", p, "offset", off, "why", why, "dropped_bytes", len(b)-off)
				if err := l.fs.Truncate(p, int64(off)); err != nil {
					return int64(off), fmt.Errorf("truncate torn tail of %s: %w", p, err)
				}
				l.repairs++
				return int64(off), nil
			}
		}
		return int64(off), fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: p, Offset: int64(off), Bytes: int64(nextFrame(b, off) - off), Why: err.Error()})
	}
	return int64(off), nil
}

// applyFrame applies one frame's records, which start at base in file, as
// Save applied them: the snapshot, the entries (replacing the stored ones
// from the first on), the hard state. A record that does not decode, or
// that Save would have refused, in a frame whose checksum holds is
// corruption.
func (l *RaftLog) applyFrame(file string, base int, payload []byte) error {
	var run []raftpb.Entry
	runAt := 0
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		first := l.snapIndex()
		last, _ := l.ms.LastIndex()
		if run[0].Index <= first || run[0].Index > last+1 {
			return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: file, Offset: int64(runAt),
				Why: fmt.Sprintf("entry %d does not continue the log (%d, %d]", run[0].Index, first, last)})
		}
		if err := l.ms.Append(run); err != nil {
			return fmt.Errorf("replay raft entries: %w", err)
		}
		run = run[:0]
		return nil
	}
	for i := 0; i < len(payload); {
		rec, n, err := decodeRaftRecord(payload[i:])
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: file, Offset: int64(base + i), Bytes: int64(len(payload) - i), Why: err.Error()})
		}
		at := base + i
		i += n
		if rec.kind == raftKindEntry {
			if len(run) == 0 {
				runAt = at
			} else if rec.entry.Index != run[len(run)-1].Index+1 {
				return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: file, Offset: int64(at),
					Why: fmt.Sprintf("entry %d follows entry %d in one frame", rec.entry.Index, run[len(run)-1].Index)})
			}
			run = append(run, rec.entry)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		switch rec.kind {
		case raftKindSnapshot:
			if err := l.ms.ApplySnapshot(rec.snap); err != nil {
				return fmt.Errorf("%w: %v", ErrCorrupt, Damage{File: file, Offset: int64(at),
					Why: fmt.Sprintf("snapshot at %d: %v", rec.snap.Metadata.Index, err)})
			}
		case raftKindHardState:
			if err := l.ms.SetHardState(rec.hs); err != nil {
				return fmt.Errorf("replay a raft hard state: %w", err)
			}
		}
	}
	return flush()
}

// readRaftClean reads the file "clean" (Store.readClean's format: segment
// seq and size, then their CRC-32C). A damaged one is ignored: it is only
// ever evidence of a lower bound.
func (l *RaftLog) readRaftClean() {
	b, err := l.fs.ReadFile(l.path(cleanName))
	if err != nil {
		if !isNotExist(err) {
			l.log.Warn("could not read the record of the last clean shutdown", "error", err)
		}
		return
	}
	if len(b) != 20 || crc32.Checksum(b[:16], castagnoli) != binary.BigEndian.Uint32(b[16:]) {
		l.log.Warn("ignoring a damaged record of the last clean shutdown", "file", l.path(cleanName))
		return
	}
	l.cleanSeq, l.cleanSize = binary.BigEndian.Uint64(b), int64(binary.BigEndian.Uint64(b[8:]))
}
