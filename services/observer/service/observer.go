package service

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/observer/internal/announcer"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/declarations"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/outbox"
	"github.com/batonrun/baton/services/observer/internal/rules"
	"github.com/batonrun/baton/services/observer/internal/watchmux"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// observer ties the parts together: one informer per prefix (etcd into
// the cache), the announcer (changes into queue keys), one outbox per
// queue, and the checkpoint keeper (the delivery guarantee across
// restarts). The prefixes are those of the rules in force: the configured
// ones and the controllers' declarations, which one more informer watches
// under kinds.DeclarationPrefix (watches.go).
type observer struct {
	etcd       *clientv3.Client
	mux        *watchmux.Mux // every informer's watch, on one etcd stream
	cache      *cache.Cache
	announcer  *announcer.Announcer
	outbox     *outbox.Set
	keeper     *checkpoint.Keeper
	decls      *declarations.Set
	declWatch  *informer.Informer // the declarations' informer
	declC      chan struct{}      // a declaration changed
	declHanded atomic.Int64       // the newest revision of a declaration's change handed on
	metrics    *metrics
	log        *slog.Logger

	mu       sync.Mutex
	rules    []rules.Rule // in force
	statuses []declarations.Status
	watches  map[string]*watch // prefix → its informer
	started  bool              // the start's prefixes have been set up
	declRev  int64             // the rules reflect the declarations up to it (declarationsRevision)
}

// CheckpointKey is where observers record the revision up to which every
// change has been accepted by the queue. It lies outside /registry/, and
// rules may not watch it.
const CheckpointKey = checkpoint.Key

// RecordKey holds the manifest of the known-key record stored beside the
// checkpoint (package checkpoint; docs/observer.md).
const RecordKey = checkpoint.RecordKey

// readyzKey is read (counted, it never exists) to learn whether etcd
// answers.
const readyzKey = "/baton/observer/readyz"

func newObserver(etcd *clientv3.Client, add outbox.Adder, rs []rules.Rule, recordInterval time.Duration, log *slog.Logger) *observer {
	// The configured prefixes are in the cache from the start, so that a
	// read waits for their first list instead of being refused.
	o := &observer{etcd: etcd, mux: watchmux.New(etcd, watchmux.Options{Logger: log}), rules: rs, cache: cache.New(append(rules.Prefixes(rs), kinds.DeclarationPrefix)),
		decls: declarations.New(rs, reservedPrefixes, log), declC: make(chan struct{}, 1), watches: map[string]*watch{}, log: log}
	o.metrics = newMetrics(o)
	o.outbox = outbox.NewSet(rules.Queues(rs), add, outbox.Options{
		Source:  "baton-observer",
		Latency: func(q string, d time.Duration) { o.metrics.latency.WithLabelValues(q).Observe(d.Seconds()) },
		Logger:  log,
	})
	o.keeper = checkpoint.NewKeeper(checkpoint.NewEtcd(etcd), o.outbox, recordInterval, log)
	o.announcer = announcer.New(nil, o.cache, o.outbox, o.keeper, log)
	o.declWatch = informer.New(o.mux, kinds.DeclarationPrefix, o.cache, nil, declChanged{c: o.declC, rev: &o.declHanded}, informer.Options{Logger: log})
	return o
}

// informers returns the declarations' informer and every prefix's, by
// prefix.
func (o *observer) informers() []*informer.Informer {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := []*informer.Informer{o.declWatch}
	for _, p := range slices.Sorted(maps.Keys(o.watches)) {
		out = append(out, o.watches[p].in)
	}
	return out
}

// Nudge asks etcd for a progress notification of every watch (one
// request: they share a stream).
func (o *observer) Nudge() { o.mux.RequestProgress() }

// ReadWaited observes a cache read's wait for its min_revision.
func (o *observer) ReadWaited(d time.Duration) { o.metrics.wait.Observe(d.Seconds()) }

// tick asks for progress notifications, writes the checkpoint and
// resyncs, until ctx ends.
func (o *observer) tick(ctx context.Context, progress, resync time.Duration) {
	pt := time.NewTicker(progress)
	defer pt.Stop()
	var resyncC <-chan time.Time
	if resync > 0 {
		rt := time.NewTicker(resync)
		defer rt.Stop()
		resyncC = rt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-pt.C:
			o.Nudge()
			o.keeper.Write(ctx)
		case <-resyncC:
			o.log.Info("resync: announcing every object at low priority", "objects", o.cache.Len())
			for _, in := range o.informers()[1:] {
				if in.Listed() {
					o.announcer.Resync(in.Prefix())
				}
			}
		}
	}
}

// ready: etcd answers, the declarations have been listed, and every
// prefix in force at start has been listed once (prefixes declared later
// do not make a serving observer unready; reads of them wait for their
// list through min_revision).
func (o *observer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := o.etcd.Get(ctx, readyzKey, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.started {
		return fmt.Errorf("initial list not done for %v", []string{kinds.DeclarationPrefix})
	}
	var waiting []string
	for _, p := range slices.Sorted(maps.Keys(o.watches)) {
		if w := o.watches[p]; w.atStart && !w.in.Listed() {
			waiting = append(waiting, p)
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("initial list not done for %v", waiting)
	}
	return nil
}

// Status describes the watches, outboxes, rules and declarations; with a
// queue, only that queue's rules (and the declarations' revision).
func (o *observer) Status(queue string) *observerv1.StatusResponse {
	resp := &observerv1.StatusResponse{DeclarationsRevision: o.declarationsRevision()}
	if queue != "" {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, r := range o.rules {
			if r.Queue == queue {
				resp.Rules = append(resp.Rules, ruleStatus(r))
			}
		}
		return resp
	}
	for _, in := range o.informers() {
		s := in.Stats()
		resp.Prefixes = append(resp.Prefixes, &observerv1.PrefixStatus{
			Prefix: s.Prefix, ObservedRevision: s.ObservedRevision, HeadRevision: s.HeadRevision,
			EventsTotal: s.Events, RelistsTotal: s.Relists, WatchRestartsTotal: s.WatchRestarts,
			Listed: s.Listed,
		})
	}
	for _, q := range o.outbox.Queues() {
		b := o.outbox.Box(q)
		n := uint64(b.Len())
		resp.OutboxSize += n
		resp.Outboxes = append(resp.Outboxes, &observerv1.OutboxStatus{Queue: q, Size: n, LastError: b.LastError()})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.rules {
		resp.Rules = append(resp.Rules, ruleStatus(r))
	}
	for _, d := range o.statuses {
		resp.Declarations = append(resp.Declarations, &observerv1.DeclarationStatus{Key: d.Key, ModRevision: d.ModRevision,
			Queue: d.Queue, InForceRevision: d.InForceRevision, Refused: d.Refused})
	}
	return resp
}

func ruleStatus(r rules.Rule) *observerv1.Rule {
	return &observerv1.Rule{Queue: r.Queue, Prefix: r.Prefix, OwnerKind: r.OwnerKind, Source: ruleSource(r),
		DeclarationKey: r.Declaration, IgnoreOwnStatus: r.IgnoreOwnStatus, Kind: r.Kind, ResourceKeys: r.ResourceKeys}
}

func ruleSource(r rules.Rule) observerv1.RuleSource {
	switch {
	case r.Source == rules.SourceBuiltin:
		return observerv1.RuleSource_RULE_SOURCE_BUILTIN
	case r.Source == rules.SourceDeclaration:
		return observerv1.RuleSource_RULE_SOURCE_DECLARATION
	case r.Line > 0:
		return observerv1.RuleSource_RULE_SOURCE_FILE
	default:
		return observerv1.RuleSource_RULE_SOURCE_CONFIG
	}
}

// declarationCounts returns the declarations in force and refused, and
// the refused by reason.
func (o *observer) declarationCounts() (inForce, refused int, byReason map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	byReason = map[string]int{}
	for _, d := range o.statuses {
		if d.InForceRevision > 0 {
			inForce++
		}
		if d.Refused != "" {
			refused++
			byReason[d.Reason]++
		}
	}
	return inForce, refused, byReason
}
