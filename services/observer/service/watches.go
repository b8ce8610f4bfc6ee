package service

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/declarations"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/rules"
)

// reservedPrefixes are the observer's own: no rule may watch them, or a
// prefix around them.
var reservedPrefixes = []string{checkpoint.Root, kinds.DeclarationPrefix}

// watch is one prefix's informer, running.
type watch struct {
	in      *informer.Informer
	atStart bool // set up at start: readiness waits for its first list
	cancel  context.CancelFunc
	done    chan struct{}
}

// declChanged is the declarations' informer's consumer: it only says that
// something changed; the observer then reads every declaration from the
// cache (level-based, so a burst of changes is one update). It remembers
// the newest revision it was handed: the informer caches a change before
// it hands it on, so an update that reads it first reads every change up
// to it (declarationsRevision).
type declChanged struct {
	c   chan struct{}
	rev *atomic.Int64
}

func (d declChanged) Changed(ch informer.Change) {
	for {
		cur := d.rev.Load()
		if ch.Rev <= cur || d.rev.CompareAndSwap(cur, ch.Rev) {
			break
		}
	}
	select {
	case d.c <- struct{}{}:
	default:
	}
}

// run watches the declarations and keeps one informer per prefix of the
// rules in force until ctx ends, then waits for every informer to stop.
// The prefixes in force once the declarations are first listed are set up
// as a start's (listed, then etcd's history since the checkpoint is
// replayed); those that come later are listed only (their backlog).
func (o *observer) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer o.mux.Close() // after every informer has stopped
	defer wg.Wait()
	wg.Go(func() { _ = o.declWatch.Run(ctx) })
	defer o.stopAll()
	select {
	case <-ctx.Done():
		return
	case <-o.declWatch.ListedC():
	}
	o.update(ctx, true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.declC:
			o.update(ctx, false)
		}
	}
}

// update recomputes the rules in force from the declarations in the cache
// and makes the watches and the announcer follow.
func (o *observer) update(ctx context.Context, atStart bool) {
	// Read before the declarations: they reflect at least this revision.
	rev := max(o.cache.Revision(kinds.DeclarationPrefix), o.declHanded.Load())
	var entries []declarations.Entry
	o.cache.Range(kinds.DeclarationPrefix, func(obj *cache.Object) bool {
		entries = append(entries, declarations.Entry{Key: obj.Key, ModRevision: obj.ModRevision, Value: obj.Value})
		return true
	})
	rs, statuses := o.decls.Update(entries)
	o.mu.Lock()
	o.statuses = statuses
	o.mu.Unlock()
	o.apply(ctx, rs, atStart)
	o.mu.Lock()
	o.declRev = max(o.declRev, rev)
	o.mu.Unlock()
}

// declarationsRevision is the etcd revision up to which the rules in force
// reflect every change under kinds.DeclarationPrefix (StatusResponse's
// declarations_revision), 0 before the first update. Once the last update
// has taken every change handed on, the rules reflect the declarations'
// cache as far as it goes; the cache's revision is read before the newest
// change handed, so a change cached and not yet handed (the informer hands
// each change on before it moves the revision) is never claimed.
func (o *observer) declarationsRevision() int64 {
	cached := o.cache.Revision(kinds.DeclarationPrefix)
	handed := o.declHanded.Load()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.declRev == 0 || handed > o.declRev {
		return o.declRev
	}
	return max(o.declRev, cached)
}

// apply puts rs in force. New prefixes get an informer, started after the
// announcer has their rules; rules new on a prefix already watched
// announce its cached objects (their backlog); prefixes no rule needs any
// more stop being watched and cached. Rules equal to those in force change
// nothing.
func (o *observer) apply(ctx context.Context, rs []rules.Rule, atStart bool) {
	o.mu.Lock()
	before := maps.Clone(o.watches)
	o.mu.Unlock()
	o.outbox.Ensure(rules.Queues(rs))
	var added []*watch
	for _, p := range rules.Prefixes(rs) {
		if before[p] == nil {
			added = append(added, o.newWatch(p, atStart))
		}
	}
	var backlog []rules.Rule
	for _, r := range o.announcer.SetRules(rs) {
		if before[r.Prefix] != nil {
			backlog = append(backlog, r)
		}
	}
	o.mu.Lock()
	o.rules = rs
	for _, w := range added {
		o.watches[w.in.Prefix()] = w
	}
	o.started = true
	o.mu.Unlock()
	for _, w := range added {
		o.startWatch(ctx, w)
	}
	o.announcer.Backlog(backlog)
	var removed []string
	inForce := map[string]bool{}
	for _, p := range rules.Prefixes(rs) {
		inForce[p] = true
	}
	for p, w := range before {
		if !inForce[p] {
			o.stopWatch(w)
			removed = append(removed, p)
		}
	}
	// Outboxes of queues no rule names any more go once empty.
	o.outbox.Retain(rules.Queues(rs))
	if len(added) > 0 || len(removed) > 0 || len(backlog) > 0 {
		var prefixes []string
		for _, w := range added {
			prefixes = append(prefixes, w.in.Prefix())
		}
		slices.Sort(removed)
		o.log.Info("rules in force changed", "rules", len(rs), "prefixes_added", strings.Join(prefixes, ","),
			"prefixes_removed", strings.Join(removed, ","), "rules_on_watched_prefixes", len(backlog))
	}
}

// newWatch makes the informer of prefix, with its place in the cache and
// in the checkpoint. A start's informer replays the history since the
// checkpoint and announces deletes from the known-key record.
func (o *observer) newWatch(prefix string, atStart bool) *watch {
	o.cache.AddPrefix(prefix)
	ledger := checkpoint.NewLedger(o.cache, prefix)
	opts := informer.Options{Logger: o.log}
	if atStart {
		opts.Checkpoint, opts.Compacted = o.keeper.Checkpoint, o.announcer.Vanished
	}
	w := &watch{in: informer.New(o.mux, prefix, o.cache, ledger, o.announcer, opts), atStart: atStart}
	o.keeper.Add(w.in, ledger, atStart)
	return w
}

func (o *observer) startWatch(ctx context.Context, w *watch) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		_ = w.in.Run(ctx)
	}()
}

// stopWatch stops w's informer and forgets its prefix.
func (o *observer) stopWatch(w *watch) {
	p := w.in.Prefix()
	w.cancel()
	<-w.done
	o.keeper.Remove(p)
	o.mu.Lock()
	delete(o.watches, p)
	o.mu.Unlock()
	o.cache.RemovePrefix(p)
}

// stopAll waits for every informer to stop (run's context has ended).
func (o *observer) stopAll() {
	o.mu.Lock()
	ws := slices.Collect(maps.Values(o.watches))
	o.mu.Unlock()
	for _, w := range ws {
		w.cancel()
		<-w.done
	}
}
