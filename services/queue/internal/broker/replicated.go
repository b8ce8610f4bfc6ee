package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
)

// A member of a replicated queue runs the same broker on the Raft log
// (package replica) instead of its own store. Its leader works exactly as
// a single member does: an operation changes the queue's memory under the
// queue's lock, enqueues its records there in order, and waits outside the
// lock, now for a majority's disks rather than its own. Every other
// member follows: it loads each committed entry's records as recovery
// loads a store's (Restore), answers no call (ErrNotLeader), and so holds
// the committed state, leases excepted, as a restart would find it.
//
// Leadership moves between the two with the node's hooks, on its Ready
// loop, with b.mu held exclusively, so that an operation runs wholly in
// one leadership:
//
//   - Lead: every entry of earlier terms is applied. The follower's state
//     is settled as recovery settles it (delayed keys due become ready;
//     keys leased under the old leader were never recorded as leased and
//     are ready again, their work offered again), timers are armed, and
//     tokens take the term as their epoch, so that no token of an earlier
//     leader can match a lease of this one: an Ack or Extend with one is
//     LEASE_LOST.
//   - Follow: the leader's memory holds changes whose records may never
//     be committed (they were in flight when leadership ended; their
//     callers get ErrLeadershipLost, an unknown outcome). So it is thrown
//     away, waiting Leases are woken to answer ErrNotLeader, and the state
//     is rebuilt from the entries applied so far; later entries (its own
//     old ones among them, if the next leader commits them) are loaded as
//     a follower's.
//
// While leading, Apply is ignored: every entry committed in the term is
// one this member proposed, and its change is in memory already.

// OpenReplicated starts a member of a replicated queue: the broker is the
// state machine of a node made from rcfg (its Apply, Lead and Follow are
// the broker's), and owns the node and rcfg.Log, which Close closes. If it
// fails, the caller closes rcfg.Log.
func OpenReplicated(cfg Config, rcfg replica.Config, metrics *Metrics, log *slog.Logger) (*Broker, error) {
	b := newBroker(cfg, metrics, log)
	b.names = record.Names{}
	b.attached = make(chan struct{})
	rcfg.Apply, rcfg.Lead, rcfg.Follow = b.apply, b.lead, b.follow
	n, err := replica.New(rcfg)
	if err != nil {
		return nil, fmt.Errorf("start the raft node: %w", err)
	}
	b.node = n
	b.j = raftJournal{n: n, log: rcfg.Log}
	if wrapJournal != nil {
		b.j = wrapJournal(b.j)
	}
	b.tokens.j = b.j
	close(b.attached)
	b.wg.Add(1)
	go b.housekeeping()
	return b, nil
}

// apply is the node's Apply: a follower loads the committed records.
func (b *Broker) apply(recs [][]byte, index uint64) {
	if b.leading.Load() {
		return // its own, in memory since it made them
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// A queue a change touched is kept EmptyRetention from now, as on the
	// leader. (Reads and Leases, which the leader counts too, never reach
	// a follower: it may forget an empty queue the leader still keeps.
	// Only the queue's counters differ; an Add makes it again.)
	now := time.Now().UnixNano()
	for _, data := range recs {
		for off := 0; off < len(data); {
			r, n, err := b.names.Decode(data[off:])
			if err != nil {
				// The leader's own encoding in a checksummed log: if this
				// happens, every member skips the same bytes.
				b.log.Error("a committed entry holds a record that does not decode; its rest is skipped", "index", index, "offset", off, "error", err)
				break
			}
			off += n
			// Under the shard's lock too: a snapshot walk and Stats hold
			// only that one.
			sh := b.shardLocked(r.Queue)
			sh.mu.Lock()
			b.load(sh, &r)
			sh.used = now
			sh.mu.Unlock()
		}
	}
}

// lead is the node's Lead (see above).
func (b *Broker) lead(term uint64) {
	<-b.attached // timers armed here write to the journal
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens.epoch.Store(term)
	b.tokens.seq.Store(0)
	now := time.Now().UnixNano()
	keys := 0
	for _, sh := range b.queues {
		sh.mu.Lock()
		sh.used = now
		sh.q.Settle(now)
		keys += sh.q.Len()
		b.reschedule(sh)
		sh.mu.Unlock()
	}
	b.leading.Store(true)
	b.log.Info("leading the queue", "term", term, "queues", len(b.queues), "keys", keys)
}

// follow is the node's Follow (see above).
func (b *Broker) follow(replay func(apply func(records [][]byte, index uint64)) error) error {
	b.mu.Lock()
	b.leading.Store(false)
	old := b.queues
	b.queues = map[string]*shard{}
	b.existing.Store(0)
	for name, sh := range old {
		sh.mu.Lock()
		if sh.timer != nil {
			sh.timer.Stop()
		}
		close(sh.ready) // waiting Leases look again and find ErrNotLeader
		sh.ready = make(chan struct{})
		if sh.obs != nil {
			b.metrics.forget(name)
		}
		sh.mu.Unlock()
	}
	b.mu.Unlock()
	start := time.Now()
	if err := replay(b.apply); err != nil {
		return err
	}
	b.mu.RLock()
	queues := len(b.queues)
	b.mu.RUnlock()
	b.log.Warn("no longer leading the queue: its state is rebuilt from the committed log", "queues", queues, "took", time.Since(start))
	return nil
}

// Leading reports whether this member answers calls now: a single member
// always, a replicated queue's member while it leads.
func (b *Broker) Leading() bool { return b.leading.Load() }

// Member is the replicated queue's node, or nil for a single member.
func (b *Broker) Member() *replica.Node { return b.node }

// wrapJournal, set by a test alone, wraps a replicated member's journal:
// the negative control answers before the commit through it.
var wrapJournal func(journal) journal

// confirm is, on a replicated queue's leader, the majority's word that it
// still leads, before it answers a Lease or an Extend from memory: such a
// call writes nothing, so no commit would tell a leader cut off from the
// others that a new leader has offered those keys again. A single member
// needs none. Leases granted but not confirmed stay in memory until they
// expire, or until Follow throws them away: leased to nobody, like a
// worker's that crashed.
func (b *Broker) confirm(ctx context.Context) error {
	if b.node == nil {
		return nil
	}
	err := b.node.Confirm(ctx)
	if errors.Is(err, replica.ErrNotLeader) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}
