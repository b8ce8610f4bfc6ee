package broker

// The registry: a queue exists from its first Add until it has
// held nothing for EmptyRetention with no worker waiting. Every operation
// finds its queue here, under b.mu held shared, and locks it; only making
// a queue or forgetting one takes b.mu exclusively.

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// A queueState is one queue, as the broker keeps it. It exists from its
// first Add until it has held nothing for EmptyRetention with no worker
// waiting: only then is it forgotten, counters, metric series and all. A queue that does not exist
// is kept only while Leases wait on it, for the Add that would wake them;
// calls on a name nobody added to leave nothing behind.
type queueState struct {
	mu     sync.Mutex
	q      *workqueue.Queue
	exists bool   // Stats answers NOT_FOUND until it does
	used   int64  // when work last touched it (Unix ns); reads do not count
	buf    []byte // records of the operation in progress
	// ver is the version the operation in progress encodes its records
	// at: the journal's RecordVersion when the operation locked the
	// queue.
	ver format.Version
	// waitq is the Leases waiting for a key, the longest-waiting first:
	// each key that becomes ready wakes one (wake), so a queue with many
	// idle workers wakes one of them a key, not all of them for each.
	waitq   []chan struct{}
	waiters atomic.Int32 // Leases waiting (in waitq, or just woken)
	timer   *time.Timer
	timerAt int64
	// seen is when each worker last called Lease here (Unix ns): who works
	// on the queue, for Stats. At most maxSeen names, the oldest go first.
	seen map[string]int64
	// stalled is set while due deadlines cannot be applied because their
	// records were refused: the timer then retries in a second rather
	// than at once.
	stalled bool
	obs     *queueObservers
	// rev is the highest etcd revision an Add has announced (Add's Revision), in
	// memory only: every lease carries it as its min_revision.
	rev atomic.Int64
}

// load restores one stored record into qs, the queue it names, as
// recovery and a follower do: the queue exists from then on. b.mu is held
// exclusively, or the broker is recovering.
func (b *Broker) load(qs *queueState, r *record.Record) {
	if !qs.exists {
		qs.exists = true
		b.existing.Add(1)
	}
	if r.Kind != record.KindQueue {
		qs.q.Restore(r)
	}
}

func (qs *queueState) sink(r *record.Record) { qs.buf = record.Append(qs.buf, r, qs.ver) }

// queueLocked returns the named queue, creating it; the caller holds b.mu
// exclusively or is recovering.
func (b *Broker) queueLocked(name string) *queueState {
	qs := b.queues[name]
	if qs == nil {
		qs = &queueState{}
		qs.q = workqueue.New(name, &b.cfg.Queue, &b.tokens, qs.sink)
		b.queues[name] = qs
	}
	return qs
}

// lock returns the named queue locked, with b.mu held shared, and its due
// deadlines applied; end with b.unlock, or b.commit for a change. It creates
// the queue if there is none: only Add, and a Lease about to wait, may. On
// a member that does not lead, it returns ErrNotLeader and holds nothing.
func (b *Broker) lock(name string) (*queueState, error) {
	if qs, err := b.lockExisting(name); qs != nil || err != nil {
		return qs, err
	}
	b.mu.Lock()
	if !b.leading.Load() {
		b.mu.Unlock()
		return nil, ErrNotLeader
	}
	b.queueLocked(name)
	b.mu.Unlock()
	return b.lock(name)
}

// lockExisting is lock for a queue there is, or nil (and no lock held).
// Whether this member leads is checked under b.mu, which a change of
// leadership holds exclusively: an operation that passes runs wholly in
// one leadership.
func (b *Broker) lockExisting(name string) (*queueState, error) {
	b.mu.RLock()
	if !b.leading.Load() {
		b.mu.RUnlock()
		return nil, ErrNotLeader
	}
	qs := b.queues[name]
	if qs == nil {
		b.mu.RUnlock()
		return nil, nil
	}
	qs.mu.Lock()
	qs.ver = b.j.RecordVersion()
	b.advance(qs)
	return qs, nil
}

// Workers are shown in Stats while they hold a lease or for SeenFor after
// their last Lease call; at most MaxSeen per queue, the most recent.
const (
	SeenFor = 2 * time.Minute
	MaxSeen = 256
)

// saw notes that worker called Lease at now. qs.mu is held.
func (qs *queueState) saw(worker string, now int64) {
	if worker == "" {
		return
	}
	if qs.seen == nil {
		qs.seen = map[string]int64{}
	}
	if _, ok := qs.seen[worker]; !ok && len(qs.seen) >= MaxSeen {
		oldest, at := "", int64(math.MaxInt64)
		for w, t := range qs.seen {
			if t < at {
				oldest, at = w, t
			}
		}
		delete(qs.seen, oldest)
	}
	qs.seen[worker] = now
}

// use notes that work touched the queue now: an empty queue is forgotten
// EmptyRetention after its last work, however often it is read (a
// dashboard or a metrics scrape must not keep it forever). qs.mu is held.
func (qs *queueState) use() { qs.used = time.Now().UnixNano() }

// observers returns the queue's latency histograms, made when first needed:
// a queue only waited on has no metric series. qs.mu is held.
func (b *Broker) observers(qs *queueState) *queueObservers {
	if qs.obs == nil {
		qs.obs = b.metrics.observers(qs.q.Name())
	}
	return qs.obs
}

// dropIfUnused forgets a queue that holds nothing, has no waiter and does
// not exist (a Lease waited on it, or its first Add was refused).
func (b *Broker) dropIfUnused(name string, qs *queueState) {
	qs.mu.Lock()
	unused := !qs.exists && qs.q.Len() == 0 && qs.waiters.Load() == 0
	qs.mu.Unlock()
	if !unused {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(name, qs, func(qs *queueState) bool { return !qs.exists })
}

// dropLocked removes qs from the registry if it is still there, unused
// (no keys, no waiter) and ok says so; b.mu is held exclusively, so no
// operation holds the queue.
func (b *Broker) dropLocked(name string, qs *queueState, ok func(*queueState) bool) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if b.queues[name] != qs || qs.q.Len() != 0 || qs.waiters.Load() != 0 || !ok(qs) {
		return false
	}
	delete(b.queues, name)
	if qs.exists {
		b.existing.Add(-1)
	}
	if qs.timer != nil {
		qs.timer.Stop()
	}
	if qs.obs != nil {
		b.metrics.forget(name)
	}
	return true
}

// reserveQueue counts one more existing queue, unless MaxQueues exist.
func (b *Broker) reserveQueue() bool {
	for {
		n := b.existing.Load()
		if n >= int64(b.cfg.MaxQueues) {
			return false
		}
		if b.existing.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// dropEmpty forgets the queues that have held nothing, with no worker
// waiting, for EmptyRetention. (Their Queue record in the log makes them
// exist again at a restart, empty, until the next snapshot leaves it out.)
func (b *Broker) dropEmpty(now int64) {
	old := now - int64(b.cfg.EmptyRetention)
	var idle []string
	b.mu.RLock()
	for name, qs := range b.queues {
		qs.mu.Lock()
		if qs.q.Len() == 0 && qs.waiters.Load() == 0 && qs.used < old {
			idle = append(idle, name)
		}
		qs.mu.Unlock()
	}
	b.mu.RUnlock()
	if len(idle) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range idle {
		if qs := b.queues[name]; qs != nil && b.dropLocked(name, qs, func(qs *queueState) bool { return qs.used < old }) {
			b.log.Info("forgot an empty queue", "queue", name, "empty_for_at_least", b.cfg.EmptyRetention)
		}
	}
}
