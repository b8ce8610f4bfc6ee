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
	store          *Store
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
}

// NewKeeper returns a Keeper writing through store; the checkpoint never
// passes a change pending is still delivering. recordInterval is the least
// time between two records.
func NewKeeper(store *Store, pending Pending, recordInterval time.Duration, log *slog.Logger) *Keeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{store: store, pending: pending, recordInterval: recordInterval, log: log, watches: map[string]watched{}}
}

// Add makes the checkpoint cover w's prefix, whose known keys l keeps.
// Until w has listed (SafeRevision > 0), the checkpoint stays where it is.
func (k *Keeper) Add(w Watch, l *Ledger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.watches[w.Prefix()] = watched{w: w, l: l}
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
// prefix has been accepted by the queue (0: not known yet).
//
// Every change up to M, the lowest observed revision of the prefixes, has
// been seen. M follows etcd's head through progress notifications, and the
// checkpoint writes move the head; so when no watched change happened after
// the last one seen (L ≤ M), L is used instead: it stands for the same
// changes and stays put while etcd is idle, so observers stop writing.
func (k *Keeper) checkpoint(ws []watched) int64 {
	if len(ws) == 0 {
		return 0
	}
	// The informers first: a change is in the outbox before an informer's
	// observed revision covers it, so the outbox read next cannot miss it.
	var m, l int64 = -1, 0
	for _, w := range ws {
		s := w.w.SafeRevision()
		if s == 0 {
			return 0
		}
		if m < 0 || s < m {
			m = s
		}
		l = max(l, w.w.LastChange())
	}
	c := m
	if l <= m {
		c = l
	}
	if p := k.pending.MinPendingRevision(); p > 0 {
		c = min(c, p-1)
	}
	return max(c, 0)
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
	ws := k.snapshot()
	c := k.checkpoint(ws)
	if c <= k.lastCheckpoint {
		return
	}
	c, rewrite, ok := k.plan(ws, c)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		outcome Outcome
		err     error
	)
	if rewrite {
		outcome, err = k.writeRecord(ctx, ws, c)
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
		for _, w := range ws {
			w.l.Recorded(c, rewrite)
		}
	case Behind:
		k.lastCheckpoint = c // another observer is further on
	case NotMine:
		// Another observer wrote the record: the next tick writes ours.
	}
}

// plan says which checkpoint to store at most c, and whether the record
// must be rewritten with it; ok is false when none can be stored now.
func (k *Keeper) plan(ws []watched, c int64) (at int64, rewrite, ok bool) {
	var floor, unrecorded int64
	for _, w := range ws {
		floor = max(floor, w.l.Floor())
		if u := w.l.Unrecorded(); u > 0 && (unrecorded == 0 || u < unrecorded) {
			unrecorded = u
		}
	}
	if c < floor {
		return 0, false, false // a record is valid only from the last list on
	}
	rewrite = !k.store.Owns() || (unrecorded > 0 && unrecorded <= c)
	if rewrite && time.Now().Before(k.nextRecord) {
		if !k.store.Owns() || unrecorded-1 <= k.lastCheckpoint || unrecorded-1 < floor {
			return 0, false, false
		}
		c, rewrite = unrecorded-1, false
	}
	return c, rewrite, true
}

// writeRecord stores the checkpoint c with a new record of every prefix's
// known keys, and sets when the next record may be written.
func (k *Keeper) writeRecord(ctx context.Context, ws []watched, c int64) (Outcome, error) {
	outcome, n, err := k.store.Write(ctx, c, func() []Set {
		sets := make([]Set, 0, len(ws))
		for _, w := range ws {
			sets = append(sets, Set{Prefix: w.l.Prefix(), Keys: w.l.KnownKeys()})
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
	return outcome, err
}
