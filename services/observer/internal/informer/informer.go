// Package informer keeps the cache in step with one etcd prefix and turns
// each change into queue keys: the shared informer. There is one Informer
// per watched prefix, whatever the number of rules on it.
//
// # Lifecycle
//
//  1. List the prefix (paged, at one revision) into the cache; every object
//     is announced at PRIORITY_LOW (the queue collapses what it already
//     holds, so a restarted observer costs little).
//  2. Watch from the list's revision + 1 with WithRequireLeader and
//     WithProgressNotify. Events update the cache and are announced at
//     PRIORITY_NORMAL; a delete announces the object's key and its owners'
//     keys from the last value seen. Progress notifications advance the
//     observed revision while the prefix is idle.
//  3. When the watch breaks (etcd restarted, connection lost, leader lost,
//     watch cancelled), watch again from the last observed revision + 1: no
//     gap, nothing announced twice on purpose.
//  4. When that revision has been compacted away, list again and diff with
//     the cache: every key created, changed (different mod revision) or
//     deleted in between is announced at PRIORITY_NORMAL.
//
// # Checkpoint and replay
//
// A list cannot show what was deleted while no observer was running. So the
// observer records a checkpoint in etcd: a revision up to which every
// change has been accepted by the queue (SafeRevision, combined with the
// outbox by the service). An informer started with a checkpoint C replays
// etcd's history from C + 1 up to its list's revision (a watch with
// WithPrevKV) and announces every change in it at PRIORITY_NORMAL, deletes
// with their owners from the previous value; with no checkpoint yet, it
// replays all the history etcd holds. If etcd has compacted that history,
// the informer reads the known-key record stored beside the checkpoint
// (Options.Known) and announces as deleted every recorded key the list no
// longer has; the owners of those keys are unknown (owners of surviving
// children still come from the list). Without a record it warns that
// such deletes are not announced.
//
// The informer keeps what that record needs (KnownKeys, Unrecorded, Floor,
// Recorded): the keys it knew from the last stored checkpoint on, and
// whether the stored record still covers them. Within one process, a
// relist after compaction finds deletes by diffing with the cache.
//
// # Malformed keys and values
//
// A key that does not fit the layout (object.SplitKey) is neither cached
// nor announced. A malformed value at a good key (object.Decode,
// object.Check) is cached with an empty Meta, so it has no owners, and
// announced by its own key. Both are counted by reason (Stats.Malformed)
// and logged at WARN at most once per key per MalformedLogInterval.
package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/object"
	"github.com/batonrun/baton/services/observer/internal/rules"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// Sink receives the keys a change announces; it must not block.
type Sink interface {
	// Put announces keys for a change observed at `at` in etcd revision rev
	// (0: not a change, e.g. a resync).
	Put(queue string, keys []string, prio queuev1.Priority, at time.Time, rev int64) error
}

// Options tune an Informer; zero values take the defaults.
type Options struct {
	// PageSize is the number of keys per Get when listing (default 5000:
	// etcd counts the whole remaining range for every page, so small pages
	// make a large list quadratic).
	PageSize int64
	// RetryMin and RetryMax bound the wait before re-watching or re-listing
	// after an error (defaults 100 ms and 5 s).
	RetryMin, RetryMax time.Duration
	// Checkpoint, if set, returns the revision up to which an earlier
	// observer delivered every change (0 when there is none: then the whole
	// history etcd still holds is replayed); it is called before the first
	// list, and the history after it is replayed. Without it nothing is
	// replayed.
	Checkpoint func(context.Context) (int64, error)
	// Known, if set, returns the known-key record of a prefix (nil if none
	// is stored). When the history since the checkpoint is compacted, every
	// key of the record that the first list lacks is announced as deleted.
	// An error wrapping checkpoint.ErrCorrupt is taken as no record; others
	// are retried.
	Known func(ctx context.Context, prefix string) (*checkpoint.Record, error)
	// Logger; nil discards.
	Logger *slog.Logger
}

// Stats are an informer's counters.
type Stats struct {
	Prefix           string
	ObservedRevision int64
	HeadRevision     int64
	Events           uint64
	Relists          uint64
	WatchRestarts    uint64
	Listed           bool // the first list is done
	// Malformed counts the malformed keys and values seen (in lists and
	// watch events), indexed by object.Reason.
	Malformed [object.NumReasons]uint64
}

// Informer watches one prefix.
type Informer struct {
	cli    *clientv3.Client
	prefix string
	rules  []rules.Rule
	cache  *cache.Cache
	sink   Sink
	opts   Options
	log    *slog.Logger

	observed atomic.Int64 // the revision the cache reflects for prefix
	head     atomic.Int64
	events   atomic.Uint64
	relists  atomic.Uint64
	restarts atomic.Uint64
	listed   atomic.Bool
	streams  atomic.Uint64 // watches opened, to give each its own stream
	changed  atomic.Int64  // revision of the last change seen (event or list)

	malformed malformedLog
	ledger    ledger

	mu      sync.Mutex
	watchCx context.Context // the watch's context, for RequestProgress; nil when not watching
}

// New returns an informer for the rules on prefix (rules on other prefixes
// are ignored).
func New(cli *clientv3.Client, prefix string, rs []rules.Rule, c *cache.Cache, sink Sink, opts Options) *Informer {
	if opts.PageSize <= 0 {
		opts.PageSize = 5000
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = 100 * time.Millisecond
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(5*time.Second, opts.RetryMin)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	in := &Informer{cli: cli, prefix: prefix, cache: c, sink: sink, opts: opts, log: opts.Logger.With("prefix", prefix)}
	in.malformed = malformedLog{log: in.log, limit: newKeyLimiter(MalformedLogInterval, MalformedLogKeys)}
	for _, r := range rs {
		if r.Prefix == prefix {
			in.rules = append(in.rules, r)
		}
	}
	return in
}

// Prefix returns the watched prefix.
func (in *Informer) Prefix() string { return in.prefix }

// Stats returns the counters.
func (in *Informer) Stats() Stats {
	return Stats{
		Prefix: in.prefix, ObservedRevision: in.observed.Load(), HeadRevision: max(in.head.Load(), in.observed.Load()),
		Events: in.events.Load(), Relists: in.relists.Load(), WatchRestarts: in.restarts.Load(), Listed: in.listed.Load(),
		Malformed: in.malformed.count(),
	}
}

// SafeRevision returns the revision up to which every change under the
// prefix has been handed to the sink (0 until the first list, and its
// replay, are done).
func (in *Informer) SafeRevision() int64 {
	// Changes are put into the sink before the observed revision moves past
	// them, and the first list (with its replay) before listed is set.
	if !in.listed.Load() {
		return 0
	}
	return in.observed.Load()
}

// LastChange returns the revision of the last change seen under the prefix
// (a watch event, or a list's revision).
func (in *Informer) LastChange() int64 { return in.changed.Load() }

// Listed reports whether the first list is done.
func (in *Informer) Listed() bool { return in.listed.Load() }

// Run lists and watches until ctx ends; it returns nil then. Errors from
// etcd are retried forever with backoff: the observer's job is to keep
// watching.
func (in *Informer) Run(ctx context.Context) error {
	wait := in.opts.RetryMin
	backoff := func() bool {
		t := time.NewTimer(time.Duration(float64(wait) * (0.5 + rand.Float64()/2)))
		defer t.Stop()
		wait = min(2*wait, in.opts.RetryMax)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	needList := true
	var checkpoint int64 = -1 // not read yet
	for ctx.Err() == nil {
		if checkpoint < 0 {
			checkpoint = 0
			if in.opts.Checkpoint != nil {
				c, err := in.opts.Checkpoint(ctx)
				if err != nil {
					checkpoint = -1
					if ctx.Err() == nil {
						in.log.Warn("read checkpoint failed; retrying", "error", err)
						backoff()
					}
					continue
				}
				checkpoint = c
			}
		}
		if needList {
			prio := queuev1.Priority_PRIORITY_NORMAL
			if !in.listed.Load() {
				prio = queuev1.Priority_PRIORITY_LOW
			}
			if err := in.relist(ctx, prio); err != nil {
				if ctx.Err() == nil {
					in.log.Warn("list failed; retrying", "error", err)
					backoff()
				}
				continue
			}
			needList = false
			if !in.listed.Load() && in.opts.Checkpoint != nil && checkpoint < in.observed.Load() {
				err := in.replay(ctx, checkpoint, in.observed.Load())
				if errors.Is(err, rpctypes.ErrCompacted) {
					err = in.announceVanished(ctx, checkpoint, err)
				}
				if err != nil {
					if ctx.Err() == nil {
						in.log.Warn("replay failed; listing and replaying again", "error", err)
						needList = true
						backoff()
					}
					continue
				}
			}
			in.listed.Store(true)
		}
		err := in.watch(ctx)
		if ctx.Err() != nil {
			break
		}
		in.restarts.Add(1)
		if errors.Is(err, rpctypes.ErrCompacted) {
			in.log.Info("watch revision compacted; listing again", "observed", in.observed.Load(), "error", err)
			needList = true
			continue
		}
		in.log.Warn("watch broke; resuming", "from", in.observed.Load()+1, "error", err)
		if !backoff() {
			break
		}
	}
	return nil
}

// RequestProgress asks etcd for a progress notification on this watch, so
// the observed revision catches up with etcd's head while the prefix is
// idle. It does nothing when not watching.
func (in *Informer) RequestProgress() {
	in.mu.Lock()
	wctx := in.watchCx
	in.mu.Unlock()
	if wctx == nil {
		return
	}
	// etcd routes RequestProgress by the metadata of the context the watch
	// was opened with, so it must be derived from the watch's context.
	rctx, cancel := context.WithTimeout(wctx, time.Second)
	defer cancel()
	_ = in.cli.RequestProgress(rctx) // best effort: the periodic one follows
}

// Resync announces every cached object under the prefix at PRIORITY_LOW.
func (in *Informer) Resync() {
	now := time.Now()
	in.cache.Range(in.prefix, func(o *cache.Object) bool {
		in.announce(o.Key, &o.Meta, nil, queuev1.Priority_PRIORITY_LOW, now, 0)
		return true
	})
}

// announce sends the keys for a change of key from old to cur (either may
// be nil) to every rule's queue.
func (in *Informer) announce(key string, cur, old *object.Meta, prio queuev1.Priority, at time.Time, rev int64) {
	for _, r := range in.rules {
		var keys []string
		if cur != nil {
			keys = r.Keys(key, *cur)
		}
		if old != nil {
			for _, k := range r.Keys(key, *old) {
				if !contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 && r.OwnerKind == "" {
			// A delete of a key with no value left still names the object.
			keys = r.Keys(key, object.Meta{})
		}
		if err := in.sink.Put(r.Queue, keys, prio, at, rev); err != nil {
			in.log.Error("announce", "queue", r.Queue, "error", err)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// newObject returns the cache's object for kv, or nil for a key that does
// not fit the layout: such a key is neither cached nor announced, as it
// names no object a controller could look up. A malformed value at a good
// key is cached with an empty Meta (no owners, so no owner keys and no
// place in the owner index) and still announced by its own key, so its
// controller finds it and reports the problem on that key. Both are
// counted and logged (rate-limited).
func (in *Informer) newObject(kv *mvccpb.KeyValue) *cache.Object {
	key := string(kv.Key)
	if _, _, err := object.SplitKey(key, in.prefix); err != nil {
		in.malformed.report(key, kv.ModRevision, err, "its key does not fit the layout /registry/<resource>/[<namespace>/]<name>; not cached, not announced")
		return nil
	}
	m, err := object.Decode(kv.Value)
	if err == nil {
		err = object.Check(m, key, in.prefix)
	}
	if err != nil {
		in.malformed.report(key, kv.ModRevision, err, "cached without owners and announced by its own key only")
		m = object.Meta{}
	}
	return &cache.Object{Key: key, Value: kv.Value, ModRevision: kv.ModRevision, Meta: m, Namespace: object.Namespace(m, key, in.prefix)}
}

// decode is newObject's Meta for a value that is not cached (a replayed
// one): nothing is counted or logged, the list of the current value does.
func (in *Informer) decode(key string, value []byte) object.Meta {
	m, err := object.Decode(value)
	if err == nil {
		err = object.Check(m, key, in.prefix)
	}
	if err != nil {
		return object.Meta{}
	}
	return m
}

// setObserved records that the cache reflects etcd up to rev.
func (in *Informer) setObserved(rev int64) {
	for {
		cur := in.observed.Load()
		if rev <= cur || in.observed.CompareAndSwap(cur, rev) {
			break
		}
	}
	in.cache.SetRevision(in.prefix, rev)
}

func (in *Informer) setHead(rev int64) {
	for {
		cur := in.head.Load()
		if rev <= cur || in.head.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// relist reads the whole prefix at one revision and makes the cache equal
// to it, announcing every difference at prio.
func (in *Informer) relist(ctx context.Context, prio queuev1.Priority) error {
	start := time.Now()
	in.relists.Add(1)
	end := clientv3.GetPrefixRangeEnd(in.prefix)
	from := in.prefix
	// A key the list finds that the cache lacks appeared after the
	// revision the cache reflected (or, at the first list, any time).
	since := in.observed.Load() + 1
	var rev int64
	seen := make(map[string]struct{}, in.cache.Len())
	var created, changed, deleted int
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(in.opts.PageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := in.cli.Get(ctx, from, opts...)
		if err != nil {
			return fmt.Errorf("list %s: %w", in.prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		in.setHead(resp.Header.Revision)
		now := time.Now()
		for _, kv := range resp.Kvs {
			key := string(kv.Key)
			if cur, ok := in.cache.Get(key); ok && cur.ModRevision == kv.ModRevision {
				seen[key] = struct{}{}
				continue
			}
			obj := in.newObject(kv)
			if obj == nil {
				continue
			}
			seen[key] = struct{}{}
			old := in.cachePut(obj, since)
			if old == nil {
				created++
				in.announce(key, &obj.Meta, nil, prio, now, rev)
			} else {
				changed++
				in.announce(key, &obj.Meta, &old.Meta, prio, now, rev)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	now := time.Now()
	for _, o := range in.cache.Snapshot(in.prefix) {
		if _, ok := seen[o.Key]; ok {
			continue
		}
		if old := in.cacheDelete(o.Key, rev); old != nil {
			deleted++
			in.announce(o.Key, nil, &old.Meta, prio, now, rev)
		}
	}
	in.changed.Store(max(in.changed.Load(), rev))
	in.setFloor(rev)
	in.setObserved(rev)
	in.log.Info("listed", "revision", rev, "objects", len(seen), "created", created, "changed", changed, "deleted", deleted, "took", time.Since(start))
	return nil
}

// ownStream returns a context for opening one watch on a gRPC stream of its
// own, with WithRequireLeader: a member cut off from its cluster closes the
// watch instead of silently serving nothing, and we resume elsewhere.
//
// clientv3 puts every watch opened with equal context metadata on one
// stream, and etcd answers RequestProgress on a stream with one
// notification that clientv3 hands to every watch on it. On a shared stream
// that notification, computed before a new watch existed, can reach the new
// watch after its creation and before the events it must catch up on (etcd
// sends the creation and the notification on different internal channels);
// trusting it would skip those events. A stream per watch rules that out:
// etcd notifies a stream only when all its watches have caught up.
func (in *Informer) ownStream(ctx context.Context) context.Context {
	id := fmt.Sprintf("%p-%d", in, in.streams.Add(1))
	return metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "baton-watch-stream", id)
}

// watch follows the prefix from the observed revision + 1 until the watch
// breaks; it returns why.
func (in *Informer) watch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(in.ownStream(ctx))
	defer cancel()
	in.mu.Lock()
	in.watchCx = wctx
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.watchCx = nil
		in.mu.Unlock()
	}()
	from := in.observed.Load() + 1
	wch := in.cli.Watch(wctx, in.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("watch from %d: %w (compacted at %d)", in.observed.Load()+1, rpctypes.ErrCompacted, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if resp.Header.Revision > 0 {
			in.setHead(resp.Header.Revision)
		}
		if resp.IsProgressNotify() {
			// Every event up to the header's revision has been sent.
			in.setObserved(resp.Header.Revision)
			continue
		}
		in.apply(resp.Events)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch channel closed")
}

// apply puts a batch of events into the cache and announces them. The
// observed revision moves to the last event's revision: a watch response's
// header revision can run ahead of the events it carries (etcd sends a long
// catch-up in batches), so it is not used here.
func (in *Informer) apply(evs []*clientv3.Event) {
	now := time.Now()
	observed := in.observed.Load()
	last := observed
	for _, ev := range evs {
		rev := ev.Kv.ModRevision
		if rev <= observed {
			continue // already seen, e.g. replayed after a reconnect
		}
		in.events.Add(1)
		key := string(ev.Kv.Key)
		switch ev.Type {
		case clientv3.EventTypePut:
			obj := in.newObject(ev.Kv)
			if obj == nil {
				break
			}
			old := in.cachePut(obj, rev)
			var oldMeta *object.Meta
			if old != nil {
				oldMeta = &old.Meta
			}
			in.announce(key, &obj.Meta, oldMeta, queuev1.Priority_PRIORITY_NORMAL, now, rev)
		case clientv3.EventTypeDelete:
			if _, _, err := object.SplitKey(key, in.prefix); err != nil {
				break // never cached nor announced
			}
			old := in.cacheDelete(key, rev)
			var oldMeta *object.Meta
			if old != nil {
				oldMeta = &old.Meta
			}
			in.announce(key, nil, oldMeta, queuev1.Priority_PRIORITY_NORMAL, now, rev)
		}
		last = max(last, rev)
	}
	if last > observed {
		in.changed.Store(max(in.changed.Load(), last))
		in.setObserved(last)
	}
}

// announceVanished announces as deleted, at PRIORITY_NORMAL and by the
// rules that key by the object itself, every key of the known-key record
// that the first list (the cache now) no longer has: they were deleted
// while no observer ran, in history etcd has compacted (compactErr), so the
// replay from the checkpoint `from` could not show them. Their owners are unknown
// (the record holds keys only); owners of surviving children come from the
// list. With no record it says what cannot be known, and goes on.
func (in *Informer) announceVanished(ctx context.Context, from int64, compactErr error) error {
	var rec *checkpoint.Record
	var readErr error
	if in.opts.Known != nil {
		rec, readErr = in.opts.Known(ctx, in.prefix)
		if readErr != nil && !errors.Is(readErr, checkpoint.ErrCorrupt) {
			return readErr
		}
	}
	if rec == nil {
		attrs := []any{"checkpoint", from, "error", compactErr}
		if readErr != nil {
			attrs = append(attrs, "record_error", readErr)
		}
		in.log.Warn("history since the checkpoint is compacted and no usable known-key record is stored (an observer older than the record wrote the checkpoint, or the record is corrupt); deletes made while no observer ran are not announced",
			attrs...)
		return nil
	}
	now, rev := time.Now(), in.observed.Load()
	deleted := 0
	for _, k := range rec.Keys {
		if _, ok := in.cache.Get(k); ok {
			continue
		}
		in.announce(k, nil, nil, queuev1.Priority_PRIORITY_NORMAL, now, rev)
		deleted++
	}
	if rec.Revision < rec.Checkpoint {
		in.log.Warn("the known-key record is older than the checkpoint (an observer that keeps no record moved it): keys created between the two and deleted since are not announced",
			"record_revision", rec.Revision, "checkpoint", rec.Checkpoint)
	}
	in.log.Info("history since the checkpoint is compacted; announced as deleted every key of the known-key record the list no longer has",
		"checkpoint", from, "record_revision", rec.Revision, "recorded", len(rec.Keys), "deleted", deleted, "list_revision", rev, "error", compactErr)
	return nil
}

// replay announces every change under the prefix in etcd's history from
// from + 1 up to `to`, with owners from the previous values; the cache is
// not touched (the list at `to` already holds the outcome).
func (in *Informer) replay(ctx context.Context, from, to int64) error {
	start := time.Now()
	wctx, cancel := context.WithCancel(in.ownStream(ctx))
	defer cancel()
	wch := in.cli.Watch(wctx, in.prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	// etcd sends progress only to a watch that has caught up, so ask until
	// the answer says the history up to `to` has been sent.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			_ = in.cli.RequestProgress(wctx)
		case resp, ok := <-wch:
			if !ok {
				return errors.New("replay watch closed")
			}
			if resp.CompactRevision != 0 {
				return fmt.Errorf("replay from %d: %w (compacted at %d)", from+1, rpctypes.ErrCompacted, resp.CompactRevision)
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= to {
				in.log.Info("replayed history since the checkpoint", "from", from+1, "to", to, "changes", n, "took", time.Since(start))
				return nil
			}
			now := time.Now()
			for _, ev := range resp.Events {
				rev := ev.Kv.ModRevision
				if rev > to {
					in.log.Info("replayed history since the checkpoint", "from", from+1, "to", to, "changes", n, "took", time.Since(start))
					return nil
				}
				n++
				key := string(ev.Kv.Key)
				if _, _, err := object.SplitKey(key, in.prefix); err != nil {
					continue // never announced
				}
				var cur, old *object.Meta
				if ev.Type == clientv3.EventTypePut {
					m := in.decode(key, ev.Kv.Value)
					cur = &m
				}
				if ev.PrevKv != nil {
					m := in.decode(key, ev.PrevKv.Value)
					old = &m
				}
				in.announce(key, cur, old, queuev1.Priority_PRIORITY_NORMAL, now, rev)
			}
		}
	}
}
