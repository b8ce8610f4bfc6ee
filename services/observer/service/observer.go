package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
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

	// The checkpoint and the known-key record; only tick uses these.
	store          *checkpoint.Store
	recordInterval time.Duration // the least time between two records
	lastCheckpoint int64         // the last checkpoint written
	nextRecord     time.Time     // no record is written before it

	recordWrites, recordBytes atomic.Uint64 // for metrics
}

// CheckpointKey is where observers record the revision up to which every
// change has been accepted by the queue. It lies outside /registry/, and
// rules may not watch it.
const CheckpointKey = checkpoint.Key

// RecordKey holds the manifest of the known-key record stored beside the
// checkpoint (package checkpoint; docs/observer.md).
const RecordKey = checkpoint.RecordKey

// recordBytesPerSecond bounds what records cost etcd on a busy cluster: a
// record of n bytes waits n/recordBytesPerSecond seconds (at least the
// record interval) before the next. 40,000 pods make a record of about
// 175 KB, written at most every 5 s (the default interval); a million, of
// about 4.5 MB, every 70 s. Meanwhile the checkpoint still advances up to
// the first key the stored record lacks.
const recordBytesPerSecond = 64 << 10

// readyzKey is read (counted, it never exists) to learn whether etcd
// answers.
const readyzKey = "/baton/observer/readyz"

func newObserver(etcd *clientv3.Client, add outbox.Adder, rs []rules.Rule, recordInterval time.Duration, log *slog.Logger) *observer {
	prefixes := rules.Prefixes(rs)
	o := &observer{etcd: etcd, rules: rs, cache: cache.New(prefixes), log: log,
		store: checkpoint.NewStore(etcd), recordInterval: recordInterval}
	o.metrics = newMetrics(o)
	o.outbox = outbox.NewSet(rules.Queues(rs), add, outbox.Options{
		Source:  "baton-observer",
		Latency: func(q string, d time.Duration) { o.metrics.latency.WithLabelValues(q).Observe(d.Seconds()) },
		Logger:  log,
	})
	for _, p := range prefixes {
		o.informers = append(o.informers, informer.New(etcd, p, rs, o.cache, o.outbox, informer.Options{Logger: log, Checkpoint: o.readCheckpoint, Known: o.readRecord}))
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
	c, err := o.store.Checkpoint(ctx)
	if errors.Is(err, checkpoint.ErrMalformed) {
		o.log.Warn("ignoring a malformed checkpoint", "error", err)
		return 0, nil
	}
	return c, err
}

// readRecord returns the known-key record of prefix (nil if none).
func (o *observer) readRecord(ctx context.Context, prefix string) (*checkpoint.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return o.store.Read(ctx, prefix)
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

// writeCheckpoint records the checkpoint if it moved, with a known-key
// record valid at it. The value only ever grows (a compare-and-swap on the
// zero-padded value), so two observers can share the key: whichever is
// further ahead has delivered up to its value, and its record is valid at
// it.
//
// The record is rewritten only when the stored one lacks a key that may
// have existed at the new checkpoint (or is another observer's), and at
// most every recordInterval (longer for a large record). Until then the
// checkpoint advances only to just below the first such key: replaying
// from an older checkpoint only announces again what the queue collapses.
func (o *observer) writeCheckpoint(ctx context.Context) {
	c := o.checkpoint()
	if c <= o.lastCheckpoint {
		return
	}
	var floor, unrecorded int64
	for _, in := range o.informers {
		floor = max(floor, in.Floor())
		if u := in.Unrecorded(); u > 0 && (unrecorded == 0 || u < unrecorded) {
			unrecorded = u
		}
	}
	if c < floor {
		return // a record is valid only from the last list on
	}
	rewrite := !o.store.Owns() || (unrecorded > 0 && unrecorded <= c)
	if rewrite && time.Now().Before(o.nextRecord) {
		if !o.store.Owns() || unrecorded-1 <= o.lastCheckpoint || unrecorded-1 < floor {
			return
		}
		c, rewrite = unrecorded-1, false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		outcome checkpoint.Outcome
		err     error
	)
	if rewrite {
		var n int
		outcome, n, err = o.store.Write(ctx, c, o.knownKeys)
		if n > 0 {
			o.recordWrites.Add(1)
			o.recordBytes.Add(uint64(n))
			wait := time.Duration(float64(n) / recordBytesPerSecond * float64(time.Second))
			o.nextRecord = time.Now().Add(max(o.recordInterval, wait))
		}
		if err == nil && outcome == checkpoint.Written {
			o.log.Debug("wrote checkpoint and known-key record", "checkpoint", c, "bytes", n)
		}
	} else {
		outcome, err = o.store.Advance(ctx, c)
	}
	if err != nil {
		o.log.Debug("write checkpoint", "error", err) // etcd's loss is logged by the monitor
		return
	}
	switch outcome {
	case checkpoint.Written:
		o.lastCheckpoint = c
		for _, in := range o.informers {
			in.Recorded(c, rewrite)
		}
	case checkpoint.Behind:
		o.lastCheckpoint = c // another observer is further on
	case checkpoint.NotMine:
		// Another observer wrote the record: the next tick writes ours.
	}
}

// knownKeys returns every prefix's keys for a record.
func (o *observer) knownKeys() []checkpoint.Set {
	sets := make([]checkpoint.Set, 0, len(o.informers))
	for _, in := range o.informers {
		sets = append(sets, checkpoint.Set{Prefix: in.Prefix(), Keys: in.KnownKeys()})
	}
	return sets
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
