package broker

// Backup: every queue and key as they were at one moment, for
// `batonctl queue snapshot save`.

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/batonrun/baton/services/queue/internal/backup"
	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
)

// Backup writes every queue and key, each queue as it was at one moment,
// to w as a backup file (package backup), and returns what it holds.
//
// Each queue is copied whole under its own lock: its operations pause
// while it is (a copy of each key's record, which shares the key's
// strings: about half a microsecond a key on a small machine), the other
// queues' do not. Queues are independent (no operation spans two), so a
// queue at its moment is what a restore needs; the queues' moments follow
// one another. A queue made after the copy began is not in it. Then, as a
// read does (reads.go), the copy is answered only once everything it holds
// is committed and, on a replicated member, once a majority has confirmed
// that this member still leads, in the same leadership: the backup holds
// states the queues were in, never one they may lose. Leased keys are in
// it as the log keeps them, pending (a lease is not kept). The file's
// fence says what tokens the queue had issued, so that a queue restored
// from it issues none of them again.
func (b *Broker) Backup(ctx context.Context, w io.Writer) (backup.Info, error) {
	gen := b.gen.Load()
	b.mu.RLock()
	if !b.leading.Load() {
		b.mu.RUnlock()
		return backup.Info{}, ErrNotLeader
	}
	names := make([]string, 0, len(b.queues))
	for name := range b.queues {
		names = append(names, name)
	}
	b.mu.RUnlock()
	slices.Sort(names)
	// Records share their strings with the queue's items: the copy under
	// a queue's lock is a few words a key, and the encoding happens after.
	var recs []record.Record
	for _, name := range names {
		qs, err := b.lockExisting(name)
		if err != nil {
			return backup.Info{}, fmt.Errorf("backup: %w", err)
		}
		if qs == nil {
			continue // forgotten meanwhile
		}
		if qs.exists {
			recs = slices.Grow(recs, 1+qs.q.Len())
			recs = append(recs, record.Record{Kind: record.KindQueue, Queue: name})
			qs.q.Each(func(r *record.Record) bool { recs = append(recs, *r); return true })
		}
		b.unlock(qs, qs.q.PendingCount())
	}
	if err := b.settled(ctx, gen, true); err != nil {
		return backup.Info{}, fmt.Errorf("backup: %w", err)
	}
	// The fence, once the leadership is confirmed: no token of this queue
	// so far has a higher epoch (a replicated leader's is its term, the
	// highest any leader has had) or is above the last one made.
	bw := backup.NewWriter(w, format.Backup.Writes(b.j.Level()), b.tokens.fence())
	for i := range recs {
		if err := bw.Add(&recs[i]); err != nil {
			return backup.Info{}, fmt.Errorf("backup: %w", err)
		}
	}
	if err := bw.Close(); err != nil {
		return backup.Info{}, fmt.Errorf("backup: %w", err)
	}
	return bw.Info(), nil
}
