package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// recordBytesPerSecond bounds what records cost etcd on a busy cluster: a
// record of n bytes waits n/recordBytesPerSecond seconds (at least the
// record interval) before the next. 40,000 pods make a record of about
// 175 KB, written at most every 5 s (the default interval); a million, of
// about 4.5 MB, every 70 s. Meanwhile the checkpoint still advances up to
// the first key the stored record lacks.
const recordBytesPerSecond = 64 << 10

// maxGenerations bounds the generations a record keeps: a write that keeps
// the prefixes that did not change adds one (until none of its prefixes is
// kept), and once this many are stored the next write keeps only the
// largest and rewrites the prefixes of the others (most often a few small
// ones) into its own.
const maxGenerations = 8

// Watch is one watched prefix as the Keeper sees it: its informer.
type Watch interface {
	// Prefix is the watched prefix.
	Prefix() string
	// SafeRevision is the revision up to which every change under the
	// prefix has been handed on (0 until the first list and replay).
	SafeRevision() int64
	// LastChange is the revision of the last change seen under the prefix.
	LastChange() int64
}

// Pending is the outbox as the Keeper sees it.
type Pending interface {
	// MinPendingRevision is the lowest etcd revision whose announcement the
	// queue has not accepted yet (0: none).
	MinPendingRevision() int64
}

// Keeper decides when the checkpoint advances and writes it, with the
// known-key record when the stored one no longer holds, for the watched
// prefixes of the moment (Add, Remove). Write is called from one goroutine.
type Keeper struct {
	store          *Etcd
	pending        Pending
	recordInterval time.Duration // the least time between two records
	log            *slog.Logger

	mu      sync.Mutex
	watches map[string]watched

	lastCheckpoint int64     // the last checkpoint written; Write's only
	nextRecord     time.Time // no record is written before it; Write's only

	recordWrites, recordBytes atomic.Uint64 // for metrics
}

type watched struct {
	w Watch
	l *Ledger
	// fromStart: the checkpoint waits for its first list and replay. A
	// prefix added later joins the checkpoint once listed.
	fromStart bool
}

// NewKeeper returns a Keeper writing through store; the checkpoint never
// passes a change pending is still delivering. recordInterval is the least
// time between two records.
func NewKeeper(store *Etcd, pending Pending, recordInterval time.Duration, log *slog.Logger) *Keeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{store: store, pending: pending, recordInterval: recordInterval, log: log, watches: map[string]watched{}}
}

// Add makes the checkpoint cover w's prefix, whose known keys l keeps.
// A prefix of the start (fromStart: its history since the stored
// checkpoint is replayed) holds the checkpoint where it is until it has
// listed and replayed (SafeRevision > 0). One added later joins once
// listed: what happened under it before its list is its backlog, which
// its list announces (and the next start's list again), not a change the
// checkpoint vouches for.
func (k *Keeper) Add(w Watch, l *Ledger, fromStart bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.watches[w.Prefix()] = watched{w: w, l: l, fromStart: fromStart}
}

// Remove stops covering prefix (no longer watched).
func (k *Keeper) Remove(prefix string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.watches, prefix)
}

// snapshot returns the watched prefixes, by prefix.
func (k *Keeper) snapshot() []watched {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]watched, 0, len(k.watches))
	for _, p := range slices.Sorted(maps.Keys(k.watches)) {
		out = append(out, k.watches[p])
	}
	return out
}

// Checkpoint returns the stored checkpoint (0 if none, or if it is
// malformed: then the whole history etcd holds is replayed).
func (k *Keeper) Checkpoint(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := k.store.Checkpoint(ctx)
	if errors.Is(err, ErrMalformed) {
		k.log.Warn("ignoring a malformed checkpoint", "error", err)
		return 0, nil
	}
	return c, err
}

// Record returns the known-key record of prefix (nil if none is stored; an
// error wrapping ErrNotRecorded if the record does not cover the prefix).
func (k *Keeper) Record(ctx context.Context, prefix string) (*Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return k.store.ReadPrefix(ctx, prefix)
}

// RecordWrites and RecordBytes count the records written and their bytes.
func (k *Keeper) RecordWrites() uint64 { return k.recordWrites.Load() }

// RecordBytes counts the bytes of the records written (chunks and
// manifest).
func (k *Keeper) RecordBytes() uint64 { return k.recordBytes.Load() }

// checkpoint computes a revision up to which every change under every
// prefix has been accepted by the queue (0: not known yet), and the
// prefixes it covers: ws but those added at run time and not listed yet.
//
// Every change up to M, the lowest observed revision of the prefixes, has
// been seen. M follows etcd's head through progress notifications, and the
// checkpoint writes move the head; so when no watched change happened after
// the last one seen (L ≤ M), L is used instead: it stands for the same
// changes and stays put while etcd is idle, so observers stop writing.
func (k *Keeper) checkpoint(ws []watched) (int64, []watched) {
	if len(ws) == 0 {
		return 0, nil
	}
	// The informers first: a change is in the outbox before an informer's
	// observed revision covers it, so the outbox read next cannot miss it.
	var m, l int64 = -1, 0
	covered := make([]watched, 0, len(ws))
	var waiting []watched
	for _, w := range ws {
		s := w.w.SafeRevision()
		if s == 0 {
			if w.fromStart {
				return 0, nil
			}
			waiting = append(waiting, w)
			continue
		}
		covered = append(covered, w)
		if m < 0 || s < m {
			m = s
		}
		l = max(l, w.w.LastChange())
	}
	if m < 0 {
		return 0, nil
	}
	c := m
	if l <= m {
		c = l
	}
	if p := k.pending.MinPendingRevision(); p > 0 {
		c = min(c, p-1)
	}
	// A prefix that listed while the others were read may have a list
	// revision below c, and changes after it not handed on yet: wait for
	// the next tick. One that lists from now on lists at etcd's head, past
	// every revision read above.
	for _, w := range waiting {
		if w.w.SafeRevision() != 0 {
			return 0, nil
		}
	}
	return max(c, 0), covered
}

// Write records the checkpoint if it moved, with a known-key record valid
// at it. The value only ever grows (a compare-and-swap on the zero-padded
// value), so two observers can share the key: whichever is further ahead
// has delivered up to its value, and its record is valid at it.
//
// The record is rewritten only when the stored one lacks a key that may
// have existed at the new checkpoint (or is another observer's), and at
// most every recordInterval (longer for a large record). Until then the
// checkpoint advances only to just below the first such key: replaying
// from an older checkpoint only announces again what the queue collapses.
func (k *Keeper) Write(ctx context.Context) {
	c, ws := k.checkpoint(k.snapshot())
	var (
		rewrite, ok bool
	)
	switch {
	case c == 0 || c < k.lastCheckpoint:
		return
	case c == k.lastCheckpoint:
		// Nothing new delivered; a prefix listed since, which the stored
		// record lacks, joins it at the same checkpoint (etcd may stay
		// idle for long).
		if !k.joins(ws, c) {
			return
		}
		rewrite = true
	default:
		if c, rewrite, ok = k.plan(ws, c); !ok {
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		outcome Outcome
		err     error
		written []bool // by a rewrite, the prefixes written (the others kept)
	)
	if rewrite {
		outcome, written, err = k.writeRecord(ctx, ws, c)
	} else {
		outcome, err = k.store.Advance(ctx, c)
	}
	if err != nil {
		k.log.Debug("write checkpoint", "error", err) // etcd's loss is logged by the monitor
		return
	}
	switch outcome {
	case Written:
		k.lastCheckpoint = c
		for i, w := range ws {
			w.l.Recorded(c, rewrite && (written == nil || written[i]))
		}
	case Behind:
		k.lastCheckpoint = c // another observer is further on
	case NotMine:
		// Another observer wrote the record: the next tick writes ours.
	}
}

// joins reports whether a record may be written now with the checkpoint
// c already stored, to take in a prefix the stored record lacks.
func (k *Keeper) joins(ws []watched, c int64) bool {
	if !k.store.Owns() || time.Now().Before(k.nextRecord) {
		return false
	}
	for _, w := range ws {
		if !k.store.Has(w.l.Prefix()) && w.l.Floor() <= c {
			return true
		}
	}
	return false
}

// plan says which checkpoint to store at most c, and whether the record
// must be rewritten with it; ok is false when none can be stored now.
//
// Only the prefixes the stored record covers bind it: a prefix it does not
// cover (added since, and listed) is, to a start that reads this record,
// one declared while no observer ran, replayed from the checkpoint or
// listed from scratch. Holding the checkpoint back would not change that,
// so such a prefix only asks for a rewrite, which takes it in when the
// rate limit allows.
func (k *Keeper) plan(ws []watched, c int64) (at int64, rewrite, ok bool) {
	var floor, unrecorded int64
	uncovered := false
	for _, w := range ws {
		if !k.store.Has(w.l.Prefix()) {
			uncovered = true
			continue
		}
		floor = max(floor, w.l.Floor())
		if u := w.l.Unrecorded(); u > 0 && (unrecorded == 0 || u < unrecorded) {
			unrecorded = u
		}
	}
	if c < floor {
		return 0, false, false // a record is valid only from the last list on
	}
	stale := unrecorded > 0 && unrecorded <= c
	rewrite = !k.store.Owns() || uncovered || stale
	if rewrite && time.Now().Before(k.nextRecord) {
		if !k.store.Owns() {
			return 0, false, false
		}
		if stale {
			c = unrecorded - 1
		}
		if c <= k.lastCheckpoint || c < floor {
			return 0, false, false
		}
		rewrite = false
	}
	return c, rewrite, true
}

// writeRecord stores the checkpoint c with a new record: the keys of every
// prefix that changed since the stored record (or that it lacks), the
// stored record's part for the others (all are written when the stored
// record is not this observer's; when it keeps maxGenerations, those
// outside its largest generation are written too). It sets when the next
// record may be written, and says which prefixes were written.
func (k *Keeper) writeRecord(ctx context.Context, ws []watched, c int64) (Outcome, []bool, error) {
	only := "" // the one generation kept prefixes may stay in ("": any)
	if k.store.Generations() >= maxGenerations {
		only = k.store.Largest()
	}
	written := make([]bool, len(ws))
	outcome, n, err := k.store.Write(ctx, c, func() []Set {
		sets := make([]Set, 0, len(ws))
		for i, w := range ws {
			p := w.l.Prefix()
			if k.store.Has(p) && !w.l.Changed() && (only == "" || k.store.Generation(p) == only) {
				sets = append(sets, Set{Prefix: p, Keep: true})
				continue
			}
			if !k.store.Has(p) && w.l.Floor() > c {
				// Listed after c: its keys then are not known. It joins
				// the next record.
				continue
			}
			written[i] = true
			sets = append(sets, Set{Prefix: p, Keys: w.l.KnownKeys()})
		}
		return sets
	})
	if n > 0 {
		k.recordWrites.Add(1)
		k.recordBytes.Add(uint64(n))
		wait := time.Duration(float64(n) / recordBytesPerSecond * float64(time.Second))
		k.nextRecord = time.Now().Add(max(k.recordInterval, wait))
	}
	if err == nil && outcome == Written {
		k.log.Debug("wrote checkpoint and known-key record", "checkpoint", c, "bytes", n)
	}
	return outcome, written, err
}
