package broker

// The outcomes of leases (Ack, AckNoWait for the work stream, Release of
// a stream's leases when it ends) and Forget, an operator's removal.

import (
	"context"
	"slices"
	"time"

	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// AckItem is one ack of a batch.
type AckItem struct {
	Key     string
	Token   uint64
	Outcome workqueue.Outcome
}

// Ack applies outcomes from holder (the caller's verified identity, or nil)
// and reports, per item, whether it was accepted: not when the token is not
// the key's live lease, nor when the lease is bound to another holder.
func (b *Broker) Ack(ctx context.Context, queue string, holder *string, acks []AckItem) ([]bool, error) {
	ok, durable, err := b.ack(queue, holder, acks, false)
	if err == nil {
		err = durable(ctx)
	}
	if err != nil {
		return nil, err
	}
	return ok, nil
}

// AckNoWait is Ack that returns once the outcomes are applied in memory
// and their records are in line, with durable to wait for those records.
// An error means nothing changed. A work stream answers an ack of success
// at once and waits for the others (docs/design.md allows it for success
// alone: losing one only offers the key once more); the records of a
// batch of successes alone go in line lazily (journal.AppendLazy), since
// no one waits for them unless durable is called.
func (b *Broker) AckNoWait(queue string, holder *string, acks []AckItem) (ok []bool, durable func(context.Context) error, err error) {
	lazy := !slices.ContainsFunc(acks, func(a AckItem) bool { return a.Outcome != (workqueue.Outcome{}) })
	return b.ack(queue, holder, acks, lazy)
}

// ack is Ack and AckNoWait: lazy puts the records in line with
// AppendLazy, and durable then first makes them urgent.
func (b *Broker) ack(queue string, holder *string, acks []AckItem, lazy bool) (ok []bool, durable func(context.Context) error, err error) {
	gen := b.gen.Load()
	qs, err := b.lockExisting(queue)
	if err != nil {
		return nil, nil, err
	}
	if qs == nil {
		// No queue holds these leases, in this member's memory: an answer
		// to be confirmed like any that wrote nothing (commit.go).
		return make([]bool, len(acks)), confirmation{b, gen}.Wait, nil
	}
	qs.use()
	before, existed := qs.begin()
	now := time.Now().UnixNano()
	ok = make([]bool, len(acks))
	started := make([]int64, 0, len(acks))
	for i, a := range acks {
		res, accepted := qs.q.Ack(a.Key, a.Token, holder, a.Outcome, now)
		ok[i] = accepted
		if accepted {
			started = append(started, res.LeaseStart)
		}
	}
	var obs *queueObservers
	if len(started) > 0 {
		obs = b.observers(qs)
	}
	appendTo := b.j.Append
	lazy = lazy && len(qs.buf) > 0 // nothing written, nothing to make urgent
	if lazy {
		appendTo = b.j.AppendLazy
	}
	batch, err := b.commitTo(qs, before, existed, appendTo)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range started {
		obs.workDur.Observe(float64(now-s) / 1e9)
	}
	return ok, func(ctx context.Context) error {
		if lazy {
			// Someone waits after all: an empty Append makes the records
			// in line urgent and returns what covers them.
			var err error
			if batch, err = b.j.Append(0, nil); err != nil {
				return err
			}
		}
		if err := batch.Wait(ctx); err != nil {
			return err
		}
		b.maybeCompact()
		return nil
	}, nil
}

// Release hands back the leases a work stream held when it ended, each as
// if it had lapsed now (workqueue's Release): pending again at once, so
// another worker gets the key without waiting out the lease. Leases that
// are no longer live, or bound to another holder, are left alone. It
// returns how many it released, once their records are durable.
func (b *Broker) Release(ctx context.Context, queue string, holder *string, leases []AckItem) (int, error) {
	gen := b.gen.Load()
	qs, err := b.lockExisting(queue)
	if err != nil {
		return 0, err
	}
	if qs == nil {
		return 0, confirmation{b, gen}.Wait(ctx)
	}
	qs.use()
	before, existed := qs.begin()
	now := time.Now().UnixNano()
	n := 0
	for _, l := range leases {
		if qs.q.Release(l.Key, l.Token, holder, now) {
			n++
		}
	}
	batch, err := b.commit(qs, before, existed)
	if err == nil {
		err = batch.Wait(ctx)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Forget removes keys and returns how many were present.
func (b *Broker) Forget(ctx context.Context, queue string, keys []string) (int, error) {
	gen := b.gen.Load()
	qs, err := b.lockExisting(queue)
	if err != nil {
		return 0, err
	}
	if qs == nil {
		return 0, confirmation{b, gen}.Wait(ctx)
	}
	qs.use()
	before, existed := qs.begin()
	n := 0
	for _, k := range keys {
		if qs.q.Forget(k) {
			n++
		}
	}
	batch, err := b.commit(qs, before, existed)
	if err == nil {
		err = batch.Wait(ctx)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}
