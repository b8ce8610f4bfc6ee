package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/outbox"
	"github.com/batonrun/baton/services/observer/internal/rules"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// observer ties the parts together: one informer per prefix, one cache, one
// outbox per queue.
type observer struct {
	etcd      *clientv3.Client
	rules     []rules.Rule
	cache     *cache.Cache
	outbox    *outbox.Set
	informers []*informer.Informer
	metrics   *metrics
	log       *slog.Logger
}

func newObserver(etcd *clientv3.Client, add outbox.Adder, rs []rules.Rule, log *slog.Logger) *observer {
	prefixes := rules.Prefixes(rs)
	o := &observer{etcd: etcd, rules: rs, cache: cache.New(prefixes), log: log}
	o.metrics = newMetrics(o)
	o.outbox = outbox.NewSet(rules.Queues(rs), add, outbox.Options{
		Source:  "baton-observer",
		Latency: func(q string, d time.Duration) { o.metrics.latency.WithLabelValues(q).Observe(d.Seconds()) },
		Logger:  log,
	})
	for _, p := range prefixes {
		o.informers = append(o.informers, informer.New(etcd, p, rs, o.cache, o.outbox, informer.Options{Logger: log}))
	}
	return o
}

// Nudge asks every watch for a progress notification.
func (o *observer) Nudge() {
	for _, in := range o.informers {
		in.RequestProgress()
	}
}

// tick asks for progress notifications and resyncs, until ctx ends.
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
		case <-resyncC:
			o.log.Info("resync: announcing every object at low priority", "objects", o.cache.Len())
			for _, in := range o.informers {
				if in.Listed() {
					in.Resync()
				}
			}
		}
	}
}

// ready: etcd answers and every prefix has been listed once.
func (o *observer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := o.etcd.Get(ctx, "/baton/observer/readyz", clientv3.WithCountOnly()); err != nil {
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
