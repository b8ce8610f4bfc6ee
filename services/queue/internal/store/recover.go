package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sort"
	"strings"

	"github.com/batonrun/baton/services/queue/internal/format"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// sectorSize is the unit a disk writes whole: a write torn by a crash leaves
// some of its sectors as they were before, which for a file's new end is
// zeros. 512 is the smallest; a disk with larger sectors leaves larger runs
// of zeros, which contain 512-byte ones.
const sectorSize = 512

// minZeroRun is the shortest stretch of zeros, between sector boundaries
// inside a frame, taken as a sector that was never written. A frame's
// length is big-endian, so its first bytes are zeros in every small frame,
// and records hold the odd zero byte (a varint 0): a run this long does not
// occur in a frame's bytes by chance, only in a key or error text made of
// NULs.
const minZeroRun = 8

// Damage is a stretch of a file that recovery could not read.
type Damage struct {
	File   string
	Offset int64
	// Bytes is how much was skipped: to the next good frame, or the end.
	Bytes int64
	Why   string
	// Records were still decoded from the damaged bytes (Repair only): what
	// the log said there, as far as it can be read.
	Records []record.Record
}

func (d Damage) Error() string {
	return fmt.Sprintf("%s at offset %d: %s", d.File, d.Offset, d.Why)
}

// reader reads the data directory's files into apply. Open's reader is
// strict: the first damage is the error. Repair's is lenient: it notes each
// damage, skips to the next good frame, and reads on.
type reader struct {
	s       *Store
	apply   func(*record.Record)
	records format.Version // of the file being read (its header's)
	lenient bool
	damage  []Damage
	cut     bool // a segment was found cut below its clean end, and noted
	// lastVersion is the version of the last segment read, which the
	// store appends to if it is the version it writes.
	lastVersion format.Version
}

// damaged handles damage: the error to stop with (strict), or nil after
// noting it (lenient).
func (r *reader) damaged(d Damage) error {
	if !r.lenient {
		return fmt.Errorf("%w: %v", ErrCorrupt, d)
	}
	r.damage = append(r.damage, d)
	return nil
}

// files lists the data directory: segment and snapshot seqs, sorted. It
// removes .tmp files (interrupted writes, never renamed into place) when
// clean is set.
func (s *Store) files(clean bool) (segs, snaps []uint64, err error) {
	names, err := s.fs.List(s.opts.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list data dir: %w", err)
	}
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".tmp"):
			if clean {
				_ = s.fs.Remove(s.path(n))
			}
		case strings.HasPrefix(n, "wal-"):
			if seq, ok := parseSeq(n, "wal-", ".log"); ok {
				segs = append(segs, seq)
			}
		case strings.HasPrefix(n, "snap-"):
			if seq, ok := parseSeq(n, "snap-", ".snap"); ok {
				snaps = append(snaps, seq)
			}
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	sort.Slice(snaps, func(i, j int) bool { return snaps[i] < snaps[j] })
	return segs, snaps, nil
}

// recover replays the newest snapshot and the segments after it, repairs a
// torn tail of the last segment, and opens that segment for appending.
func (s *Store) recover(apply func(*record.Record)) error {
	segs, snaps, err := s.files(true)
	if err != nil {
		return err
	}
	s.readClean()
	r := &reader{s: s, apply: apply}
	from := uint64(1)
	if len(snaps) > 0 {
		from = snaps[len(snaps)-1]
		if err := r.snapshot(snapName(from)); err != nil {
			return err
		}
		for _, old := range snaps[:len(snaps)-1] {
			_ = s.fs.Remove(s.path(snapName(old)))
		}
	}
	var replay []uint64
	for _, seq := range segs {
		if seq < from {
			_ = s.fs.Remove(s.path(segName(seq))) // covered by the snapshot
			continue
		}
		replay = append(replay, seq)
	}
	if err := r.segments(from, replay, len(snaps) > 0); err != nil {
		return err
	}
	if len(replay) == 0 {
		return s.newSegment(from)
	}
	if r.lastVersion != format.WALSegment.Current {
		// The last segment is of another version (written before an
		// upgrade): what this build writes goes to a segment of its own,
		// whose header says what it holds.
		return s.newSegment(s.segSeq + 1)
	}
	f, err := s.fs.OpenAppend(s.path(segName(s.segSeq)))
	if err != nil {
		return fmt.Errorf("open segment: %w", err)
	}
	s.seg = f
	return nil
}

// segments replays the segments replay, which must run on from from
// without a gap, and leaves the last one's seq and valid size in the store.
func (r *reader) segments(from uint64, replay []uint64, snapshot bool) error {
	s := r.s
	if len(replay) == 0 && snapshot {
		// The snapshot's segment was durable before the snapshot was
		// written, and may have held frames after it.
		return r.damaged(Damage{File: s.path(segName(from)), Why: "segment is missing"})
	}
	for i, seq := range replay {
		// Without a snapshot the log starts at segment 1: segments are
		// only removed once a snapshot covering them is durable, so a
		// later first segment means a lost segment or snapshot.
		want := from
		if i > 0 {
			want = replay[i-1] + 1
		}
		for ; want < seq; want++ {
			if err := r.damaged(Damage{File: s.path(segName(want)), Why: "segment is missing"}); err != nil {
				return err
			}
		}
		last := i == len(replay)-1
		floor := int64(0)
		if seq == s.cleanSeq {
			floor = s.cleanSize
		}
		size, err := r.segment(segName(seq), last, floor)
		if err != nil {
			return err
		}
		if seq == s.cleanSeq && size < s.cleanSize && !r.cut {
			// No torn write can reach back before the end a clean shutdown
			// synced: the file lost acknowledged frames.
			if err := r.damaged(Damage{File: s.path(segName(seq)), Offset: size, Bytes: s.cleanSize - size,
				Why: fmt.Sprintf("the log ends here, but it held %d bytes at its last clean shutdown: it was cut short", s.cleanSize)}); err != nil {
				return err
			}
		}
		if last {
			s.segSeq, s.segSize = seq, size
			s.walBytes = size
		}
	}
	return nil
}

// snapshot applies a snapshot's records.
func (r *reader) snapshot(name string) error {
	s := r.s
	p := s.path(name)
	b, err := s.fs.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	body := b
	v, herr := readHeader(p, b, snapKind, format.WALSnapshot)
	if herr != nil && !errors.Is(herr, format.ErrNotHeader) {
		return herr
	}
	r.records = format.WALSnapshot.RecordsAt(v)
	switch {
	case len(b) < len(snapMagic)+len(snapFooter) || herr != nil:
		if err := r.damaged(Damage{File: p, Bytes: int64(min(len(b), len(snapMagic))), Why: "bad snapshot header"}); err != nil {
			return err
		}
	case string(b[len(b)-len(snapFooter):]) != snapFooter:
		if err := r.damaged(Damage{File: p, Offset: int64(len(b) - len(snapFooter)), Why: "snapshot footer missing"}); err != nil {
			return err
		}
	default:
		body = b[:len(b)-len(snapFooter)]
	}
	if len(body) < len(snapMagic) {
		return nil // lenient: nothing to read
	}
	if _, err := r.frames(p, body, len(snapMagic), false, 0); err != nil {
		return err
	}
	s.snapSize = int64(len(b))
	return nil
}

// segment applies a segment's records and returns its valid length,
// repairing a torn tail when last is set (but not one that reaches below
// floor, the end a clean shutdown synced).
func (r *reader) segment(name string, last bool, floor int64) (int64, error) {
	s := r.s
	p := s.path(name)
	b, err := s.fs.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read segment: %w", err)
	}
	v, herr := readHeader(p, b, walKind, format.WALSegment)
	if herr == nil || errors.Is(herr, format.ErrNotHeader) {
		r.records = format.WALSegment.RecordsAt(v)
	}
	if last {
		r.lastVersion = v
	}
	if herr != nil {
		if !errors.Is(herr, format.ErrNotHeader) {
			return 0, herr
		}
		if last && (allZero(b) || strings.HasPrefix(walMagic, string(b))) {
			// Created, but its header never fully reached the disk: nothing
			// was ever written after it.
			return int64(len(walMagic)), r.tornHeader(p)
		}
		if err := r.damaged(Damage{File: p, Bytes: int64(min(len(b), len(walMagic))), Why: "bad segment header"}); err != nil {
			return 0, err
		}
		if len(b) < len(walMagic) {
			return int64(len(b)), nil
		}
	}
	end, err := r.frames(p, b, len(walMagic), last, int(floor))
	return int64(end), err
}

// frames applies the frames of b from off on and returns where the good
// ones end. In the last segment (tail), a frame torn by a crash ends the
// log there: it and whatever follows it were never synced, so no caller was
// answered for them. Below floor nothing can be torn: a clean shutdown
// synced it.
func (r *reader) frames(file string, b []byte, off int, tail bool, floor int) (int, error) {
	for off < len(b) {
		payload, n, err := readFrame(b, off)
		if err == nil {
			if err := r.decode(payload, file, off+frameHeader); err != nil {
				return off, err
			}
			off += n
			continue
		}
		if tail {
			if torn, why := tornAt(b, off); torn && off < floor {
				d := Damage{File: file, Offset: int64(off), Bytes: int64(floor - off),
					Why: fmt.Sprintf("%s, but the log held %d bytes at its last clean shutdown: it was cut short", why, floor)}
				if r.lenient {
					d.Records = salvage(b, off, len(b), r.records)
				}
				if err := r.damaged(d); err != nil {
					return off, err
				}
				r.cut = true
				return off, nil
			} else if torn {
				if !r.lenient {
					if err := r.s.repairTail(file, b, off, why); err != nil {
						return off, err
					}
				}
				return off, nil
			}
		}
		next := nextFrame(b, off)
		d := Damage{File: file, Offset: int64(off), Bytes: int64(next - off), Why: err.Error()}
		if r.lenient {
			d.Records = salvage(b, off, next, r.records)
		}
		if err := r.damaged(d); err != nil {
			return off, err
		}
		off = next
	}
	return off, nil
}

// decode applies every record of a frame's payload, which starts at base in
// file. A record that does not decode in a frame whose checksum holds is
// damage; the lenient reader skips the rest of that frame.
func (r *reader) decode(payload []byte, file string, base int) error {
	s := r.s
	if s.names == nil {
		s.names = record.Names{}
	}
	for i := 0; i < len(payload); {
		rec, n, err := s.names.Decode(payload[i:], r.records)
		if err != nil {
			return r.damaged(Damage{File: file, Offset: int64(base + i), Bytes: int64(len(payload) - i), Why: err.Error()})
		}
		if r.apply != nil {
			r.apply(&rec)
		}
		i += n
	}
	return nil
}

// tornAt tells whether the bad frame at off, in the last segment, is a
// write torn by a crash, as etcd's WAL tells a torn entry from a corrupt
// one: a tail too short to hold the frame, or a frame with a sector that
// reads as zeros, was never fully written; a whole frame whose checksum
// fails was damaged after it was written, and refusing to start is the only
// answer that loses nothing.
func tornAt(b []byte, off int) (bool, string) {
	if len(b)-off < frameHeader {
		return true, "a frame header cut short"
	}
	n := int(binary.BigEndian.Uint32(b[off:]))
	if n == 0 {
		if allZero(b[off : off+frameHeader]) {
			return true, "a frame header never written (zeros)"
		}
		return false, ""
	}
	if n > len(b)-off-frameHeader {
		// The file ends inside the frame. That is a torn write only if
		// nothing valid follows: a crash cannot leave the file longer than
		// a frame it did not finish, so a good frame behind one that seems
		// to run past the end means its length was damaged.
		if nextFrame(b, off) < len(b) {
			return false, ""
		}
		return true, fmt.Sprintf("a frame of %d bytes cut short at %d", n, len(b)-off-frameHeader)
	}
	if zeroSector(b, off, off+frameHeader+n) {
		return true, "a frame with sectors never written (zeros)"
	}
	return false, ""
}

// zeroSector reports whether [start, end) of b, cut at sector boundaries of
// the file, has a piece of at least minZeroRun bytes that is all zeros.
func zeroSector(b []byte, start, end int) bool {
	for at := start; at < end; {
		next := min(end, (at/sectorSize+1)*sectorSize)
		if next-at >= minZeroRun && allZero(b[at:next]) {
			return true
		}
		at = next
	}
	return false
}

// repairTail cuts a torn write off the end of the last segment. It is the
// one repair that is safe to make without asking (nothing acknowledged was
// in it), and it is still logged at ERROR and counted: a crash is the only
// thing that should ever cause one.
func (s *Store) repairTail(file string, b []byte, off int, why string) error {
	s.log.Error("repairing a write torn by a crash at the end of the log: no caller was answered for it",
		"file", file, "offset", off, "why", why, "dropped_bytes", len(b)-off)
	if err := s.fs.Truncate(file, int64(off)); err != nil {
		return fmt.Errorf("truncate torn tail of %s: %w", file, err)
	}
	s.repairs++
	return nil
}

// tornHeader rewrites the header of a last segment whose header never fully
// reached the disk.
func (r *reader) tornHeader(p string) error {
	if r.lenient {
		return nil
	}
	return repairTornHeader(r.s.fs, r.s.log, p, walMagic, &r.s.repairs)
}

// repairTornHeader rewrites the header of a log's last segment, p, which a
// crash left empty, with part of its magic, or with zeros: the segment was
// created and the crash came before its header was synced, so nothing was
// ever written after it (the Store's and the Raft log's alike). A repair
// made is counted in repairs.
func repairTornHeader(fs FS, log *slog.Logger, p, magic string, repairs *int) error {
	log.Error("repairing the torn header of the last segment, written just before a crash", "file", p)
	if err := fs.Truncate(p, 0); err != nil {
		return fmt.Errorf("repair segment %s: %w", p, err)
	}
	f, err := fs.OpenAppend(p)
	if err != nil {
		return fmt.Errorf("repair segment %s: %w", p, err)
	}
	defer f.Close()
	if _, err := f.Write([]byte(magic)); err != nil {
		return fmt.Errorf("repair segment %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("repair segment %s: %w", p, err)
	}
	*repairs++
	return nil
}

// readFrame checks the frame at off and returns its payload and length.
func readFrame(b []byte, off int) ([]byte, int, error) {
	if len(b)-off < frameHeader {
		return nil, 0, errors.New("truncated frame header")
	}
	n := int(binary.BigEndian.Uint32(b[off:]))
	sum := binary.BigEndian.Uint32(b[off+4:])
	if n == 0 {
		return nil, 0, errors.New("empty frame")
	}
	if n > len(b)-off-frameHeader {
		return nil, 0, fmt.Errorf("frame of %d bytes runs past the end", n)
	}
	payload := b[off+frameHeader : off+frameHeader+n]
	if crc32.Checksum(payload, castagnoli) != sum {
		return nil, 0, errors.New("checksum mismatch")
	}
	return payload, frameHeader + n, nil
}

// nextFrame returns the offset of the first valid frame after off, or
// len(b). Only damaged files are scanned so.
func nextFrame(b []byte, off int) int {
	for p := off + 1; p+frameHeader < len(b); p++ {
		if _, _, err := readFrame(b, p); err == nil {
			return p
		}
	}
	return len(b)
}

// salvage decodes what it can of the records in the damaged bytes [off,
// end), for Repair's report: it tries every offset after the frame header,
// so a record cut off in front does not hide the ones behind it. Repair
// keeps only those of queues the rest of the log knows.
func salvage(b []byte, off, end int, v format.Version) []record.Record {
	var out []record.Record
	for i := min(off+frameHeader, end); i < end; {
		r, n, err := record.Decode(b[i:end], v)
		if err != nil {
			i++
			continue
		}
		out = append(out, r)
		i += n
	}
	return out
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
