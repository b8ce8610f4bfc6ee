// Package informer keeps the cache in step with one etcd prefix: the
// shared informer. There is one Informer per watched prefix, whatever the
// number of rules on it. It knows no queues, rules or priorities: it hands
// every change it observes to a Consumer (the announcer), saying how it
// was observed (Source), and writes the cache through a Writer (the
// checkpoint's ledger, which remembers what the known-key record needs).
//
// # Lifecycle
//
//  1. Watch from etcd's head, on the stream every informer shares
//     (package watchmux), and list the prefix (paged) at the revision the
//     watch was created at into the cache; every object is a change of
//     Source FirstList. (A watch opened after the list would start behind
//     etcd's head, and etcd answers no progress request on the stream
//     while a watch on it catches up.)
//  2. Follow the watch: events after the list's revision update the cache
//     and are changes of Source Event; a delete carries the last value
//     seen. Progress notifications advance the observed revision while
//     the prefix is idle.
//  3. When the watch breaks (etcd restarted, connection lost, leader lost,
//     watch cancelled), watch again from the last observed revision (the
//     event at it, if any, is known and skipped): no gap, nothing observed
//     twice.
//  4. When that revision has been compacted away, watch from the head and
//     list again at its revision, diffing with the cache: every key
//     created, changed (different mod revision) or deleted in between is a
//     change of Source Relist.
//
// # Replay
//
// An informer given Options.Checkpoint replays, after its first list,
// etcd's history from that revision + 1 up to the list's revision (a
// watch with WithPrevKV, on a stream of its own: watchmux.Private): changes of Source Replay, deletes with their
// previous values; the cache is not touched. When that history is
// compacted it calls Options.Compacted, which knows what else can be done
// (package checkpoint explains the guarantee, package announcer what is
// announced). SafeRevision, LastChange and ListRevision tell the
// checkpoint how far the prefix has been handed on.
//
// # Malformed keys and values
//
// A key that does not fit the layout (object.SplitKey) is neither cached
// nor handed on. A malformed value at a good key (object.Decode,
// object.Check) is cached with an empty Meta, so it has no owners, and
// handed on with it. Both are counted by reason (Stats.Malformed) and
// logged at WARN at most once per key per MalformedLogInterval.
package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/object"
	"github.com/batonrun/baton/services/observer/internal/watchmux"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Source says how a change was observed.
type Source uint8

const (
	// FirstList: the informer's first list of its prefix.
	FirstList Source = iota
	// Relist: a difference a later list (after compaction) found with the
	// cache.
	Relist
	// Event: a watch event.
	Event
	// Replay: etcd's history after the checkpoint, replayed after the first
	// list; the cache already holds the outcome.
	Replay
)

// Change is one observed change of the object at Key.
type Change struct {
	// Prefix is the informer's prefix.
	Prefix string
	Key    string
	// Cur is the new value's metadata; nil for a delete.
	Cur *object.Meta
	// Old is the last value's metadata seen before the change (the cache's,
	// or etcd's previous value in a replay); nil when none is known.
	Old *object.Meta
	// Rev is the etcd revision of the change (a list's revision for a list).
	Rev int64
	// At is when the informer observed it.
	At     time.Time
	Source Source
}

// Consumer receives every change an informer observes, in order; Changed
// must not block (the watch waits for it).
type Consumer interface {
	Changed(Change)
}

// Writer applies an informer's changes to the cache. The revisions let a
// Writer that remembers keys (checkpoint.Ledger) know when each appeared
// and went.
type Writer interface {
	// Put stores obj and returns the object it replaced; a key new to the
	// cache may have existed from revision since on.
	Put(obj *cache.Object, since int64) *cache.Object
	// Delete removes key, gone by revision rev, and returns the object
	// removed (nil if none).
	Delete(key string, rev int64) *cache.Object
	// Listed says that a list made the cache equal to etcd at rev.
	Listed(rev int64)
}

// Direct returns a Writer that writes c and remembers nothing.
func Direct(c *cache.Cache) Writer { return direct{c} }

type direct struct{ c *cache.Cache }

func (d direct) Put(obj *cache.Object, _ int64) *cache.Object { return d.c.Put(obj) }
func (d direct) Delete(key string, _ int64) *cache.Object     { return d.c.Delete(key) }
func (direct) Listed(int64)                                   {}

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
	// Compacted, if set, is called when the history since the checkpoint
	// `from` is compacted (compactErr says so), after the first list at
	// listRev: it makes up for the replay that cannot be made. An error is
	// retried with a new list and replay.
	Compacted func(ctx context.Context, prefix string, from, listRev int64, compactErr error) error
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
	Listed           bool // the first list (and its replay) is done
	// Malformed counts the malformed keys and values seen (in lists and
	// watch events), indexed by object.Reason.
	Malformed [object.NumReasons]uint64
}

// Informer watches one prefix.
type Informer struct {
	mux      *watchmux.Mux
	cli      *clientv3.Client
	prefix   string
	cache    *cache.Cache
	writer   Writer
	consumer Consumer
	opts     Options
	log      *slog.Logger

	observed atomic.Int64 // the revision the cache reflects for prefix
	head     atomic.Int64
	events   atomic.Uint64
	relists  atomic.Uint64
	restarts atomic.Uint64
	listed   atomic.Bool
	changed  atomic.Int64  // revision of the last change seen (event or list)
	listRev  atomic.Int64  // revision of the last list
	listedC  chan struct{} // closed when listed is first set

	malformed malformedLog
}

// New returns an informer of prefix that keeps c through w (nil: Direct(c))
// and hands every change to consumer; it watches through mux.
func New(mux *watchmux.Mux, prefix string, c *cache.Cache, w Writer, consumer Consumer, opts Options) *Informer {
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
	if w == nil {
		w = Direct(c)
	}
	in := &Informer{mux: mux, cli: mux.Client(), prefix: prefix, cache: c, writer: w, consumer: consumer, opts: opts,
		log: opts.Logger.With("prefix", prefix), listedC: make(chan struct{})}
	in.malformed = malformedLog{log: in.log, limit: newKeyLimiter(MalformedLogInterval, MalformedLogKeys)}
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
// prefix has been handed to the consumer (0 until the first list, and its
// replay, are done).
func (in *Informer) SafeRevision() int64 {
	// Changes are handed on before the observed revision moves past them,
	// and the first list (with its replay) before listed is set.
	if !in.listed.Load() {
		return 0
	}
	return in.observed.Load()
}

// LastChange returns the revision of the last change seen under the prefix
// (a watch event, or a list's revision).
func (in *Informer) LastChange() int64 { return in.changed.Load() }

// ListRevision returns the revision of the last list (0 before the first).
func (in *Informer) ListRevision() int64 { return in.listRev.Load() }

// Listed reports whether the first list (and its replay) is done.
func (in *Informer) Listed() bool { return in.listed.Load() }

// ListedC is closed once the first list (and its replay) is done.
func (in *Informer) ListedC() <-chan struct{} { return in.listedC }

func (in *Informer) setListed() {
	if !in.listed.Swap(true) {
		close(in.listedC)
	}
}

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
			c, err := in.readCheckpoint(ctx)
			if err != nil {
				if ctx.Err() == nil {
					in.log.Warn("read checkpoint failed; retrying", "error", err)
					backoff()
				}
				continue
			}
			checkpoint = c
		}
		var w *watchmux.Watch
		if needList {
			// The watch first, from etcd's head, then the list at the
			// revision it was created at: a watch opened from its list's
			// revision would have to catch up with the writes made since,
			// and etcd answers no progress request on the shared stream
			// while one does.
			w = in.mux.Watch(in.prefix, 0)
			rev, err := w.Created(ctx)
			if err == nil && !in.sync(ctx, checkpoint, rev) {
				err = errors.New("list failed")
			} else if err != nil && ctx.Err() == nil {
				in.log.Warn("watch failed; retrying", "error", err)
			}
			if err != nil {
				w.Close()
				if ctx.Err() == nil {
					backoff()
				}
				continue
			}
			needList = false
		} else {
			w = in.mux.Watch(in.prefix, in.observed.Load())
		}
		err := in.follow(ctx, w)
		if ctx.Err() != nil {
			break
		}
		in.restarts.Add(1)
		if errors.Is(err, rpctypes.ErrCompacted) {
			in.log.Info("watch revision compacted; listing again", "observed", in.observed.Load(), "error", err)
			needList = true
			continue
		}
		if errors.Is(err, watchmux.ErrBroken) {
			// The mux logged the stream's break, once for every watch.
			in.log.Debug("watch broke with its stream; resuming", "from", in.observed.Load(), "error", err)
		} else {
			in.log.Warn("watch broke; resuming", "from", in.observed.Load(), "error", err)
		}
		if !backoff() {
			break
		}
	}
	return nil
}

// readCheckpoint returns the revision to replay from (0 without
// Options.Checkpoint).
func (in *Informer) readCheckpoint(ctx context.Context) (int64, error) {
	if in.opts.Checkpoint == nil {
		return 0, nil
	}
	return in.opts.Checkpoint(ctx)
}

// sync lists the prefix into the cache at revision rev and, the first
// time, replays the history after checkpoint up to it; then the informer
// is listed. It logs a failure and returns false.
func (in *Informer) sync(ctx context.Context, checkpoint, rev int64) bool {
	src := Relist
	if !in.listed.Load() {
		src = FirstList
	}
	if err := in.relist(ctx, src, rev); err != nil {
		if ctx.Err() == nil {
			in.log.Warn("list failed; retrying", "error", err)
		}
		return false
	}
	if !in.listed.Load() && in.opts.Checkpoint != nil && checkpoint < in.observed.Load() {
		err := in.replay(ctx, checkpoint, in.observed.Load())
		if compactErr := err; errors.Is(compactErr, rpctypes.ErrCompacted) {
			err = nil
			if in.opts.Compacted != nil {
				err = in.opts.Compacted(ctx, in.prefix, checkpoint, in.observed.Load(), compactErr)
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				in.log.Warn("replay failed; listing and replaying again", "error", err)
			}
			return false
		}
	}
	in.setListed()
	return true
}

// hand passes one change to the consumer.
func (in *Informer) hand(key string, cur, old *object.Meta, src Source, at time.Time, rev int64) {
	in.consumer.Changed(Change{Prefix: in.prefix, Key: key, Cur: cur, Old: old, Rev: rev, At: at, Source: src})
}

// newObject returns the cache's object for kv, or nil for a key that does
// not fit the layout: such a key is neither cached nor handed on, as it
// names no object a controller could look up. A malformed value at a good
// key is cached with an empty Meta (no owners, so no owner keys and no
// place in the owner index) and still handed on, so that it is announced
// by its own key and its controller reports the problem on that key. Both
// are counted and logged (rate-limited).
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

// relist reads the whole prefix at revision rev (0: etcd's head) and makes
// the cache equal to it, handing on every difference as a change of Source
// src.
func (in *Informer) relist(ctx context.Context, src Source, rev int64) error {
	start := time.Now()
	in.relists.Add(1)
	end := clientv3.GetPrefixRangeEnd(in.prefix)
	from := in.prefix
	// A key the list finds that the cache lacks appeared after the
	// revision the cache reflected (or, at the first list, any time).
	since := in.observed.Load() + 1
	// Not sized by the cache: it holds every prefix's objects.
	seen := map[string]struct{}{}
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
			old := in.writer.Put(obj, since)
			if old == nil {
				created++
				in.hand(key, &obj.Meta, nil, src, now, rev)
			} else {
				changed++
				in.hand(key, &obj.Meta, &old.Meta, src, now, rev)
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
		if old := in.writer.Delete(o.Key, rev); old != nil {
			deleted++
			in.hand(o.Key, nil, &old.Meta, src, now, rev)
		}
	}
	in.changed.Store(max(in.changed.Load(), rev))
	in.writer.Listed(rev)
	in.listRev.Store(rev)
	in.setObserved(rev)
	in.log.Info("listed", "revision", rev, "objects", len(seen), "created", created, "changed", changed, "deleted", deleted, "took", time.Since(start))
	return nil
}

// follow hands on what w sees until it breaks, and returns why; it closes
// w.
func (in *Informer) follow(ctx context.Context, w *watchmux.Watch) error {
	defer w.Close()
	for {
		resp, err := w.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if resp.Head > 0 {
			in.setHead(resp.Head)
		}
		if len(resp.Events) == 0 {
			// Every event up to it has been handed on.
			in.setObserved(resp.Progress)
			continue
		}
		in.apply(resp.Events)
	}
}

// apply puts a batch of events into the cache and hands them on. The
// observed revision moves to the last event's revision: a watch response's
// header revision can run ahead of the events it carries (etcd sends a long
// catch-up in batches), so it is not used here.
func (in *Informer) apply(evs []*mvccpb.Event) {
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
		case mvccpb.PUT:
			obj := in.newObject(ev.Kv)
			if obj == nil {
				break
			}
			old := in.writer.Put(obj, rev)
			var oldMeta *object.Meta
			if old != nil {
				oldMeta = &old.Meta
			}
			in.hand(key, &obj.Meta, oldMeta, Event, now, rev)
		case mvccpb.DELETE:
			if _, _, err := object.SplitKey(key, in.prefix); err != nil {
				break // never cached nor handed on
			}
			old := in.writer.Delete(key, rev)
			var oldMeta *object.Meta
			if old != nil {
				oldMeta = &old.Meta
			}
			in.hand(key, nil, oldMeta, Event, now, rev)
		}
		last = max(last, rev)
	}
	if last > observed {
		in.changed.Store(max(in.changed.Load(), last))
		in.setObserved(last)
	}
}

// replay hands on every change under the prefix in etcd's history from
// from + 1 up to `to`, with the previous values; the cache is not touched
// (the list at `to` already holds the outcome).
func (in *Informer) replay(ctx context.Context, from, to int64) error {
	start := time.Now()
	// Its progress must be trusted from the first moment: a stream of its
	// own, on which etcd answers only once this watch has caught up.
	pctx, release, err := in.mux.Private(ctx)
	if err != nil {
		return err
	}
	defer release()
	wctx, cancel := context.WithCancel(pctx)
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
					continue // never handed on
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
				in.hand(key, cur, old, Replay, now, rev)
			}
		}
	}
}
