package store

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// Report is what Repair found, and what it did about it.
type Report struct {
	// Damage lists every stretch that could not be read, in file order.
	Damage []Damage
	// Keys lists each key a damaged stretch still named, with what it said
	// and the key's state after the repair.
	Keys []LostKey
	// Moved is the directory the damaged log was moved to, "" if nothing
	// was written (no damage, or a dry run).
	Moved string
	// Keys and queues the repaired log holds.
	KeptKeys, KeptQueues int
}

// LostKey is a key whose record was in damaged bytes: the log's word on it
// there is lost, so it may now be in an older state, or absent.
type LostKey struct {
	Queue, Key string
	// Was is the record the damaged bytes held.
	Was record.Record
	// Now is the key's record after the repair; nil means absent.
	Now *record.Record
}

// Repair is the operator's way past a log that Open refuses as corrupt. It
// reads every file of the data directory, skipping each damaged stretch to
// the next good frame (and a missing segment as a whole), and, if it found
// damage and dryRun is false, makes what it could read the new log: one
// snapshot of it and an empty segment. The old files go to
// <dir>/damaged-<UTC time>/ for inspection; nothing is deleted. The report
// names every damage and every key the damaged bytes still named, with its
// state now; what could not be decoded at all is lost without a name (the
// observer's next list or resync announces every object again).
//
// Repair takes the directory's lock, so it never runs beside a queue. It
// does not touch the epoch file: a damaged one is reported by Open, and
// only a backup can say what it held.
func Repair(opts Options, dryRun bool) (Report, error) {
	if opts.FS == nil {
		opts.FS = OS{}
	}
	s := &Store{opts: opts, fs: opts.FS, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	unlock, err := s.fs.Lock(opts.Dir)
	if err != nil {
		return Report{}, fmt.Errorf("lock %s: %w", opts.Dir, err)
	}
	defer unlock()

	sv, err := s.salvage()
	if err != nil {
		return Report{}, err
	}
	rep := sv.report()
	if len(sv.damage) == 0 || dryRun {
		return rep, nil
	}
	moved, err := s.rewrite(sv)
	if err != nil {
		return rep, err
	}
	rep.Moved = moved
	return rep, nil
}

// qk names one key of one queue.
type qk struct{ queue, key string }

func compareQK(a, b qk) int {
	return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.key, b.key))
}

// salvaged is what a lenient read of the log kept: each key's last record,
// the queues, the damage read past, and the files it read.
type salvaged struct {
	keys   map[qk]record.Record
	queues map[string]bool
	damage []Damage
	segs   []uint64
	snaps  []uint64
	from   uint64 // the first segment replayed
}

// salvage reads the newest snapshot and the segments after it, reading past
// damage instead of refusing it.
func (s *Store) salvage() (*salvaged, error) {
	sv := &salvaged{keys: map[qk]record.Record{}, queues: map[string]bool{}, from: 1}
	r := &reader{s: s, lenient: true, apply: func(rec *record.Record) {
		sv.queues[rec.Queue] = true
		switch rec.Kind {
		case record.KindPut:
			sv.keys[qk{rec.Queue, rec.Key}] = *rec
		case record.KindDelete:
			delete(sv.keys, qk{rec.Queue, rec.Key})
		}
	}}
	var err error
	if sv.segs, sv.snaps, err = s.files(false); err != nil {
		return nil, err
	}
	s.readClean()
	if len(sv.snaps) > 0 {
		sv.from = sv.snaps[len(sv.snaps)-1]
		if err := r.snapshot(snapName(sv.from)); err != nil {
			return nil, err
		}
	}
	var replay []uint64
	for _, seq := range sv.segs {
		if seq >= sv.from {
			replay = append(replay, seq)
		}
	}
	if err := r.segments(sv.from, replay, len(sv.snaps) > 0); err != nil {
		return nil, err
	}
	sv.damage = r.damage
	return sv, nil
}

// report lists the damage and every key a damaged stretch named, with its
// state now.
func (sv *salvaged) report() Report {
	rep := Report{Damage: sv.damage, KeptKeys: len(sv.keys), KeptQueues: len(sv.queues)}
	named := map[qk]record.Record{}
	for i, d := range sv.damage {
		var kept []record.Record
		for _, rec := range d.Records {
			// Bytes read at a guess decode now and then; a record of a
			// queue the log knows nothing else of is one of those.
			if rec.Kind != record.KindQueue && sv.queues[rec.Queue] {
				named[qk{rec.Queue, rec.Key}] = rec
				kept = append(kept, rec)
			}
		}
		rep.Damage[i].Records = kept
	}
	for _, k := range slices.SortedFunc(maps.Keys(named), compareQK) {
		lk := LostKey{Queue: k.queue, Key: k.key, Was: named[k]}
		if now, ok := sv.keys[k]; ok {
			lk.Now = &now
		}
		rep.Keys = append(rep.Keys, lk)
	}
	return rep
}

// rewrite makes what was salvaged the new base of the log and moves the old
// files into a damaged-<time> directory, which it returns. The new base
// comes first, then the old files go aside: a crash in between leaves a
// snapshot that Open prefers, and old files it removes as covered by it.
func (s *Store) rewrite(sv *salvaged) (string, error) {
	seq := max(sv.from, 1)
	for _, q := range append(slices.Clone(sv.segs), sv.snaps...) {
		seq = max(seq, q+1)
	}
	recs := make([]record.Record, 0, len(sv.queues)+len(sv.keys))
	for _, q := range slices.Sorted(maps.Keys(sv.queues)) {
		recs = append(recs, record.Record{Kind: record.KindQueue, Queue: q})
	}
	for _, k := range slices.SortedFunc(maps.Keys(sv.keys), compareQK) {
		recs = append(recs, sv.keys[k])
	}
	if err := s.writeAtomic(snapName(seq), snapshotBytes(recs)); err != nil {
		return "", fmt.Errorf("write the repaired snapshot: %w", err)
	}
	if err := s.writeAtomic(segName(seq), []byte(walMagic)); err != nil {
		return "", fmt.Errorf("write the repaired log's segment: %w", err)
	}
	dir := s.opts.Dir
	moved := filepath.Join(dir, "damaged-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := s.fs.MkdirAll(moved); err != nil {
		return "", fmt.Errorf("make %s: %w", moved, err)
	}
	names, err := s.fs.List(dir)
	if err != nil {
		return "", fmt.Errorf("list data dir: %w", err)
	}
	for _, n := range names {
		old := n == cleanName
		if q, ok := parseSeq(n, "wal-", ".log"); ok && q < seq {
			old = true
		}
		if q, ok := parseSeq(n, "snap-", ".snap"); ok && q < seq {
			old = true
		}
		if old {
			if err := s.fs.Rename(s.path(n), filepath.Join(moved, n)); err != nil {
				return "", fmt.Errorf("move %s aside: %w", n, err)
			}
		}
	}
	if err := s.fs.SyncDir(moved); err != nil {
		return "", fmt.Errorf("sync %s: %w", moved, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return "", fmt.Errorf("sync data dir: %w", err)
	}
	return moved, nil
}

// snapshotBytes encodes recs as a snapshot file, in frames of about 1 MiB.
func snapshotBytes(recs []record.Record) []byte {
	out := []byte(snapMagic)
	frame := make([]byte, frameHeader, 1<<20)
	flush := func() {
		if len(frame) == frameHeader {
			return
		}
		payload := frame[frameHeader:]
		binary.BigEndian.PutUint32(frame[0:], uint32(len(payload)))
		binary.BigEndian.PutUint32(frame[4:], crc32.Checksum(payload, castagnoli))
		out = append(out, frame...)
		frame = frame[:frameHeader]
	}
	for i := range recs {
		frame = record.Append(frame, &recs[i], recordVersion)
		if len(frame) >= 1<<20 {
			flush()
		}
	}
	flush()
	return append(out, snapFooter...)
}

// Describe is a record in words, for the repair report.
func Describe(r *record.Record) string {
	if r == nil {
		return "absent"
	}
	switch r.Kind {
	case record.KindDelete:
		return "deleted"
	case record.KindQueue:
		return "queue"
	}
	var b strings.Builder
	switch r.State {
	case record.StatePending:
		fmt.Fprintf(&b, "pending since %s", time.Unix(0, r.PendingSince).UTC().Format(time.RFC3339Nano))
	case record.StateDelayed:
		fmt.Fprintf(&b, "delayed until %s", time.Unix(0, r.NotBefore).UTC().Format(time.RFC3339Nano))
	case record.StateParked:
		b.WriteString("parked")
	}
	if r.Attempts > 0 {
		fmt.Fprintf(&b, ", %d attempts", r.Attempts)
	}
	return b.String()
}
