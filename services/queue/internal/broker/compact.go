package broker

// Compaction: the snapshot walk that runs while the queues keep serving,
// when to compact, and housekeeping (compaction, forgetting empty queues)
// once a second.

import (
	"errors"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
)

// walk emits the stored state of every queue, one queue locked at a time,
// as records of version v (the snapshot's).
func (b *Broker) walk(v format.Version, emit func([]byte) error) error {
	b.mu.RLock()
	queues := make([]*queueState, 0, len(b.queues))
	for _, qs := range b.queues {
		queues = append(queues, qs)
	}
	b.mu.RUnlock()
	var buf []byte
	for _, qs := range queues {
		if err := b.walkQueue(qs, v, &buf, emit); err != nil {
			return err
		}
	}
	return nil
}

// walkQueue emits one queue's stored state in steps of a few thousand keys,
// holding its lock only for each step, so a snapshot of millions of keys
// never stalls the queue for long.
func (b *Broker) walkQueue(qs *queueState, v format.Version, buf *[]byte, emit func([]byte) error) error {
	step := b.walkStep
	if step <= 0 {
		step = 4096
	}
	qs.mu.Lock()
	exists := qs.exists
	qs.mu.Unlock()
	if !exists {
		return nil
	}
	*buf = record.Append((*buf)[:0], &record.Record{Kind: record.KindQueue, Queue: qs.q.Name()}, v)
	cursor, startGen := 0, uint64(0)
	for first := true; cursor >= 0; first = false {
		qs.mu.Lock()
		next, gen := qs.q.EachStep(cursor, step, func(r *record.Record) { *buf = record.Append(*buf, r, v) })
		if !first && gen != startGen {
			// Resized between steps: items moved, so start over.
			next, gen = qs.q.EachStep(0, step, func(r *record.Record) { *buf = record.Append(*buf, r, v) })
		}
		startGen = gen
		qs.mu.Unlock()
		cursor = next
		if err := emit(*buf); err != nil {
			return err
		}
		*buf = (*buf)[:0]
	}
	return nil
}

func (b *Broker) maybeCompact() {
	wal, snap := b.c.Sizes()
	grown := wal >= b.cfg.CompactBytes && wal >= 2*snap
	if !grown && !b.wantSnapshot.Load() || !b.compacting.CompareAndSwap(false, true) {
		return
	}
	b.wantSnapshot.Store(false)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.compacting.Store(false)
		start := time.Now()
		if err := b.c.Compact(b.walk); errors.Is(err, errStateReplaced) {
			b.log.Info("snapshot abandoned", "error", err)
			return
		} else if err != nil {
			b.log.Error("snapshot failed; the log keeps growing until one succeeds", "error", err)
			return
		}
		b.log.Info("snapshot written", "took", time.Since(start))
	}()
}

// housekeeping runs every second: it tries the disk while it is full, so
// readiness comes back with the space even when no change comes in to find
// out, and it forgets queues that have been empty for EmptyRetention.
func (b *Broker) housekeeping() {
	defer b.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-b.closed:
			return
		case <-t.C:
		}
		if b.j.NoSpace() && b.j.Err() == nil {
			b.j.ProbeSpace()
		}
		// Also here, not only after the calls that write: a replicated
		// queue's followers take no calls, and every member compacts its
		// own log.
		b.maybeCompact()
		b.dropEmpty(time.Now().UnixNano())
	}
}
