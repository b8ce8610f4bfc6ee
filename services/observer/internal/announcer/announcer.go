// Package announcer turns the changes the informers observe into queue
// keys and hands them to the outboxes: the rules say which queues hear of
// a change under a prefix and by which keys (the object's own, or its
// owners'), and the announcer says at which priority.
//
// # Priorities
//
//	informer.FirstList   PRIORITY_LOW     a start's (or a new prefix's) backlog
//	informer.Relist      PRIORITY_NORMAL  differences found after compaction
//	informer.Event       PRIORITY_NORMAL  live changes
//	informer.Replay      PRIORITY_NORMAL  history since the checkpoint, at start
//	Vanished             PRIORITY_NORMAL  deletes made while no observer ran
//	Resync, Backlog      PRIORITY_LOW     every cached object again
//
// # Status-only changes
//
// A watch event that leaves all but the object's top-level status as it
// was (object.StatusOnly: the cached value and the new one have equal
// fingerprints) is not announced by a rule that ignores its own status
// changes (rules.Rule.IgnoreOwnStatus): most often it is that controller's
// own status write, which would bring the key back to it for nothing.
// Rules keyed by owners announce it as any change (a child's status is
// news to its owner). Lists, relists, replays, resyncs, backlogs and
// Vanished announce as always: they compare no old value with a new one,
// or must announce anyway. Skipped counts what was left out.
//
// # Deletes made while no observer ran
//
// When etcd has compacted the history since the checkpoint, a start cannot
// replay it. Vanished then reads the known-key record (package checkpoint)
// and announces as deleted every recorded key the fresh list no longer
// has, by the rules that key by the object itself: the record holds keys,
// not values, so the owners of those objects are unknown (owners of
// surviving children come from the list).
package announcer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/object"
	"github.com/batonrun/baton/services/observer/internal/rules"
)

// Sink receives the keys a change announces; it must not block.
type Sink interface {
	// Put announces keys for a change observed at `at` in etcd revision rev
	// (0: not a change, e.g. a resync).
	Put(queue string, keys []string, prio queuev1.Priority, at time.Time, rev int64) error
}

// Records reads the known-key record stored beside the checkpoint.
type Records interface {
	// Record returns the record of prefix: nil if none is stored, an error
	// wrapping checkpoint.ErrNotRecorded if it does not cover the prefix,
	// one wrapping checkpoint.ErrCorrupt if it cannot be used.
	Record(ctx context.Context, prefix string) (*checkpoint.Record, error)
}

// Announcer is an informer.Consumer. It is safe for concurrent use.
type Announcer struct {
	cache   *cache.Cache
	sink    Sink
	records Records
	log     *slog.Logger

	rules atomic.Pointer[map[string][]rules.Rule] // prefix → its rules

	skipped sync.Map // queue → *atomic.Uint64: status-only changes not announced
}

var _ informer.Consumer = (*Announcer)(nil)

// New returns an announcer of rs, which reads objects from c (for Resync
// and Vanished), hands keys to sink and reads the known-key record from
// records (nil: none is ever read).
func New(rs []rules.Rule, c *cache.Cache, sink Sink, records Records, log *slog.Logger) *Announcer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Announcer{cache: c, sink: sink, records: records, log: log}
	a.SetRules(rs)
	return a
}

// SetRules replaces the rules; changes observed from then on are
// announced by rs. It returns the rules of rs that were not in force
// before (compared by queue, prefix and owner kind).
func (a *Announcer) SetRules(rs []rules.Rule) (added []rules.Rule) {
	byPrefix := map[string][]rules.Rule{}
	for _, r := range rs {
		byPrefix[r.Prefix] = append(byPrefix[r.Prefix], r)
	}
	old := a.rules.Swap(&byPrefix)
	type id struct{ queue, prefix, ownerKind string }
	before := map[id]bool{}
	if old != nil {
		for _, prs := range *old {
			for _, r := range prs {
				before[id{r.Queue, r.Prefix, r.OwnerKind}] = true
			}
		}
	}
	for _, r := range rs {
		if !before[id{r.Queue, r.Prefix, r.OwnerKind}] {
			added = append(added, r)
		}
	}
	return added
}

func (a *Announcer) rulesOf(prefix string) []rules.Rule { return (*a.rules.Load())[prefix] }

// priority is the priority of a change observed as src.
func priority(src informer.Source) queuev1.Priority {
	if src == informer.FirstList {
		return queuev1.Priority_PRIORITY_LOW
	}
	return queuev1.Priority_PRIORITY_NORMAL
}

// Changed announces one observed change. Only a watch event compares the
// value with the one it replaced: a relist's difference or a replayed
// change may stand for several changes, and is announced whatever it is.
func (a *Announcer) Changed(ch informer.Change) {
	statusOnly := ch.Source == informer.Event && object.StatusOnly(ch.Old, ch.Cur)
	a.announce(a.rulesOf(ch.Prefix), ch.Key, ch.Cur, ch.Old, statusOnly, priority(ch.Source), ch.At, ch.Rev)
}

// Skipped returns, per queue, the status-only changes not announced to it
// because its rule ignores them.
func (a *Announcer) Skipped() map[string]uint64 {
	out := map[string]uint64{}
	a.skipped.Range(func(q, n any) bool {
		out[q.(string)] = n.(*atomic.Uint64).Load()
		return true
	})
	return out
}

func (a *Announcer) skip(queue string) {
	n, ok := a.skipped.Load(queue)
	if !ok {
		n, _ = a.skipped.LoadOrStore(queue, new(atomic.Uint64))
	}
	n.(*atomic.Uint64).Add(1)
}

// Resync announces every cached object under prefix at PRIORITY_LOW.
func (a *Announcer) Resync(prefix string) { a.Backlog(a.rulesOf(prefix)) }

// Backlog announces every cached object under the prefixes of rs at
// PRIORITY_LOW, by rs only: the backlog of rules new on a prefix that was
// already watched.
func (a *Announcer) Backlog(rs []rules.Rule) {
	byPrefix := map[string][]rules.Rule{}
	for _, r := range rs {
		byPrefix[r.Prefix] = append(byPrefix[r.Prefix], r)
	}
	now := time.Now()
	for prefix, rs := range byPrefix {
		a.cache.Range(prefix, func(o *cache.Object) bool {
			a.announce(rs, o.Key, &o.Meta, nil, false, queuev1.Priority_PRIORITY_LOW, now, 0)
			return true
		})
	}
}

// announce sends the keys for a change of key from old to cur (either may
// be nil) to every rule's queue but those of rules that ignore it, a
// status-only change (statusOnly).
func (a *Announcer) announce(rs []rules.Rule, key string, cur, old *object.Meta, statusOnly bool, prio queuev1.Priority, at time.Time, rev int64) {
	for _, r := range rs {
		if r.Ignores(statusOnly) {
			a.skip(r.Queue)
			continue
		}
		var keys []string
		if cur != nil {
			keys = r.Keys(key, *cur)
		}
		if old != nil {
			for _, k := range r.Keys(key, *old) {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 && r.OwnerKind == "" {
			// A delete of a key with no value left still names the object.
			keys = r.Keys(key, object.Meta{})
		}
		if err := a.sink.Put(r.Queue, keys, prio, at, rev); err != nil {
			a.log.Error("announce", "prefix", r.Prefix, "queue", r.Queue, "error", err)
		}
	}
}

// Vanished announces as deleted, at PRIORITY_NORMAL and by the rules that
// key by the object itself, every key of the known-key record of prefix
// that the first list (the cache now, at listRev) no longer has: they were
// deleted while no observer ran, in history etcd has compacted
// (compactErr), so the replay from the checkpoint `from` could not show
// them. It is an informer's Options.Compacted. With no record it says what
// cannot be known, and goes on; an error reading the record is returned
// (the informer lists and replays again).
func (a *Announcer) Vanished(ctx context.Context, prefix string, from, listRev int64, compactErr error) error {
	log := a.log.With("prefix", prefix)
	var rec *checkpoint.Record
	var readErr error
	if a.records != nil {
		rec, readErr = a.records.Record(ctx, prefix)
		switch {
		case errors.Is(readErr, checkpoint.ErrNotRecorded):
			log.Info("history since the checkpoint is compacted and the known-key record does not cover this prefix (it was not watched when the record was written, e.g. declared while no observer ran): it is listed from scratch",
				"checkpoint", from, "error", compactErr)
			return nil
		case readErr != nil && !errors.Is(readErr, checkpoint.ErrCorrupt):
			return readErr
		}
	}
	if rec == nil {
		attrs := []any{"checkpoint", from, "error", compactErr}
		if readErr != nil {
			attrs = append(attrs, "record_error", readErr)
		}
		log.Warn("history since the checkpoint is compacted and no usable known-key record is stored (an observer older than the record wrote the checkpoint, or the record is corrupt); deletes made while no observer ran are not announced",
			attrs...)
		return nil
	}
	rs := a.rulesOf(prefix)
	now := time.Now()
	deleted := 0
	for _, k := range rec.Keys {
		if _, ok := a.cache.Get(k); ok {
			continue
		}
		a.announce(rs, k, nil, nil, false, queuev1.Priority_PRIORITY_NORMAL, now, listRev)
		deleted++
	}
	if rec.Revision < rec.Checkpoint {
		log.Warn("the known-key record is older than the checkpoint (an observer that keeps no record moved it): keys created between the two and deleted since are not announced",
			"record_revision", rec.Revision, "checkpoint", rec.Checkpoint)
	}
	log.Info("history since the checkpoint is compacted; announced as deleted every key of the known-key record the list no longer has",
		"checkpoint", from, "record_revision", rec.Revision, "recorded", len(rec.Keys), "deleted", deleted, "list_revision", listRev, "error", compactErr)
	return nil
}
