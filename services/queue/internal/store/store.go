package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
)

var (
	// ErrNoSpace is returned by Append when the disk is full: nothing of
	// the call is in the log. The next Append tries again.
	ErrNoSpace = errors.New("store: no space left on device")
	// ErrStopped is returned once a write or fsync has failed: the store has
	// stopped for good (fail-stop) and the process must restart and recover.
	ErrStopped = errors.New("store: stopped after a write failure")
	// ErrCorrupt is returned by Open when a file is damaged anywhere but at
	// the torn tail of the last segment.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store: closed")
	// ErrLocked is returned when another process holds the data directory.
	ErrLocked = errors.New("store: the data directory is in use by another process")
)

// File headers name the kind of file and its version (package format):
// a six-byte magic and two digits, "BTNWAL01".
const (
	walKind     = "BTNWAL"
	snapKind    = "BTNSNP"
	snapFooter  = "BTNSNPEN"
	frameHeader = 8
)

// The headers this build writes.
var (
	walMagic  = string(format.Header(walKind, format.WALSegment.Current))
	snapMagic = string(format.Header(snapKind, format.WALSnapshot.Current))
)

// readHeader checks the header of file p, b's first bytes, for a kind of
// file of format f, and returns its version: nil error if this build reads
// it; format's ErrNewer or ErrOlder, naming the file, for a version it
// does not read (not corruption: another build reads it);
// format.ErrNotHeader for bytes that are no such header, which the caller
// treats as a torn or damaged one, the version then f's current (a
// damaged header says nothing, and the current version is what this build
// wrote last). The file's records are of f.RecordsAt that version.
func readHeader(p string, b []byte, kind string, f format.Format) (format.Version, error) {
	v, err := format.ParseHeader(b, kind, f)
	switch {
	case errors.Is(err, format.ErrNotHeader):
		return f.Current, err
	case err != nil:
		return 0, fmt.Errorf("store: %s: %w", p, err)
	}
	return v, nil
}

// recordVersion is the version of the records this build writes, in the
// segments and snapshots it writes (their Current).
var recordVersion = format.WALSegment.RecordsAt(format.WALSegment.Current)

// RecordVersion is the version of the records Append must be given: the
// one the segments this store writes hold.
func (s *Store) RecordVersion() format.Version { return recordVersion }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options configures a Store.
type Options struct {
	// Dir is the data directory; it is created if missing.
	Dir string
	// FS is the file system; nil means OS.
	FS FS
	// SegmentBytes starts a new segment once one grows past it (64 MiB when
	// 0).
	SegmentBytes int64
	// Logger; nil discards.
	Logger *slog.Logger
	// LazyDelay bounds how long the frames of AppendLazy wait for an
	// Append to share its fdatasync (DefaultLazyDelay when 0).
	LazyDelay time.Duration
	// ObserveSync, if set, is told how long each fdatasync of a batch
	// took (the group commit's wait on the disk), for a histogram: the
	// first sign of a disk going slow. Called on the writer goroutine.
	ObserveSync func(time.Duration)

	// ackBeforeSync answers callers before fdatasync: the broken store the
	// power-loss test must catch (its negative control). Tests only.
	ackBeforeSync bool
}

// Store is the write-ahead log. Append is safe for concurrent use: each
// call writes its frame at once, and one goroutine syncs, so concurrent
// callers share each fsync.
type Store struct {
	opts Options
	fs   FS
	log  *slog.Logger

	mu       sync.Mutex
	wake     *sync.Cond // the writer waits on it for frames or rotations
	rotated  *sync.Cond // Appends wait on it while the writer rotates
	cur      *Batch     // frames written since the last sync began
	inflight *Batch     // being synced
	frame    []byte     // Append's scratch: header and records
	fatal    error
	closed   bool
	rotating bool // no Append may write: the segment is being replaced
	noSpace  bool // the last write ran out of space
	rotates  []chan rotation
	walBytes int64 // appended since the last snapshot
	snapSize int64
	// lazyDue is set Options.LazyDelay after the first lazy frame of a batch
	// nothing waits on (AppendLazy): then the writer syncs it anyway.
	lazyDue   bool
	lazyArmed bool

	// The segment being written. Append writes and the writer replaces it
	// under mu; the writer syncs it outside mu (it alone closes it).
	seg     File
	segSeq  uint64
	segSize int64

	names   record.Names // interned queue names, during recovery only
	repairs int          // torn writes repaired by Open
	unlock  func()       // releases the data directory's lock

	// The end of the log at the last clean shutdown (file "clean"): no
	// repair may cut segment cleanSeq shorter than cleanSize.
	cleanSeq  uint64
	cleanSize int64
	epochMu   sync.Mutex
	epoch     uint64
	stopped   chan struct{}
	// durable counts the frames fsynced since Open: the queue's applied
	// index with one member (ClusterService).
	durable atomic.Uint64
}

type rotation struct {
	seq uint64
	err error
}

// Batch is the group commit that an Append joined: one fdatasync covering
// every frame written since the one before began.
type Batch struct {
	frames int // written into the log, not yet synced
	// urgent: a caller waits on it (an Append, not only AppendLazy), so
	// the writer syncs it as soon as it can.
	urgent bool
	done   chan struct{}
	err    error
	// early is set by the writer when ackBeforeSync answered the batch
	// before its fdatasync: its err and done must not be touched again.
	early bool
}

// Wait blocks until the batch is durable (nil) or failed. If ctx ends first
// it returns ctx's error; the batch may still become durable.
func (b *Batch) Wait(ctx context.Context) error {
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newBatch() *Batch { return &Batch{done: make(chan struct{})} }

// durable is the batch of an empty Append when nothing waits for a sync.
var durable = func() *Batch { b := newBatch(); close(b.done); return b }()

// Open recovers the store in opts.Dir, calling apply for every stored record
// in order, bumps the epoch, and starts the writer.
func Open(opts Options, apply func(*record.Record)) (*Store, error) {
	if opts.FS == nil {
		opts.FS = OS{}
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 64 << 20
	}
	if opts.LazyDelay <= 0 {
		opts.LazyDelay = DefaultLazyDelay
	}
	s := &Store{opts: opts, fs: opts.FS, log: opts.Logger, cur: newBatch(), stopped: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.wake = sync.NewCond(&s.mu)
	s.rotated = sync.NewCond(&s.mu)
	if err := s.fs.MkdirAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	unlock, err := s.fs.Lock(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := s.bumpEpoch(); err != nil {
		unlock()
		return nil, err
	}
	if err := s.recover(apply); err != nil {
		unlock()
		return nil, err
	}
	s.unlock = unlock
	s.names = nil
	go s.writer()
	return s, nil
}

// Epoch returns this run's epoch: larger than every earlier run's.
func (s *Store) Epoch() uint64 {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	return s.epoch
}

// NextEpoch durably moves to a new epoch, for a run that has used up the
// token space of its own.
func (s *Store) NextEpoch() (uint64, error) {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	if err := s.bumpEpoch(); err != nil {
		return 0, err
	}
	return s.epoch, nil
}

// Durable returns how many frames (one per Append of records, so one per
// operation that changed stored state) have been made durable since Open.
// Frames recovered by Open are not counted: the count starts at 0 with each
// run, whose epoch is higher than every earlier run's.
func (s *Store) Durable() uint64 { return s.durable.Load() }

func (s *Store) path(name string) string { return filepath.Join(s.opts.Dir, name) }

func segName(seq uint64) string  { return fmt.Sprintf("wal-%016x.log", seq) }
func snapName(seq uint64) string { return fmt.Sprintf("snap-%016x.snap", seq) }

// RaiseEpoch durably makes this run's epoch at least min, so that the
// next run's (one more) is above min: for a store restored from a backup
// of a queue whose tokens reached epoch min, none of which may be handed
// out again.
func (s *Store) RaiseEpoch(min uint64) error {
	s.epochMu.Lock()
	defer s.epochMu.Unlock()
	if s.epoch >= min {
		return nil
	}
	if err := s.writeEpoch(min); err != nil {
		return err
	}
	s.epoch = min
	return nil
}

func (s *Store) bumpEpoch() error {
	var e uint64
	b, err := s.fs.ReadFile(s.path("epoch"))
	switch {
	case err == nil:
		if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.BigEndian.Uint32(b[8:]) {
			return fmt.Errorf("%w: %s: bad epoch file", ErrCorrupt, s.path("epoch"))
		}
		e = binary.BigEndian.Uint64(b[:8])
	case !isNotExist(err):
		return fmt.Errorf("read epoch: %w", err)
	}
	e++
	if err := s.writeEpoch(e); err != nil {
		return err
	}
	s.epoch = e
	return nil
}

// writeEpoch replaces the epoch file with e.
func (s *Store) writeEpoch(e uint64) error {
	buf := binary.BigEndian.AppendUint64(nil, e)
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	if err := s.writeAtomic("epoch", buf); err != nil {
		return fmt.Errorf("write epoch: %w", err)
	}
	return nil
}

// writeAtomic replaces name with data: tmp, fsync, rename, fsync dir.
func (s *Store) writeAtomic(name string, data []byte) error {
	return writeFileAtomic(s.fs, s.opts.Dir, name, data)
}

func isNotExist(err error) bool { return errors.Is(err, syscall.ENOENT) }

func parseSeq(name, prefix, suffix string) (uint64, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	var seq uint64
	hex := strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix)
	if len(hex) != 16 {
		return 0, false
	}
	if _, err := fmt.Sscanf(hex, "%016x", &seq); err != nil {
		return 0, false
	}
	return seq, true
}

// newSegment creates segment seq and makes it the one written to.
func (s *Store) newSegment(seq uint64) error {
	f, err := s.fs.Create(s.path(segName(seq)))
	if err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	if _, err := f.Write([]byte(walMagic)); err != nil {
		f.Close()
		_ = s.fs.Remove(s.path(segName(seq)))
		return fmt.Errorf("write segment header: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return s.stop(fmt.Errorf("sync segment: %w", err))
	}
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		f.Close()
		return s.stop(fmt.Errorf("sync data dir: %w", err))
	}
	s.mu.Lock()
	old := s.seg
	s.seg, s.segSeq, s.segSize = f, seq, int64(len(walMagic))
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Append writes encoded records to the log as one frame and returns the
// group commit that makes them durable; the caller waits on it before it
// answers. An error means nothing of recs is in the log: ErrNoSpace when the
// disk is full (the caller undoes what the records describe and may try
// again), ErrStopped after a failure that stopped the store, ErrClosed. An
// empty Append returns the latest batch not yet durable (or a finished one),
// so waiting on it covers every record appended before.
//
// The frame is written here, under the store's lock, rather than by the
// writer, so that a full disk is known before the caller lets anyone see
// its change: a change is never visible unless its frame is in the log.
func (s *Store) Append(recs []byte) (*Batch, error) { return s.append(recs, false) }

// DefaultLazyDelay is Options.LazyDelay's default: long enough for a
// lone worker's next Add to come and share the sync, short enough that a
// crash rarely offers an acked key again.
const DefaultLazyDelay = 5 * time.Millisecond

// AppendLazy is Append for records whose caller does not wait for their
// durability (a work stream's acks of success, which may be answered
// before their record is durable: losing one only offers a key once
// more). The writer does not sync for them alone at once: they share the
// next Append's fdatasync, or are synced Options.LazyDelay after the
// first of them, whichever comes first. Without it a lone worker's ack would
// start an fdatasync that the Add following it must wait out before its
// own: two syncs a key where one does.
func (s *Store) AppendLazy(recs []byte) (*Batch, error) { return s.append(recs, true) }

func (s *Store) append(recs []byte, lazy bool) (*Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.rotating && s.fatal == nil && !s.closed {
		s.rotated.Wait()
	}
	switch {
	case s.fatal != nil:
		return nil, s.fatal
	case s.closed:
		return nil, ErrClosed
	}
	if len(recs) == 0 {
		switch {
		case s.cur.frames > 0:
			// Its caller waits on it: lazy frames in it wait no more.
			s.cur.urgent = true
			s.wake.Signal()
			return s.cur, nil
		case s.inflight != nil:
			return s.inflight, nil
		}
		return durable, nil
	}
	frame := append(s.frame[:0], make([]byte, frameHeader)...)
	frame = append(frame, recs...)
	binary.BigEndian.PutUint32(frame[0:], uint32(len(recs)))
	binary.BigEndian.PutUint32(frame[4:], crc32.Checksum(recs, castagnoli))
	n, err := s.seg.Write(frame)
	if cap(frame) <= 64<<20 {
		s.frame = frame[:0] // a busy log would otherwise regrow megabytes a call
	}
	if err != nil {
		if n > 0 {
			// Cut what did get written, so the log stays a clean series of
			// frames; if even that fails, its tail is unknown.
			if terr := s.seg.Truncate(s.segSize); terr != nil {
				return nil, s.stopLocked(fmt.Errorf("truncate a partial frame: %w", terr))
			}
		}
		if errors.Is(err, syscall.ENOSPC) {
			if !s.noSpace {
				s.log.Error("disk full: refusing changes until space is back", "dir", s.opts.Dir)
			}
			s.noSpace = true
			return nil, ErrNoSpace
		}
		return nil, s.stopLocked(fmt.Errorf("write log: %w", err))
	}
	if s.noSpace {
		s.noSpace = false
		s.log.Info("disk space is back: accepting changes again", "dir", s.opts.Dir)
	}
	s.segSize += int64(len(frame))
	s.walBytes += int64(len(recs))
	s.cur.frames++
	switch {
	case !lazy:
		s.cur.urgent = true
		s.wake.Signal()
	case !s.lazyArmed:
		s.lazyArmed = true
		time.AfterFunc(s.opts.LazyDelay, s.lazyFire)
	}
	return s.cur, nil
}

// lazyFire wakes the writer for lazy frames that have waited LazyDelay.
func (s *Store) lazyFire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lazyArmed, s.lazyDue = false, true
	s.wake.Signal()
}

// due reports whether the writer has a batch to sync: an urgent one, or
// lazy frames that waited long enough. s.mu is held.
func (s *Store) due() bool {
	return s.cur.frames > 0 && (s.cur.urgent || s.lazyDue || s.closed)
}

func (s *Store) writer() {
	defer close(s.stopped)
	for {
		s.mu.Lock()
		for !s.due() && len(s.rotates) == 0 && !s.closed && !s.segmentFull() {
			s.wake.Wait()
		}
		if s.closed && s.cur.frames == 0 && len(s.rotates) == 0 {
			seg := s.seg
			s.mu.Unlock()
			if seg != nil {
				seg.Close()
			}
			return
		}
		rotates := s.rotates
		s.rotates = nil
		rotate := len(rotates) > 0 || s.segmentFull()
		if rotate {
			// From here no Append writes: what is written so far ends this
			// segment, and the sync below makes it durable before the next
			// segment exists (only the last segment may have a torn tail).
			s.rotating = true
		}
		b := s.takeBatch()
		seg := s.seg
		s.mu.Unlock()

		switch {
		case b != nil:
			s.sync(seg, b)
		case rotate && s.Err() == nil:
			// Nothing new, but the segment may end in a partial frame cut
			// after a full disk, durable only once synced: it must be gone
			// before this stops being the last segment.
			if err := seg.Sync(); err != nil {
				s.stop(fmt.Errorf("fdatasync log: %w", err))
			}
		}
		if !rotate {
			continue
		}
		// One new segment per rotation request: each snapshot gets a seq of
		// its own, so two snapshots at once (a compaction and another)
		// never share a file name and one cannot install the other's
		// unfinished file.
		for i := 0; i < max(len(rotates), 1); i++ {
			var r rotation
			if r.err = s.Err(); r.err == nil {
				r.err = s.newSegment(s.segSeq + 1)
				if r.err != nil && !errors.Is(r.err, ErrStopped) && !errors.Is(r.err, syscall.ENOSPC) {
					// Fail-stop, as for a frame (doc.go). Going on would
					// also leave a segment of unknown content behind, on
					// which every later rotation, so every snapshot, fails.
					r.err = s.stop(r.err)
				}
			}
			r.seq = s.segSeq
			if len(rotates) > 0 {
				rotates[i] <- r
			}
		}
		s.mu.Lock()
		s.rotating = false
		s.rotated.Broadcast()
		s.mu.Unlock()
	}
}

// segmentFull reports whether the segment has grown past SegmentBytes; s.mu
// is held. A rotation that fails for a full disk leaves it so, and the
// writer tries again once more is written.
func (s *Store) segmentFull() bool { return s.segSize > s.opts.SegmentBytes && s.cur.frames > 0 }

// takeBatch makes the frames written so far the batch being synced; s.mu is
// held. It returns nil when there are none.
func (s *Store) takeBatch() *Batch {
	if s.cur.frames == 0 {
		return nil
	}
	b := s.cur
	s.cur = newBatch()
	s.inflight = b
	s.lazyDue = false
	return b
}

// sync makes batch b durable on seg and answers its callers. A failed
// fdatasync stops the store.
func (s *Store) sync(seg File, b *Batch) {
	if s.opts.ackBeforeSync {
		b.early = true
		close(b.done)
	}
	var err error
	start := time.Now()
	serr := seg.Sync()
	if s.opts.ObserveSync != nil {
		s.opts.ObserveSync(time.Since(start))
	}
	if serr != nil {
		err = s.stop(fmt.Errorf("fdatasync log: %w", serr))
	} else {
		// Counted before the callers are answered, so a caller that saw its
		// change acknowledged also sees it counted.
		s.durable.Add(uint64(b.frames))
	}
	s.mu.Lock()
	s.inflight = nil
	s.mu.Unlock()
	if !b.early {
		b.err = err
		close(b.done)
	}
}

func (s *Store) stop(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(err)
}

// stopLocked stops the store for good; s.mu is held.
func (s *Store) stopLocked(err error) error {
	s.log.Error("store stopped: the log can no longer be trusted, restart to recover", "error", err)
	err = fmt.Errorf("%w: %w", ErrStopped, err)
	if s.fatal == nil {
		s.fatal = err
	}
	s.rotated.Broadcast()
	return err
}

// Err returns the error that stopped the store, or nil.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// NoSpace reports whether the last write ran out of space (the next one
// tries again).
func (s *Store) NoSpace() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noSpace
}

// ProbeSpace writes and removes a file of a typical frame's size in the data
// directory, and ends the NoSpace state if that works: with no changes
// coming in, nothing else would find out that space is back.
func (s *Store) ProbeSpace() {
	const name = "space-probe.tmp" // removed at start if a crash leaves it
	p := s.path(name)
	_ = s.fs.Remove(p)
	f, err := s.fs.Create(p)
	if err == nil {
		_, err = f.Write(make([]byte, 64<<10))
		f.Close()
		_ = s.fs.Remove(p)
	}
	if err == nil {
		s.mu.Lock()
		if s.noSpace {
			s.noSpace = false
			s.log.Info("disk space is back: accepting changes again", "dir", s.opts.Dir)
		}
		s.mu.Unlock()
	}
}

// WALBytes returns the bytes appended since the last snapshot, and the size
// of that snapshot, for the owner's compaction policy.
func (s *Store) WALBytes() (wal, snap int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.walBytes, s.snapSize
}

// rotate starts a new segment after everything appended so far and returns
// its seq.
func (s *Store) rotate() (uint64, error) {
	c := make(chan rotation, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, ErrClosed
	}
	s.rotates = append(s.rotates, c)
	s.wake.Signal()
	s.mu.Unlock()
	r := <-c
	return r.seq, r.err
}

// Snapshot rotates the log, has walk emit the stored state of every key
// (encoded records) and Queue records, and makes that the new base: the
// segments before the rotation and older snapshots are removed. Changes may
// go on during walk (see doc.go).
func (s *Store) Snapshot(walk func(emit func([]byte) error) error) error {
	seq, err := s.rotate()
	if err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	name := snapName(seq)
	tmp := s.path(name + ".tmp")
	_ = s.fs.Remove(tmp)
	f, err := s.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("create snapshot: %w", err)
	}
	size := int64(0)
	fail := func(err error) error {
		f.Close()
		_ = s.fs.Remove(tmp)
		return err
	}
	write := func(p []byte) error {
		n, err := f.Write(p)
		size += int64(n)
		return err
	}
	if err := write([]byte(snapMagic)); err != nil {
		return fail(fmt.Errorf("write snapshot: %w", err))
	}
	frame := make([]byte, frameHeader, 1<<20)
	flush := func() error {
		if len(frame) == frameHeader {
			return nil
		}
		payload := frame[frameHeader:]
		binary.BigEndian.PutUint32(frame[0:], uint32(len(payload)))
		binary.BigEndian.PutUint32(frame[4:], crc32.Checksum(payload, castagnoli))
		err := write(frame)
		frame = frame[:frameHeader]
		return err
	}
	err = walk(func(rec []byte) error {
		frame = append(frame, rec...)
		if len(frame) >= 1<<20 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = write([]byte(snapFooter))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fail(fmt.Errorf("write snapshot: %w", err))
	}
	if err := f.Close(); err != nil {
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("close snapshot: %w", err)
	}
	if err := s.fs.Rename(tmp, s.path(name)); err != nil {
		_ = s.fs.Remove(tmp)
		return fmt.Errorf("install snapshot: %w", err)
	}
	if err := s.fs.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("sync data dir: %w", err)
	}
	s.mu.Lock()
	s.snapSize = size
	s.walBytes = 0
	s.mu.Unlock()
	// Removing what the snapshot covers needs no fsync: a file that comes
	// back after a crash is older than the snapshot and Open removes it.
	names, _ := s.fs.List(s.opts.Dir)
	for _, n := range names {
		if q, ok := parseSeq(n, "wal-", ".log"); ok && q < seq {
			_ = s.fs.Remove(s.path(n))
		}
		if q, ok := parseSeq(n, "snap-", ".snap"); ok && q < seq {
			_ = s.fs.Remove(s.path(n))
		}
	}
	return nil
}

// Repairs returns how many torn writes Open repaired.
func (s *Store) Repairs() int { return s.repairs }

// cleanName is the file that records where the log ended at the last clean
// shutdown: segment seq and size, 8 bytes each big-endian, then their
// CRC-32C. A log found shorter than that was cut after it was synced, which
// a crash cannot do, so it is refused as corrupt rather than repaired as a
// torn write. It is only ever evidence of a lower bound: later runs append
// beyond it, and no repair cuts below it.
const cleanName = "clean"

func (s *Store) readClean() {
	b, err := s.fs.ReadFile(s.path(cleanName))
	if err != nil {
		return
	}
	if len(b) != 20 || crc32.Checksum(b[:16], castagnoli) != binary.BigEndian.Uint32(b[16:]) {
		s.log.Warn("ignoring a damaged record of the last clean shutdown", "file", s.path(cleanName))
		return
	}
	s.cleanSeq, s.cleanSize = binary.BigEndian.Uint64(b), int64(binary.BigEndian.Uint64(b[8:]))
}

func (s *Store) writeClean() error {
	b := binary.BigEndian.AppendUint64(nil, s.segSeq)
	b = binary.BigEndian.AppendUint64(b, uint64(s.segSize))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return s.writeAtomic(cleanName, b)
}

// Close writes what is pending, stops the writer and records where the log
// ends.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.wake.Signal()
	s.rotated.Broadcast()
	s.mu.Unlock()
	<-s.stopped
	defer s.unlock()
	if err := s.Err(); err != nil {
		return err
	}
	if err := s.writeClean(); err != nil {
		s.log.Warn("could not record the end of the log", "error", err)
	}
	return nil
}
