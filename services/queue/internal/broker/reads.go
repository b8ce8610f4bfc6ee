package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// Reads: Inspect, List and Stats. A single member answers from memory,
// once what it saw is durable (its memory runs ahead of the fsync by a
// group commit, and a crash in between would lose a change the read
// showed). A member of a replicated queue answers
// linearizably by default, as etcd's reads are: what a read returns is a
// state the queue was in at some moment between its call and its answer.
// Memory alone is not enough for that, for two reasons:
//
//   - A leader cut off from the others believes it leads until CheckQuorum
//     deposes it (an election timeout), while the majority may already
//     have elected another leader that acknowledged changes it has not
//     seen. So the read is answered only once a majority has confirmed,
//     after the read, that this member still leads (replica.Confirm, one
//     ReadIndex for every caller waiting at once), in the same leadership
//     the read ran in (gen unchanged).
//   - A leader's memory runs ahead of the commit: an operation changes it
//     under the queue's lock and then waits for the majority. A read that
//     saw such a change, answered before the change is committed, could
//     show a key that the next leader never holds. So the read also waits
//     until everything enqueued when it ran is committed (the journal's
//     latest proposal: entries commit in order).
//
// A read that cannot be confirmed changed nothing, and answers ErrNotLeader
// (UNAVAILABLE, NOT_LEADER: retry on any member). A follower answers
// ErrNotLeader too; the gRPC layer hands the call to the leader first.
//
// ReadOptions.Serializable is the cheaper read etcd also offers: this
// member's own state, without a majority's word. A follower's memory is
// the committed state as far as it has applied it; a leader's may hold
// changes still in flight, so it waits for their commit, and never answers
// with a change the queue may lose. It may be stale (a follower behind, or
// a leader that was deposed without knowing it).
//
// Leases are answered from memory too, and confirmed the same way
// (confirm): a key granted must not be one whose Add the next leader never
// holds, nor one another leader has already offered again.

// ReadOptions says how a read is answered on a member of a replicated
// queue; a single member answers the same either way.
type ReadOptions struct {
	// Serializable answers from this member's own committed state, on
	// any member, without confirming that it leads: possibly stale.
	Serializable bool
}

// read runs fn on the state and returns once its answer may be given
// (see above): at once on a single member.
func (b *Broker) read(ctx context.Context, opts ReadOptions, fn func() error) error {
	gen := b.gen.Load()
	leading := b.leading.Load()
	if !leading && !opts.Serializable {
		return ErrNotLeader
	}
	if err := fn(); err != nil {
		return err
	}
	if b.gen.Load() != gen {
		return fmt.Errorf("%w: leadership changed during the call", ErrNotLeader)
	}
	if !leading {
		// A follower's memory is what it has applied, all committed
		// (lockRead reads a queue under the locks Apply takes).
		return nil
	}
	return b.settled(ctx, gen, !opts.Serializable)
}

// settled returns nil once what an operation saw in memory, in the
// leadership gen, may be answered: every record enqueued by then is
// committed (durable, on a single member) and, if confirm, a majority has
// since confirmed that this member leads, in that leadership. The
// confirmation is asked first: the commit proceeds meanwhile, so the two
// cost the longer of them, not their sum.
//
// The operations that call it changed nothing stored (reads, Lease,
// Extend), so every refusal is ErrNotLeader, whatever the node said:
// retrying on any member is safe. Leases granted but not settled stay in
// memory until they expire or Follow throws them away: leased to nobody,
// like a crashed worker's.
func (b *Broker) settled(ctx context.Context, gen uint64, confirm bool) error {
	w, err := b.j.Append(0, nil) // the latest record in flight, covering every earlier one
	if err == nil && confirm {
		err = b.j.Confirm(ctx)
	}
	if err == nil {
		err = w.Wait(ctx)
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNotLeader):
		return err
	case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrLeadershipLost), errors.Is(err, replica.ErrStopped):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	default:
		return err
	}
	if b.gen.Load() != gen {
		// Leadership ended, and perhaps began again, since the operation:
		// what it saw belongs to a leadership that is over.
		return fmt.Errorf("%w: leadership changed during the call", ErrNotLeader)
	}
	return nil
}

// lockRead locks queue for a read: on a member that answers calls,
// as any operation does (lockExisting, which applies due deadlines); on a
// follower asked for a serializable read, with no deadline applied, since
// only the leader writes. nil when there is no such queue.
func (b *Broker) lockRead(queue string) (qs *queueState, unlock func(), err error) {
	if !b.leading.Load() {
		b.mu.RLock()
		qs = b.queues[queue]
		if qs == nil {
			b.mu.RUnlock()
			return nil, nil, nil
		}
		qs.mu.Lock()
		return qs, func() { qs.mu.Unlock(); b.mu.RUnlock() }, nil
	}
	qs, err = b.lockExisting(queue)
	if qs == nil || err != nil {
		return nil, nil, err
	}
	pending := qs.q.PendingCount()
	return qs, func() { b.unlock(qs, pending) }, nil
}

// Inspect returns one key's state.
func (b *Broker) Inspect(ctx context.Context, queue, key string, opts ReadOptions) (workqueue.View, error) {
	v := workqueue.View{Key: key, State: workqueue.Absent}
	err := b.read(ctx, opts, func() error {
		qs, unlock, err := b.lockRead(queue)
		if qs == nil || err != nil {
			return err
		}
		defer unlock()
		v = qs.q.Inspect(key)
		return nil
	})
	if err != nil {
		return workqueue.View{}, err
	}
	return v, nil
}

// List returns a page of items in key order after `after`.
func (b *Broker) List(ctx context.Context, queue string, state workqueue.State, after string, limit int, opts ReadOptions) ([]workqueue.View, bool, error) {
	var (
		views []workqueue.View
		more  bool
	)
	err := b.read(ctx, opts, func() error {
		qs, unlock, err := b.lockRead(queue)
		if qs == nil || err != nil {
			return err
		}
		defer unlock()
		views, more = qs.q.List(state, after, limit)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return views, more, nil
}

// QueueStats is one queue's stats.
type QueueStats struct {
	Name string
	workqueue.Stats
	// Since is when the counters began (Unix ns): they are this member's
	// memory, and start at 0 when it opens or begins to lead.
	Since int64
	// Workers are those seen in the last SeenFor or holding a lease, by
	// name.
	Workers []WorkerStats
}

// WorkerStats is one worker as a queue sees it.
type WorkerStats struct {
	Name      string
	Leased    int
	LastLease int64 // Unix ns; 0 if not seen within SeenFor
}

// workers lists the queue's workers at now, forgetting those not seen for
// SeenFor. qs.mu is held.
func (qs *queueState) workers(now int64, leasedBy map[string]int) []WorkerStats {
	for w, t := range qs.seen {
		if now-t > int64(SeenFor) {
			delete(qs.seen, w)
		}
	}
	var out []WorkerStats
	for w, t := range qs.seen {
		out = append(out, WorkerStats{Name: w, Leased: leasedBy[w], LastLease: t})
	}
	for w, n := range leasedBy {
		if _, ok := qs.seen[w]; !ok && w != "" {
			out = append(out, WorkerStats{Name: w, Leased: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stats returns the stats of queue, or of every queue if it is empty.
func (b *Broker) Stats(ctx context.Context, queue string, opts ReadOptions) ([]QueueStats, error) {
	var out []QueueStats
	err := b.read(ctx, opts, func() error {
		var err error
		out, err = b.stats(queue)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stats is Stats from memory, as it is now.
func (b *Broker) stats(queue string) ([]QueueStats, error) {
	b.mu.RLock()
	var names []string
	for n := range b.queues {
		if queue == "" || n == queue {
			names = append(names, n)
		}
	}
	b.mu.RUnlock()
	sort.Strings(names)
	var out []QueueStats
	for _, n := range names {
		qs, unlock, err := b.lockRead(n)
		if err != nil {
			return nil, err
		}
		if qs == nil {
			continue // dropped meanwhile
		}
		if qs.exists {
			now := time.Now().UnixNano()
			st := qs.q.Stats(now)
			out = append(out, QueueStats{Name: n, Stats: st, Since: b.since.Load(), Workers: qs.workers(now, st.LeasedBy)})
		}
		unlock()
	}
	if queue != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	return out, nil
}
