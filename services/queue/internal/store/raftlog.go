package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The Raft log (doc.go, "The Raft log") lives in this package rather than
// beside the replica layer because it is the store's log with other
// payloads: the same FS, frames, torn-tail rules and failure semantics, and
// the same fault-injecting disk in the tests. Nothing of the single
// member's Store is shared at run time: a RaftLog is its own type, in its
// own directory, with its own magic, and the Store's code is unchanged.

var (
	// ErrNotRaftDir is returned by OpenRaftLog for a directory that holds a
	// single member's log (its epoch, segments or snapshots): the two are
	// never read as each other.
	ErrNotRaftDir = errors.New("store: the directory holds a single member's log, not a Raft log")
	// errBadSave is a Save or CreateSnapshot that breaks raft's own rules
	// (a gap in the log, an out-of-date snapshot): a caller's bug, refused
	// before anything is written.
	errBadSave = errors.New("store: raft log: invalid save")
)

const (
	raftKind    = "BTNRFT"
	raftSegPfx  = "raft-"
	raftSegSfx  = ".log"
	raftMaxBody = math.MaxUint32 // a frame's length field is 32 bits
)

func raftSegName(seq uint64) string { return fmt.Sprintf("%s%016x%s", raftSegPfx, seq, raftSegSfx) }

// RaftLogOptions configures a RaftLog.
type RaftLogOptions struct {
	// Dir is the Raft log's own directory; it is created if missing. It
	// must not be a single member's data directory (ErrNotRaftDir).
	Dir string
	// FS is the file system; nil means OS.
	FS FS
	// Logger; nil discards.
	Logger *slog.Logger
	// ObserveSync, if set, is told how long each Save's fdatasync took,
	// as Options.ObserveSync is.
	ObserveSync func(time.Duration)
}

// RaftLog is a member's durable Raft state: the hard state, the latest
// snapshot and the entries after it, in memory as a raft.MemoryStorage that
// the node reads, and on disk as frames that rebuild it at Open.
//
// Save, CreateSnapshot and Close are serialised by the log; the Storage is
// safe to read concurrently with them (MemoryStorage has its own lock, and
// is only changed after the disk holds the change).
type RaftLog struct {
	opts RaftLogOptions
	fs   FS
	log  *slog.Logger
	ms   *raft.MemoryStorage

	mu      sync.Mutex
	seg     File
	segSeq  uint64
	segSize int64
	hs      raftpb.HardState // the last one saved: a base segment repeats it
	buf     []byte           // Save's scratch: header and records
	fatal   error
	closed  bool
	noSpace bool
	unlock  func()
	repairs int
	// bytes counts the payload written since the segment the last snapshot
	// started, for the owner's compaction policy.
	bytes int64
	// The end of the log at the last clean shutdown (file "clean"), as for
	// the Store: no repair may cut segment cleanSeq below cleanSize.
	cleanSeq  uint64
	cleanSize int64
}

// OpenRaftLog recovers the Raft log in opts.Dir (creating an empty one if
// the directory has none) and opens it for Save. On corruption it fails
// with ErrCorrupt naming the file and offset, as the Store's Open does.
func OpenRaftLog(opts RaftLogOptions) (*RaftLog, error) {
	if opts.FS == nil {
		opts.FS = OS{}
	}
	l := &RaftLog{opts: opts, fs: opts.FS, log: opts.Logger, ms: raft.NewMemoryStorage()}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := l.fs.MkdirAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("create raft log dir: %w", err)
	}
	unlock, err := l.fs.Lock(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("lock raft log dir: %w", err)
	}
	if err := l.recover(); err != nil {
		if l.seg != nil {
			l.seg.Close()
		}
		unlock()
		return nil, err
	}
	l.unlock = unlock
	return l, nil
}

// Storage is what the Raft node reads: the state as of the last Save or
// CreateSnapshot that returned nil.
func (l *RaftLog) Storage() raft.Storage { return l.ms }

// MemoryStorage is Storage as its concrete type, for a caller that needs
// more of it than raft.Storage offers; it must not change it.
func (l *RaftLog) MemoryStorage() *raft.MemoryStorage { return l.ms }

// Repairs returns how many torn writes OpenRaftLog repaired.
func (l *RaftLog) Repairs() int { return l.repairs }

// Bytes returns the payload written since the last snapshot's base segment
// began (or since the log began), for the owner's compaction policy.
func (l *RaftLog) Bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// Err returns the error that stopped the log, or nil.
func (l *RaftLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

// NoSpace reports whether the last write ran out of space.
func (l *RaftLog) NoSpace() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.noSpace
}

// Save makes one Ready's state durable: the snapshot (if not empty), the
// entries (an entry at index i replaces every stored entry from i on) and
// the hard state (if not empty), as one frame, one write and one
// fdatasync; then it applies them to Storage. When it returns nil the
// Ready's messages may be sent and its committed entries applied.
//
// An error means Storage did not change. ErrNoSpace: the disk is full and
// nothing of the call is in the log (the frame's written part was cut
// again); the caller may try the same Save again. ErrStopped: a write or
// fdatasync failed, the log stopped for good and whether the frame is
// durable is unknown (fail-stop; the process restarts and recovers).
// ErrClosed after Close.
func (l *RaftLog) Save(hs raftpb.HardState, ents []raftpb.Entry, snap raftpb.Snapshot) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	emptyHS, emptySnap := raft.IsEmptyHardState(hs), raft.IsEmptySnap(snap)
	if emptyHS && emptySnap && len(ents) == 0 {
		return nil
	}
	if err := l.checkSave(hs, ents, snap); err != nil {
		return err
	}
	body := l.buf[:0]
	body = append(body, make([]byte, frameHeader)...)
	if !emptySnap {
		body = appendRaftSnapshot(body, &snap)
	}
	for i := range ents {
		body = appendRaftEntry(body, &ents[i])
	}
	if !emptyHS {
		body = appendRaftHardState(body, hs)
	}
	err := l.writeFrame(l.seg, &l.segSize, body)
	if cap(body) <= 64<<20 {
		l.buf = body[:0] // keep the scratch, but not a huge one
	}
	if err != nil {
		return err
	}
	start := time.Now()
	err = l.seg.Sync()
	if l.opts.ObserveSync != nil {
		l.opts.ObserveSync(time.Since(start))
	}
	if err != nil {
		// The kernel may have dropped the dirty pages (doc.go, Failures):
		// memory keeps the old state, and the log refuses everything from
		// now on, whatever the disk holds.
		return l.stopLocked(fmt.Errorf("fdatasync raft log: %w", err))
	}
	l.bytes += int64(len(body) - frameHeader)
	// Durable: now the node may see it. Checked beforehand, so these
	// cannot refuse.
	if !emptySnap {
		if err := l.ms.ApplySnapshot(snap); err != nil {
			return l.stopLocked(fmt.Errorf("apply a saved snapshot: %w", err))
		}
	}
	if err := l.ms.Append(ents); err != nil {
		return l.stopLocked(fmt.Errorf("apply saved entries: %w", err))
	}
	if !emptyHS {
		l.hs = hs
		if err := l.ms.SetHardState(hs); err != nil {
			return l.stopLocked(fmt.Errorf("apply a saved hard state: %w", err))
		}
	}
	return nil
}

// checkSave refuses what raft never asks for and what MemoryStorage would
// panic on or silently drop: a snapshot not newer than the stored one,
// entries with a gap (among themselves, after the log, or reaching back
// into the snapshot), a commit index past the log. Refused before the write,
// so that the disk never holds a frame that replay could not apply.
func (l *RaftLog) checkSave(hs raftpb.HardState, ents []raftpb.Entry, snap raftpb.Snapshot) error {
	snapIndex := l.snapIndex()
	last, _ := l.ms.LastIndex()
	if !raft.IsEmptySnap(snap) {
		if snap.Metadata.Index <= snapIndex {
			return fmt.Errorf("%w: snapshot at %d is not newer than the stored one at %d", errBadSave, snap.Metadata.Index, snapIndex)
		}
		snapIndex, last = snap.Metadata.Index, snap.Metadata.Index
	}
	if len(ents) > 0 {
		first := ents[0].Index
		if first <= snapIndex || first > last+1 {
			return fmt.Errorf("%w: entries from %d, the log holds (%d, %d]", errBadSave, first, snapIndex, last)
		}
		for i := range ents {
			if ents[i].Index != first+uint64(i) {
				return fmt.Errorf("%w: entry %d follows entry %d", errBadSave, ents[i].Index, ents[i-1].Index)
			}
		}
		last = ents[len(ents)-1].Index
	}
	if !raft.IsEmptyHardState(hs) && hs.Commit > last {
		return fmt.Errorf("%w: commit index %d past the last entry %d", errBadSave, hs.Commit, last)
	}
	return nil
}

func (l *RaftLog) snapIndex() uint64 {
	first, _ := l.ms.FirstIndex()
	return first - 1
}

// usable returns why the log takes no calls, or nil; l.mu is held.
func (l *RaftLog) usable() error {
	switch {
	case l.fatal != nil:
		return l.fatal
	case l.closed:
		return ErrClosed
	}
	return nil
}

// writeFrame fills in body's header (its first frameHeader bytes) and
// writes it to f as one write(2), advancing *size. A write cut short by a
// full disk is cut away again and reported as ErrNoSpace, with nothing
// changed; any other write error stops the log.
func (l *RaftLog) writeFrame(f File, size *int64, body []byte) error {
	payload := body[frameHeader:]
	if len(payload) > raftMaxBody {
		return fmt.Errorf("%w: a frame of %d bytes is larger than a frame can be", errBadSave, len(payload))
	}
	binary.BigEndian.PutUint32(body[0:], uint32(len(payload)))
	binary.BigEndian.PutUint32(body[4:], crc32.Checksum(payload, castagnoli))
	n, err := f.Write(body)
	if err != nil {
		if n > 0 {
			// Cut what did get written, so the file stays a clean series of
			// frames; if even that fails, its tail is unknown.
			if terr := f.Truncate(*size); terr != nil {
				return l.stopLocked(fmt.Errorf("truncate a partial raft frame: %w", terr))
			}
		}
		if errors.Is(err, syscall.ENOSPC) {
			if !l.noSpace {
				l.log.Error("disk full: the raft log refuses saves until space is back", "dir", l.opts.Dir)
			}
			l.noSpace = true
			return fmt.Errorf("write raft log: %w", ErrNoSpace)
		}
		return l.stopLocked(fmt.Errorf("write raft log: %w", err))
	}
	if l.noSpace {
		l.noSpace = false
		l.log.Info("disk space is back: the raft log accepts saves again", "dir", l.opts.Dir)
	}
	*size += int64(len(body))
	return nil
}

// stopLocked stops the log for good; l.mu is held.
func (l *RaftLog) stopLocked(err error) error {
	l.log.Error("raft log stopped: it can no longer be trusted, restart to recover", "error", err)
	err = fmt.Errorf("%w: %w", ErrStopped, err)
	if l.fatal == nil {
		l.fatal = err
	}
	return l.fatal
}

// CreateSnapshot records that the state machine's state at index (which
// must be applied, so committed) is data, with conf state cs (the result of
// the last ApplyConfChange up to index), and compacts the log to it: every
// entry up to index is dropped, from Storage and from the disk.
//
// It starts a new segment that stands on its own (a base): one frame of the
// snapshot, the entries after index and the hard state, synced with its
// directory entry before any older segment is removed, so that at every
// moment of a crash either the old segments or the base hold the whole
// state. Errors as for Save: ErrNoSpace changes nothing; ErrStopped is
// fail-stop.
func (l *RaftLog) CreateSnapshot(index uint64, cs *raftpb.ConfState, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	snapIndex := l.snapIndex()
	last, _ := l.ms.LastIndex()
	switch {
	case index <= snapIndex:
		return fmt.Errorf("%w: snapshot at %d: %w", errBadSave, index, raft.ErrSnapOutOfDate)
	case index > l.hs.Commit || index > last:
		return fmt.Errorf("%w: snapshot at %d beyond the commit index %d", errBadSave, index, l.hs.Commit)
	}
	term, err := l.ms.Term(index)
	if err != nil {
		return fmt.Errorf("term of the snapshot's index %d: %w", index, err)
	}
	// Without a new conf state the snapshot keeps the last one's, as
	// MemoryStorage's CreateSnapshot does: the disk must hold the same.
	prev, _ := l.ms.Snapshot()
	snap := raftpb.Snapshot{Data: data, Metadata: raftpb.SnapshotMetadata{Index: index, Term: term, ConfState: prev.Metadata.ConfState}}
	if cs != nil {
		snap.Metadata.ConfState = *cs
	}
	var keep []raftpb.Entry
	if index < last {
		if keep, err = l.ms.Entries(index+1, last+1, math.MaxUint64); err != nil {
			return fmt.Errorf("entries after the snapshot: %w", err)
		}
	}
	body := make([]byte, frameHeader, frameHeader+len(data)+64*len(keep)+64)
	body = appendRaftSnapshot(body, &snap)
	for i := range keep {
		body = appendRaftEntry(body, &keep[i])
	}
	if !raft.IsEmptyHardState(l.hs) {
		body = appendRaftHardState(body, l.hs)
	}
	// A cut made after a full disk is durable only once synced; it must be
	// before this segment stops being the last, where alone a torn tail is
	// repaired.
	if err := l.seg.Sync(); err != nil {
		return l.stopLocked(fmt.Errorf("fdatasync raft log: %w", err))
	}
	seq := l.segSeq + 1
	f, size, err := l.newRaftSegment(seq)
	if err != nil {
		return err
	}
	if err := l.writeFrame(f, &size, body); err != nil {
		l.dropSegment(f, seq)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return l.stopLocked(fmt.Errorf("fdatasync raft segment: %w", err))
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		f.Close()
		return l.stopLocked(fmt.Errorf("sync raft log dir: %w", err))
	}
	old := l.seg
	l.seg, l.segSeq, l.segSize = f, seq, size
	l.bytes = int64(len(body) - frameHeader)
	old.Close()
	if _, err := l.ms.CreateSnapshot(index, &snap.Metadata.ConfState, data); err != nil {
		return l.stopLocked(fmt.Errorf("apply a created snapshot: %w", err))
	}
	if err := l.ms.Compact(index); err != nil {
		return l.stopLocked(fmt.Errorf("compact the raft log in memory: %w", err))
	}
	// Removing what the base covers needs no fsync: a segment that comes
	// back after a crash is older than the newest base, and Open removes it.
	l.removeBefore(seq)
	return nil
}

// newRaftSegment creates segment seq with its magic, not yet synced; l.mu is
// held. A full disk leaves no file behind.
func (l *RaftLog) newRaftSegment(seq uint64) (File, int64, error) {
	f, err := l.fs.Create(l.path(raftSegName(seq)))
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return nil, 0, fmt.Errorf("create raft segment: %w", ErrNoSpace)
		}
		return nil, 0, fmt.Errorf("create raft segment: %w", err)
	}
	if _, err := f.Write([]byte(raftMagic)); err != nil {
		l.dropSegment(f, seq)
		if errors.Is(err, syscall.ENOSPC) {
			return nil, 0, fmt.Errorf("write raft segment header: %w", ErrNoSpace)
		}
		return nil, 0, l.stopLocked(fmt.Errorf("write raft segment header: %w", err))
	}
	return f, int64(len(raftMagic)), nil
}

// dropSegment removes a new segment that could not be completed, and makes
// the removal durable: were it to come back after a crash, the segment
// being written now would no longer be the last, and its tail no longer
// repairable.
func (l *RaftLog) dropSegment(f File, seq uint64) {
	f.Close()
	if err := l.fs.Remove(l.path(raftSegName(seq))); err != nil && !isNotExist(err) {
		_ = l.stopLocked(fmt.Errorf("remove an unfinished raft segment: %w", err))
		return
	}
	if err := l.fs.SyncDir(l.opts.Dir); err != nil {
		_ = l.stopLocked(fmt.Errorf("sync raft log dir: %w", err))
	}
}

// removeBefore removes the segments older than seq, oldest first.
func (l *RaftLog) removeBefore(seq uint64) {
	segs, err := l.segments(false)
	if err != nil {
		return
	}
	for _, s := range segs {
		if s < seq {
			_ = l.fs.Remove(l.path(raftSegName(s)))
		}
	}
}

func (l *RaftLog) path(name string) string { return filepath.Join(l.opts.Dir, name) }

// Close records where the log ends (file "clean", as for the Store) and
// releases the directory. It writes nothing after a failure.
func (l *RaftLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	defer l.unlock()
	defer l.seg.Close()
	if l.fatal != nil {
		return l.fatal
	}
	// A cut after a full disk may not be synced yet: the clean record must
	// not vouch for bytes the disk does not hold.
	if err := l.seg.Sync(); err != nil {
		return l.stopLocked(fmt.Errorf("fdatasync raft log: %w", err))
	}
	b := binary.BigEndian.AppendUint64(nil, l.segSeq)
	b = binary.BigEndian.AppendUint64(b, uint64(l.segSize))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := writeFileAtomic(l.fs, l.opts.Dir, cleanName, b); err != nil {
		l.log.Warn("could not record the end of the raft log", "error", err)
	}
	return nil
}

// raftMagic is the header of the Raft log segments this build writes.
var raftMagic = string(format.Header(raftKind, format.RaftSegment.Current))
