package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
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
// state machine (fsm, replica.StateMachine) of a node made from rcfg, and
// owns the node and rcfg.Log, which Close closes. If it fails, the caller
// closes rcfg.Log.
func OpenReplicated(cfg Config, rcfg replica.Config, metrics *Metrics, log *slog.Logger) (*Broker, error) {
	return openReplicated(cfg, rcfg, metrics, log, ackJournal)
}

// openReplicated is OpenReplicated with the journal callers are answered
// through made by wrap from the Raft log's: ackJournal in every build (the
// log itself, or, built with baton_unsafe_ack, one that answers before the
// commit), a test's own for the negative controls.
func openReplicated(cfg Config, rcfg replica.Config, metrics *Metrics, log *slog.Logger, wrap func(journal, *slog.Logger) journal) (*Broker, error) {
	b := newBroker(cfg, metrics, log)
	b.names = record.Names{}
	b.attached = make(chan struct{})
	n, err := replica.New(rcfg, fsm{b})
	if err != nil {
		return nil, fmt.Errorf("start the raft node: %w", err)
	}
	b.node = n
	b.j = wrap(raftJournal{n: n, log: rcfg.Log}, b.log)
	b.c = raftCompactor{b: b, n: n, log: rcfg.Log}
	close(b.attached)
	b.wg.Add(1)
	go b.housekeeping()
	return b, nil
}

// fsm is the broker as its node's replica.StateMachine. Its methods call
// the broker's unexported ones, which no caller of the broker may.
type fsm struct{ b *Broker }

func (f fsm) Apply(e replica.Entry)              { f.b.apply(e) }
func (f fsm) Restore(s replica.State) error      { return f.b.restore(s) }
func (f fsm) Lead(term uint64)                   { f.b.lead(term) }
func (f fsm) Follow(replay replica.Replay) error { return f.b.follow(replay) }

// SnapshotNeeded: housekeeping compacts within a second; the node asks
// again until it has a snapshot with every member.
func (f fsm) SnapshotNeeded() { f.b.wantSnapshot.Store(true) }

// apply is the node's Apply: a follower loads the committed records.
func (b *Broker) apply(e replica.Entry) {
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
	for _, data := range e.Records {
		for off := 0; off < len(data); {
			r, n, err := b.names.Decode(data[off:], e.Version)
			if err != nil {
				// The leader's own encoding in a checksummed log: if this
				// happens, every member skips the same bytes.
				b.log.Error("a committed entry holds a record that does not decode; its rest is skipped", "index", e.Index, "offset", off, "error", err)
				break
			}
			off += n
			// Under the queue's lock too: a snapshot walk and Stats hold
			// only that one.
			qs := b.queueLocked(r.Queue)
			qs.mu.Lock()
			b.load(qs, &r)
			qs.used = now
			qs.mu.Unlock()
		}
	}
}

// lead is the node's Lead (see above).
func (b *Broker) lead(term uint64) {
	<-b.attached // timers armed here write to the journal
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen.Add(1)
	// A new term starts its own tokens. Lead again in the same term (after
	// raft dropped proposals, replica's resync) goes on counting: a token
	// handed out before the resync must never be handed out again.
	if b.tokens.epoch.Load() != term {
		b.tokens.epoch.Store(term)
		b.tokens.seq.Store(0)
	}
	now := time.Now().UnixNano()
	keys := 0
	for _, qs := range b.queues {
		qs.mu.Lock()
		qs.used = now
		qs.q.Settle(now)
		keys += qs.q.Len()
		b.reschedule(qs)
		qs.mu.Unlock()
	}
	b.since.Store(now)
	b.leading.Store(true)
	b.log.Info("leading the queue", "term", term, "queues", len(b.queues), "keys", keys)
}

// follow is the node's Follow (see above).
func (b *Broker) follow(replay replica.Replay) error {
	b.discard()
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

// restore is the node's Restore: the state becomes a snapshot's, which is
// the records of a state walk (raftCompactor.Compact's), loaded as a
// follower loads an entry's.
func (b *Broker) restore(s replica.State) error {
	b.discard()
	b.apply(replica.Entry{Index: s.Index, Version: s.Version, Records: [][]byte{s.Records}})
	b.snapBytes.Store(int64(len(s.Records)))
	return nil
}

// discard throws the state away, as a member that follows from now on:
// waiting Leases are woken, all of them, to find ErrNotLeader; timers
// stop.
func (b *Broker) discard() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leading.Store(false)
	b.gen.Add(1)
	old := b.queues
	b.queues = map[string]*queueState{}
	b.existing.Store(0)
	for name, qs := range old {
		qs.mu.Lock()
		if qs.timer != nil {
			qs.timer.Stop()
		}
		qs.wake(len(qs.waitq)) // waiting Leases look again and find ErrNotLeader
		if qs.obs != nil {
			b.metrics.forget(name)
		}
		qs.mu.Unlock()
	}
}

// errStateReplaced ends a compaction whose walk may have seen a state
// that is not the log's: leadership began or ended, or a snapshot
// replaced the state, while it ran.
var errStateReplaced = errors.New("broker: the state was replaced during the walk; the next compaction tries again")

// raftCompactor compacts a replicated member's Raft log. Only the broker
// knows whether its memory is the log's, so the compactor is the broker's.
type raftCompactor struct {
	b   *Broker
	n   *replica.Node
	log *store.RaftLog
}

// Sizes is the Raft log's payload since its last snapshot began it, and
// that snapshot's size (the broker's: it knows what it gave the node).
func (c raftCompactor) Sizes() (int64, int64) { return c.log.Bytes(), c.b.snapBytes.Load() }

// Compact compacts a replicated member's Raft log (maybeCompact calls it
// once the log has grown enough): the state is walked as a
// single member's snapshot is, while it keeps changing, and handed to the
// node as the snapshot at the index applied before the walk began. The
// walk may see changes of later entries too; replaying those over it ends
// in the same state, since a record says what a key is (as the store's
// snapshots rely on). A follower's memory is the committed state, so that
// is all. A leader's runs ahead of the commit, so it waits, after the
// walk, until everything enqueued by then is committed: only then is
// every change the walk saw in the log, and the snapshot a state of the
// log's. If leadership changed meanwhile, or a snapshot replaced the
// state, the walk is thrown away.
func (c raftCompactor) Compact(walk func(v format.Version, emit func([]byte) error) error) error {
	b := c.b
	gen := b.gen.Load()
	leading := b.leading.Load()
	index := c.n.Status().Applied
	v := c.n.RecordVersion()
	var data []byte
	if err := walk(v, func(p []byte) error { data = append(data, p...); return nil }); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { // Close waits for this compaction: end its waits
		select {
		case <-b.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	if leading {
		w, err := b.j.Append(0, nil)
		if err == nil {
			err = w.Wait(ctx)
		}
		if err != nil {
			return fmt.Errorf("wait for the commit of what the walk saw: %w", err)
		}
	}
	if b.gen.Load() != gen {
		return errStateReplaced
	}
	err := c.n.Compact(ctx, index, v, data)
	if errors.Is(err, replica.ErrCompactRefused) {
		// A snapshot at or past index came meanwhile: nothing to do.
		b.log.Debug("compaction skipped", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	b.snapBytes.Store(int64(len(data)))
	return nil
}

// Leading reports whether this member answers calls now: a single member
// always, a replicated queue's member while it leads.
func (b *Broker) Leading() bool { return b.leading.Load() }

// Member is the replicated queue's node, or nil for a single member.
func (b *Broker) Member() *replica.Node { return b.node }
