package service

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
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

	lastCheckpoint int64 // the last checkpoint written; only tick uses it
}

// CheckpointKey is where observers record the revision up to which every
// change has been accepted by the queue. It lies outside /registry/, and
// rules may not watch it.
const CheckpointKey = "/baton/observer/checkpoint"

// readyzKey is read (counted, it never exists) to learn whether etcd
// answers.
const readyzKey = "/baton/observer/readyz"

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
		o.informers = append(o.informers, informer.New(etcd, p, rs, o.cache, o.outbox, informer.Options{Logger: log, Checkpoint: o.readCheckpoint}))
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
			o.writeCheckpoint(ctx)
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

// readCheckpoint returns the recorded checkpoint (0 if none).
func (o *observer) readCheckpoint(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := o.etcd.Get(ctx, CheckpointKey)
	if err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	c, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil || c < 0 {
		o.log.Warn("ignoring a malformed checkpoint", "value", string(resp.Kvs[0].Value))
		return 0, nil
	}
	return c, nil
}

// checkpoint computes a revision up to which every change under every
// prefix has been accepted by the queue (0: not known yet).
//
// Every change up to M, the lowest observed revision of the prefixes, has
// been seen. M follows etcd's head through progress notifications, and the
// checkpoint writes move the head; so when no watched change happened after
// the last one seen (L ≤ M), L is used instead: it stands for the same
// changes and stays put while etcd is idle, so observers stop writing.
func (o *observer) checkpoint() int64 {
	// The informers first: a change is in the outbox before an informer's
	// observed revision covers it, so the outbox read next cannot miss it.
	var m, l int64 = -1, 0
	for _, in := range o.informers {
		s := in.SafeRevision()
		if s == 0 {
			return 0
		}
		if m < 0 || s < m {
			m = s
		}
		l = max(l, in.LastChange())
	}
	c := m
	if l <= m {
		c = l
	}
	if p := o.outbox.MinPendingRevision(); p > 0 {
		c = min(c, p-1)
	}
	return max(c, 0)
}

// writeCheckpoint records the checkpoint if it moved. The value only ever
// grows (a compare-and-swap on the zero-padded value), so two observers can
// share the key: whichever is further ahead has delivered up to its value.
func (o *observer) writeCheckpoint(ctx context.Context) {
	c := o.checkpoint()
	if c <= o.lastCheckpoint {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v := fmt.Sprintf("%020d", c)
	_, err := o.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(CheckpointKey), "<", v)).
		Then(clientv3.OpPut(CheckpointKey, v)).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(CheckpointKey), "=", 0)}, []clientv3.Op{clientv3.OpPut(CheckpointKey, v)}, nil)).
		Commit()
	if err != nil {
		o.log.Debug("write checkpoint", "error", err)
		return
	}
	o.lastCheckpoint = c
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
