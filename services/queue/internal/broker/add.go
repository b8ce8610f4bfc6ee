package broker

// Add: the one operation that makes a queue, and the announcement of keys
// (collapsing, as client-go's workqueue does).

import (
	"context"
	"fmt"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// AddOptions are an Add's, as the API's AddRequest carries them (the
// server checks them first).
type AddOptions struct {
	// Delay makes the keys ready no sooner than now+Delay.
	Delay time.Duration
	// Priority is the keys' priority; zero means workqueue.Normal.
	Priority workqueue.Priority
	// Revision, if > 0, is the etcd revision the keys stand for changes
	// up to: the queue's revision (Revision) becomes at least this before
	// any of the keys can be leased, so every lease of them carries it.
	Revision int64
}

// Add announces keys to queue. It returns how many were queued and
// collapsed, once every change is durable.
func (b *Broker) Add(ctx context.Context, queue string, keys []string, o AddOptions) (queued, collapsed int, err error) {
	if o.Priority == 0 {
		o.Priority = workqueue.Normal
	}
	qs, err := b.lock(queue)
	if err != nil {
		return 0, 0, err
	}
	qs.use()
	before, existed := qs.begin()
	now := time.Now().UnixNano()
	if !qs.exists {
		if !b.reserveQueue() {
			gen := b.gen.Load()
			b.abort(qs, before)
			b.dropIfUnused(queue, qs)
			// A refusal from memory, confirmed as any answer that wrote
			// nothing (commit.go).
			if err := (confirmation{b, gen}).Wait(ctx); err != nil {
				return 0, 0, err
			}
			return 0, 0, fmt.Errorf("%w: %d queues exist, the most allowed", ErrTooManyQueues, b.cfg.MaxQueues)
		}
		qs.exists = true
		qs.sink(&record.Record{Kind: record.KindQueue, Queue: queue})
	}
	if o.Revision > qs.rev.Load() {
		// Kept even if the Add is refused: a revision higher than needed
		// only makes a worker's read wait for a cache that is that recent.
		qs.rev.Store(o.Revision)
	}
	for _, k := range keys {
		if qs.q.Add(k, workqueue.AddOptions{Delay: o.Delay, Priority: o.Priority}, now) {
			queued++
		}
	}
	batch, err := b.commit(qs, before, existed)
	if err != nil && !existed {
		b.existing.Add(-1) // the new queue was rolled back
		b.dropIfUnused(queue, qs)
	}
	if err == nil {
		err = batch.Wait(ctx)
	}
	if err != nil {
		return 0, 0, err
	}
	b.maybeCompact()
	return queued, len(keys) - queued, nil
}
