package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/observer/internal/announcer"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/outbox"
	"github.com/batonrun/baton/services/observer/internal/rules"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// observer ties the parts together: one informer per prefix (etcd into
// the cache), the announcer (changes into queue keys), one outbox per
// queue, and the checkpoint keeper (the delivery guarantee across
// restarts).
type observer struct {
	etcd      *clientv3.Client
	rules     []rules.Rule
	cache     *cache.Cache
	announcer *announcer.Announcer
	outbox    *outbox.Set
	keeper    *checkpoint.Keeper
	informers []*informer.Informer
	metrics   *metrics
	log       *slog.Logger
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
	prefixes := rules.Prefixes(rs)
	o := &observer{etcd: etcd, rules: rs, cache: cache.New(prefixes), log: log}
	o.metrics = newMetrics(o)
	o.outbox = outbox.NewSet(rules.Queues(rs), add, outbox.Options{
		Source:  "baton-observer",
		Latency: func(q string, d time.Duration) { o.metrics.latency.WithLabelValues(q).Observe(d.Seconds()) },
		Logger:  log,
	})
	o.keeper = checkpoint.NewKeeper(checkpoint.NewStore(etcd), o.outbox, recordInterval, log)
	o.announcer = announcer.New(rs, o.cache, o.outbox, o.keeper, log)
	for _, p := range prefixes {
		ledger := checkpoint.NewLedger(o.cache, p)
		in := informer.New(etcd, p, o.cache, ledger, o.announcer, informer.Options{
			Logger: log, Checkpoint: o.keeper.Checkpoint, Compacted: o.announcer.Vanished})
		o.keeper.Add(in, ledger)
		o.informers = append(o.informers, in)
	}
	return o
}

// Nudge asks every watch for a progress notification.
func (o *observer) Nudge() {
	for _, in := range o.informers {
		in.RequestProgress()
	}
}

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
			for _, in := range o.informers {
				if in.Listed() {
					o.announcer.Resync(in.Prefix())
				}
			}
		}
	}
}

// ready: etcd answers and every prefix has been listed once.
func (o *observer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := o.etcd.Get(ctx, readyzKey, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	var waiting []string
	for _, in := range o.informers {
		if !in.Listed() {
			waiting = append(waiting, in.Prefix())
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("initial list not done for %v", waiting)
	}
	return nil
}

// Status describes the watches, outboxes and rules.
func (o *observer) Status() *observerv1.StatusResponse {
	resp := &observerv1.StatusResponse{}
	for _, in := range o.informers {
		s := in.Stats()
		resp.Prefixes = append(resp.Prefixes, &observerv1.PrefixStatus{
			Prefix: s.Prefix, ObservedRevision: s.ObservedRevision, HeadRevision: s.HeadRevision,
			EventsTotal: s.Events, RelistsTotal: s.Relists, WatchRestartsTotal: s.WatchRestarts,
		})
	}
	for _, q := range o.outbox.Queues() {
		b := o.outbox.Box(q)
		n := uint64(b.Len())
		resp.OutboxSize += n
		resp.Outboxes = append(resp.Outboxes, &observerv1.OutboxStatus{Queue: q, Size: n, LastError: b.LastError()})
	}
	for _, r := range o.rules {
		resp.Rules = append(resp.Rules, &observerv1.Rule{Queue: r.Queue, Prefix: r.Prefix, OwnerKind: r.OwnerKind})
	}
	return resp
}
