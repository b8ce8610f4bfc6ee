// Package broker runs the queues: it serialises each queue's state machine
// (internal/workqueue) behind a mutex, writes the records it produces to the
// write-ahead log (internal/store) and waits for them to be durable before a
// change is answered, fires timers for backoff and lease expiry, wakes
// long-polling Leases, and compacts the log with snapshots.
//
// Ordering is what makes it correct: a queue's records are appended to the
// log while its mutex is held, so the log holds each key's changes in the
// order they happened, and a caller waits for the group commit that holds
// its records. A caller whose Add collapsed onto a key another caller has
// just added (and whose record is still in flight) waits for that group too:
// an empty Append returns the latest unfinished group.
//
// An error means nothing changed. Each operation runs in a workqueue
// transaction, and its records are written to the log before the queue's
// mutex is released; if the write is refused (a full disk), the
// transaction is rolled back, so no one ever sees a change that is not in
// the log, and a refused Ack leaves the lease as it was for the retry. Only
// a failed fsync (the store stops, and the process restarts to recover) or
// a deadline that ends while the caller waits leaves the outcome unknown.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	limits "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

var (
	// ErrQueueNotFound is returned by Stats for a queue that does not
	// exist.
	ErrQueueNotFound = errors.New("broker: queue not found")
	// ErrTooManyQueues is returned by an Add that would make a queue beyond
	// Config.MaxQueues.
	ErrTooManyQueues = errors.New("broker: too many queues")
)

// Config configures a Broker.
type Config struct {
	Queue workqueue.Config
	// DefaultLease is the lease length when a caller gives none.
	DefaultLease time.Duration
	// CompactBytes snapshots once the log has grown past both this and twice
	// the last snapshot (DefaultCompactBytes when 0).
	CompactBytes int64
	// MaxQueues bounds the queues that exist at once (DefaultMaxQueues
	// when 0): an Add that would make one more is refused.
	MaxQueues int
	// EmptyRetention is how long a queue that holds nothing, with no
	// worker waiting on it, is kept (with its counters and metric series)
	// before it is forgotten (DefaultEmptyRetention when 0).
	EmptyRetention time.Duration
}

// Defaults of Config.
const (
	DefaultCompactBytes   = 64 << 20
	DefaultMaxQueues      = 1000
	DefaultEmptyRetention = 10 * time.Minute
)

// Broker owns every queue of one store.
type Broker struct {
	cfg     Config
	j       journal
	log     *slog.Logger
	metrics *Metrics
	tokens  tokens

	// mu is held shared by every operation on a queue, exclusively to add
	// a queue to the registry or drop one from it.
	mu     sync.RWMutex
	queues map[string]*shard
	// existing counts the shards that exist (Add made them, or recovery):
	// the queues MaxQueues bounds. The others are waiting Leases' alone.
	existing atomic.Int64
	// leading is set while this broker answers calls: always for a single
	// member; on a member of a replicated queue, from Lead to Follow
	// (replicated.go). Changed only with mu held exclusively.
	leading atomic.Bool
	// A replicated queue's member: names interns the queue names of the
	// records it loads (under mu, exclusively); attached is closed once
	// the journal is set, which Lead waits for.
	names    record.Names
	attached chan struct{}
	node     *replica.Node
	// gen counts the replacements of a replicated member's state (Lead,
	// Follow, Restore), for a compaction to tell whether its walk saw one
	// state throughout; snapBytes is the last snapshot's size.
	gen       atomic.Uint64
	snapBytes atomic.Int64
	// wantSnapshot is set when the node needs a snapshot whatever the
	// log's size (a member that rejoined is not in the last one).
	wantSnapshot atomic.Bool

	compacting atomic.Bool
	walkStep   int // keys per locked step of a snapshot walk
	closed     chan struct{}
	draining   chan struct{} // closed by Drain
	drainOnce  sync.Once
	closeOnce  sync.Once
	wg         sync.WaitGroup
}

// A shard is one queue. It exists from its first Add until it has held
// nothing for EmptyRetention with no worker waiting: only then is it
// forgotten, counters, metric series and all. A shard that does not exist
// is kept only while Leases wait on it, for the Add that would wake them;
// calls on a name nobody added to leave nothing behind.
type shard struct {
	mu     sync.Mutex
	q      *workqueue.Queue
	exists bool   // Stats answers NOT_FOUND until it does
	used   int64  // when work last touched it (Unix ns); reads do not count
	buf    []byte // records of the operation in progress
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
	// rev is the highest etcd revision an Add has announced (AddAt), in
	// memory only: every lease carries it as its min_revision.
	rev atomic.Int64
}

// Open recovers the queues from the store in dir and starts the broker.
func Open(cfg Config, opts store.Options, metrics *Metrics, log *slog.Logger) (*Broker, error) {
	b := newBroker(cfg, metrics, log)
	log = b.log
	opts.Logger = log
	start := time.Now()
	restored := 0
	// Recovery allocates every item at once and keeps them all: collecting
	// garbage at the default pace would scan the growing heap again and
	// again for nothing.
	gc := debug.SetGCPercent(800)
	st, err := store.Open(opts, func(r *record.Record) {
		b.load(b.shardLocked(r.Queue), r)
		if r.Kind != record.KindQueue {
			restored++
		}
	})
	if err != nil {
		debug.SetGCPercent(gc)
		return nil, fmt.Errorf("open store: %w", err)
	}
	b.j = storeJournal{st}
	b.tokens.epoch.Store(st.Epoch())
	b.tokens.j = b.j
	b.leading.Store(true)
	now := time.Now().UnixNano()
	keys := 0
	for _, sh := range b.queues {
		// Under the shard's lock like every other change: the timer armed
		// here may fire, and take the lock, before this loop moves on.
		sh.mu.Lock()
		sh.used = now // an empty queue is kept for EmptyRetention from here
		sh.q.Settle(now)
		sh.q.SetSink(sh.sink)
		keys += sh.q.Len()
		b.reschedule(sh)
		sh.mu.Unlock()
	}
	debug.SetGCPercent(gc)
	log.Info("recovered", "queues", len(b.queues), "keys", keys, "records", restored, "epoch", st.Epoch(), "took", time.Since(start))
	b.wg.Add(1)
	go b.housekeeping()
	return b, nil
}

// newBroker is a broker with no journal yet and cfg's defaults filled in.
func newBroker(cfg Config, metrics *Metrics, log *slog.Logger) *Broker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultLease <= 0 {
		cfg.DefaultLease = 30 * time.Second
	}
	if cfg.CompactBytes <= 0 {
		cfg.CompactBytes = DefaultCompactBytes
	}
	if cfg.MaxQueues <= 0 {
		cfg.MaxQueues = DefaultMaxQueues
	}
	if cfg.EmptyRetention <= 0 {
		cfg.EmptyRetention = DefaultEmptyRetention
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	return &Broker{cfg: cfg, log: log, metrics: metrics, queues: map[string]*shard{}, closed: make(chan struct{}), draining: make(chan struct{})}
}

// load restores one stored record into sh, the shard it names, as
// recovery and a follower do: the queue exists from then on. b.mu is held
// exclusively, or the broker is recovering.
func (b *Broker) load(sh *shard, r *record.Record) {
	if !sh.exists {
		sh.exists = true
		b.existing.Add(1)
	}
	if r.Kind != record.KindQueue {
		sh.q.Restore(r)
	}
}

func (sh *shard) sink(r *record.Record) { sh.buf = record.Append(sh.buf, r) }

// shardLocked returns the named shard, creating it; the caller holds b.mu
// exclusively or is recovering.
func (b *Broker) shardLocked(name string) *shard {
	sh := b.queues[name]
	if sh == nil {
		sh = &shard{}
		sh.q = workqueue.New(name, &b.cfg.Queue, &b.tokens, sh.sink)
		b.queues[name] = sh
	}
	return sh
}

// lock returns the named shard locked, with b.mu held shared, and its due
// deadlines applied; end with b.unlock, or b.commit for a change. It creates
// the shard if there is none: only Add, and a Lease about to wait, may. On
// a member that does not lead, it returns ErrNotLeader and holds nothing.
func (b *Broker) lock(name string) (*shard, error) {
	if sh, err := b.lockExisting(name); sh != nil || err != nil {
		return sh, err
	}
	b.mu.Lock()
	if !b.leading.Load() {
		b.mu.Unlock()
		return nil, ErrNotLeader
	}
	b.shardLocked(name)
	b.mu.Unlock()
	return b.lock(name)
}

// lockExisting is lock for a shard there is, or nil (and no lock held).
// Whether this member leads is checked under b.mu, which a change of
// leadership holds exclusively: an operation that passes runs wholly in
// one leadership.
func (b *Broker) lockExisting(name string) (*shard, error) {
	b.mu.RLock()
	if !b.leading.Load() {
		b.mu.RUnlock()
		return nil, ErrNotLeader
	}
	sh := b.queues[name]
	if sh == nil {
		b.mu.RUnlock()
		return nil, nil
	}
	sh.mu.Lock()
	b.advance(sh)
	return sh, nil
}

// abort ends an operation begun on sh that changed nothing.
func (b *Broker) abort(sh *shard, pendingBefore int) {
	sh.q.Rollback()
	b.unlock(sh, pendingBefore)
}

// Workers are shown in Stats while they hold a lease or for SeenFor after
// their last Lease call; at most MaxSeen per queue, the most recent.
const (
	SeenFor = 2 * time.Minute
	MaxSeen = 256
)

// saw notes that worker called Lease at now. sh.mu is held.
func (sh *shard) saw(worker string, now int64) {
	if worker == "" {
		return
	}
	if sh.seen == nil {
		sh.seen = map[string]int64{}
	}
	if _, ok := sh.seen[worker]; !ok && len(sh.seen) >= MaxSeen {
		oldest, at := "", int64(math.MaxInt64)
		for w, t := range sh.seen {
			if t < at {
				oldest, at = w, t
			}
		}
		delete(sh.seen, oldest)
	}
	sh.seen[worker] = now
}

// use notes that work touched the queue now: an empty queue is forgotten
// EmptyRetention after its last work, however often it is read (a
// dashboard or a metrics scrape must not keep it forever). sh.mu is held.
func (sh *shard) use() { sh.used = time.Now().UnixNano() }

// observers returns the queue's latency histograms, made when first needed:
// a shard only waited on has no metric series. sh.mu is held.
func (b *Broker) observers(sh *shard) *queueObservers {
	if sh.obs == nil {
		sh.obs = b.metrics.observers(sh.q.Name())
	}
	return sh.obs
}

// dropIfUnused forgets a shard that holds nothing, has no waiter and does
// not exist (a Lease waited on it, or its first Add was refused).
func (b *Broker) dropIfUnused(name string, sh *shard) {
	sh.mu.Lock()
	unused := !sh.exists && sh.q.Len() == 0 && sh.waiters.Load() == 0
	sh.mu.Unlock()
	if !unused {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(name, sh, func(sh *shard) bool { return !sh.exists })
}

// dropLocked removes sh from the registry if it is still there, unused
// (no keys, no waiter) and ok says so; b.mu is held exclusively, so no
// operation holds the shard.
func (b *Broker) dropLocked(name string, sh *shard, ok func(*shard) bool) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b.queues[name] != sh || sh.q.Len() != 0 || sh.waiters.Load() != 0 || !ok(sh) {
		return false
	}
	delete(b.queues, name)
	if sh.exists {
		b.existing.Add(-1)
	}
	if sh.timer != nil {
		sh.timer.Stop()
	}
	if sh.obs != nil {
		b.metrics.forget(name)
	}
	return true
}

// advance applies due deadlines (delayed keys become ready, leases lapse)
// in a transaction of their own: if their records are refused, they are
// undone and tried again by the next operation or the timer.
// Keys it makes ready wake waiting Leases: an operation that begins here
// counts what is pending only after it (pendingBefore), so these keys
// would wake no one there, and the queue's timer, firing later, finds
// nothing due.
func (b *Broker) advance(sh *shard) {
	sh.q.Begin()
	ready := sh.q.Advance(time.Now().UnixNano())
	if len(sh.buf) == 0 {
		sh.q.Commit()
		sh.wake(ready)
		return
	}
	_, err := b.j.Append(sh.buf) // expiry records need no waiter
	sh.buf = sh.buf[:0]
	if err != nil {
		sh.q.Rollback()
		sh.stalled = true
		return
	}
	sh.q.Commit()
	sh.stalled = false
	sh.wake(ready)
}

// wake wakes up to n waiting Leases, the longest-waiting first, each for a
// key that became ready. sh.mu is held. One that finds the key taken
// waits again; one that leaves without looking passes it on (lease).
func (sh *shard) wake(n int) {
	for ; n > 0 && len(sh.waitq) > 0; n-- {
		sh.waitq[0] <- struct{}{} // buffered, and sent to once: never blocks
		sh.waitq[0] = nil
		sh.waitq = sh.waitq[1:]
	}
	if len(sh.waitq) == 0 {
		sh.waitq = nil // let the backing array go
	}
}

// unwait takes ch out of sh.waitq; false if it was woken (no longer in
// it). sh.mu is held.
func (sh *shard) unwait(ch chan struct{}) bool {
	for i, c := range sh.waitq {
		if c == ch {
			sh.waitq = slices.Delete(sh.waitq, i, i+1)
			return true
		}
	}
	return false
}

// unlock ends an operation that changed nothing stored (reads, Lease,
// Extend): it wakes waiters if keys became ready, re-arms the timer and
// releases the locks.
func (b *Broker) unlock(sh *shard, pendingBefore int) {
	sh.wake(sh.q.PendingCount() - pendingBefore)
	b.reschedule(sh)
	sh.mu.Unlock()
	b.mu.RUnlock()
}

// begin starts an operation that changes stored state, on a shard from
// lock; end it with commit.
func (sh *shard) begin() (pendingBefore int, existed bool) {
	sh.q.Begin()
	return sh.q.PendingCount(), sh.exists
}

// commit writes the operation's records and keeps its changes, or, if the
// log refuses them, undoes every one; then it unlocks. The returned batch is
// durable once Wait returns nil.
func (b *Broker) commit(sh *shard, pendingBefore int, existed bool) (waiter, error) {
	return b.commitTo(sh, pendingBefore, existed, b.j.Append)
}

// commitTo is commit through appendTo, the journal's Append or AppendLazy.
func (b *Broker) commitTo(sh *shard, pendingBefore int, existed bool, appendTo func([]byte) (waiter, error)) (waiter, error) {
	batch, err := appendTo(sh.buf)
	sh.buf = sh.buf[:0]
	if err != nil {
		sh.q.Rollback()
		sh.exists = existed
	} else {
		sh.q.Commit()
	}
	b.unlock(sh, pendingBefore)
	return batch, err
}

func (b *Broker) reschedule(sh *shard) {
	next, ok := sh.q.NextDeadline()
	if !ok {
		return
	}
	if sh.stalled {
		next = max(next, time.Now().Add(time.Second).UnixNano())
	}
	if next == sh.timerAt {
		return
	}
	sh.timerAt = next
	d := time.Duration(next - time.Now().UnixNano())
	if sh.timer == nil {
		sh.timer = time.AfterFunc(d, func() { b.fire(sh) })
		return
	}
	sh.timer.Reset(d)
}

// fire applies due deadlines: delayed keys become ready, leases lapse.
func (b *Broker) fire(sh *shard) {
	select {
	case <-b.closed:
		return
	default:
	}
	b.mu.RLock()
	if !b.leading.Load() || b.queues[sh.q.Name()] != sh {
		// A shard of an ended leadership, discarded by Follow: its state
		// is not the log's, and nothing of it may be written.
		b.mu.RUnlock()
		return
	}
	sh.mu.Lock()
	before := sh.q.PendingCount()
	sh.timerAt = 0
	b.advance(sh)
	b.unlock(sh, before)
}

// Add announces keys to queue. It returns how many were queued and
// collapsed, once every change is durable.
func (b *Broker) Add(ctx context.Context, queue string, keys []string, delay time.Duration, p workqueue.Priority) (queued, collapsed int, err error) {
	return b.AddAt(ctx, queue, keys, delay, p, 0)
}

// AddAt is Add of keys that stand for changes up to etcd revision rev:
// the queue's revision (Revision) becomes at least rev before any of the
// keys can be leased, so every lease of them carries it.
func (b *Broker) AddAt(ctx context.Context, queue string, keys []string, delay time.Duration, p workqueue.Priority, rev int64) (queued, collapsed int, err error) {
	sh, err := b.lock(queue)
	if err != nil {
		return 0, 0, err
	}
	sh.use()
	before, existed := sh.begin()
	now := time.Now().UnixNano()
	if !sh.exists {
		if !b.reserveQueue() {
			b.abort(sh, before)
			b.dropIfUnused(queue, sh)
			return 0, 0, fmt.Errorf("%w: %d queues exist, the most allowed", ErrTooManyQueues, b.cfg.MaxQueues)
		}
		sh.exists = true
		sh.sink(&record.Record{Kind: record.KindQueue, Queue: queue})
	}
	if rev > sh.rev.Load() {
		// Kept even if the Add is refused: a revision higher than needed
		// only makes a worker's read wait for a cache that is that recent.
		sh.rev.Store(rev)
	}
	for _, k := range keys {
		if sh.q.Add(k, delay, p, now) {
			queued++
		}
	}
	batch, err := b.commit(sh, before, existed)
	if err != nil && !existed {
		b.existing.Add(-1) // the new queue was rolled back
		b.dropIfUnused(queue, sh)
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

// Lease hands out up to max ready keys, waiting up to wait for one. worker
// is the name the caller gives itself; holder points at the name of its
// verified identity, to which the leases are bound (nil binds them to no
// one; see workqueue's Holders).
func (b *Broker) Lease(ctx context.Context, queue, worker string, holder *string, max int, d, wait time.Duration) ([]workqueue.Grant, error) {
	return b.lease(ctx, false, queue, worker, holder, max, d, wait)
}

// LeaseStream is Lease for a work stream, which waits as long as ctx
// lasts and records what it is granted before it sends it, so that the
// stream's end hands back every lease it held. Once keys are granted,
// the majority's confirmation (on a replicated leader) is waited for
// even if ctx ends meanwhile, within confirmTimeout: a grant cut short
// there would stay leased to nobody until its expiry, where one that
// returns is the stream's to hand back.
func (b *Broker) LeaseStream(ctx context.Context, queue, worker string, holder *string, max int, d time.Duration) ([]workqueue.Grant, error) {
	return b.lease(ctx, true, queue, worker, holder, max, d, forever)
}

// forever is a wait that only the caller's context ends.
const forever = time.Duration(math.MaxInt64)

// confirmTimeout bounds a stream's wait for the majority's confirmation of
// a grant, from the grant (a variable for a test).
var confirmTimeout = 10 * time.Second

// lease is Lease, waiting for keys with ctx; detached, it confirms what
// it grants with a context of its own, bounded by confirmTimeout from the
// grant, which ctx's end does not cut short (LeaseStream).
func (b *Broker) lease(ctx context.Context, detached bool, queue, worker string, holder *string, max int, d, wait time.Duration) ([]workqueue.Grant, error) {
	if d <= 0 {
		d = b.cfg.DefaultLease
	}
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	expired := false
	for {
		sh, err := b.lockExisting(queue)
		if err != nil {
			return nil, err
		}
		if sh == nil {
			if wait <= 0 || expired {
				return nil, nil // no queue, nothing to hand out: nothing kept
			}
			// A shard to wait on, for the Add that wakes us.
			if sh, err = b.lock(queue); err != nil {
				return nil, err
			}
		}
		sh.use()
		before := sh.q.PendingCount()
		now := time.Now().UnixNano()
		sh.saw(worker, now)
		grants := sh.q.Lease(nil, max, limits.MaxResponseBytes, worker, holder, d, now)
		if len(grants) > 0 || wait <= 0 || expired {
			var obs *queueObservers
			if len(grants) > 0 {
				obs = b.observers(sh)
			}
			b.unlock(sh, before)
			for _, g := range grants {
				obs.queueDur.Observe(float64(now-g.PendingSince) / 1e9)
			}
			if len(grants) > 0 {
				if err := b.confirmGrants(ctx, detached); err != nil {
					return nil, err
				}
			}
			return grants, nil
		}
		sh.waiters.Add(1)
		ready := make(chan struct{}, 1)
		sh.waitq = append(sh.waitq, ready)
		b.unlock(sh, before)
		select {
		case <-ready:
		case <-timeout:
			expired = true // one last look, then answer empty
		case <-b.draining:
			expired = true // shutting down: answer now, with what is ready
		case <-ctx.Done():
			err = ctx.Err()
		case <-b.closed:
			err = store.ErrClosed
		}
		sh.mu.Lock()
		if !sh.unwait(ready) && err != nil && sh.q.PendingCount() > 0 {
			// Woken for a key it will not look for: another waiter may.
			sh.wake(1)
		}
		sh.mu.Unlock()
		sh.waiters.Add(-1)
		b.dropIfUnused(queue, sh)
		if err != nil {
			return nil, err
		}
	}
}

// confirmGrants confirms a lease's grants (confirm) with ctx, or, detached,
// with a context that ctx's end does not cancel, bounded from now.
func (b *Broker) confirmGrants(ctx context.Context, detached bool) error {
	if !detached {
		return b.confirm(ctx)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	return b.confirm(cctx)
}

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
	sh, err := b.lockExisting(queue)
	if err != nil {
		return nil, nil, err
	}
	if sh == nil {
		return make([]bool, len(acks)), noWait, nil // no queue holds these leases
	}
	sh.use()
	before, existed := sh.begin()
	now := time.Now().UnixNano()
	ok = make([]bool, len(acks))
	started := make([]int64, 0, len(acks))
	for i, a := range acks {
		res, accepted := sh.q.Ack(a.Key, a.Token, holder, a.Outcome, now)
		ok[i] = accepted
		if accepted {
			started = append(started, res.LeaseStart)
		}
	}
	var obs *queueObservers
	if len(started) > 0 {
		obs = b.observers(sh)
	}
	appendTo := b.j.Append
	if lazy {
		appendTo = b.j.AppendLazy
	}
	batch, err := b.commitTo(sh, before, existed, appendTo)
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
			if batch, err = b.j.Append(nil); err != nil {
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

// noWait is the durable of an operation that changed nothing.
func noWait(context.Context) error { return nil }

// Release hands back the leases a work stream held when it ended, each as
// if it had lapsed now (workqueue's Release): pending again at once, so
// another worker gets the key without waiting out the lease. Leases that
// are no longer live, or bound to another holder, are left alone. It
// returns how many it released, once their records are durable.
func (b *Broker) Release(ctx context.Context, queue string, holder *string, leases []AckItem) (int, error) {
	sh, err := b.lockExisting(queue)
	if sh == nil || err != nil {
		return 0, err
	}
	sh.use()
	before, existed := sh.begin()
	now := time.Now().UnixNano()
	n := 0
	for _, l := range leases {
		if sh.q.Release(l.Key, l.Token, holder, now) {
			n++
		}
	}
	batch, err := b.commit(sh, before, existed)
	if err == nil {
		err = batch.Wait(ctx)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Revision returns the highest etcd revision announced to queue since
// this broker started leading it (0 if none): what a lease granted now
// carries as its min_revision.
func (b *Broker) Revision(queue string) int64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if sh := b.queues[queue]; sh != nil {
		return sh.rev.Load()
	}
	return 0
}

// Draining is closed once Drain is called: a work stream then pushes no
// more leases.
func (b *Broker) Draining() <-chan struct{} { return b.draining }

// Extend extends holder's live leases to now+d; a zero expiry means
// LEASE_LOST (a token that is not live, or a lease bound to another holder).
func (b *Broker) Extend(ctx context.Context, queue string, holder *string, refs []AckItem, d time.Duration) ([]int64, error) {
	if d <= 0 {
		d = b.cfg.DefaultLease
	}
	out := make([]int64, len(refs))
	sh, err := b.lockExisting(queue)
	if sh == nil || err != nil {
		return out, err
	}
	sh.use()
	before := sh.q.PendingCount()
	now := time.Now().UnixNano()
	for i, r := range refs {
		out[i], _ = sh.q.Extend(r.Key, r.Token, holder, d, now)
	}
	b.unlock(sh, before)
	if b.node != nil && slices.ContainsFunc(out, func(e int64) bool { return e != 0 }) {
		if err := b.confirm(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Forget removes keys and returns how many were present.
func (b *Broker) Forget(ctx context.Context, queue string, keys []string) (int, error) {
	sh, err := b.lockExisting(queue)
	if sh == nil || err != nil {
		return 0, err
	}
	sh.use()
	before, existed := sh.begin()
	n := 0
	for _, k := range keys {
		if sh.q.Forget(k) {
			n++
		}
	}
	batch, err := b.commit(sh, before, existed)
	if err == nil {
		err = batch.Wait(ctx)
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Inspect returns one key's state.
func (b *Broker) Inspect(queue, key string) (workqueue.View, error) {
	sh, err := b.lockExisting(queue)
	if sh == nil || err != nil {
		return workqueue.View{Key: key, State: workqueue.Absent}, err
	}
	defer b.unlock(sh, sh.q.PendingCount())
	return sh.q.Inspect(key), nil
}

// List returns a page of items in key order after `after`.
func (b *Broker) List(queue string, state workqueue.State, after string, limit int) ([]workqueue.View, bool, error) {
	sh, err := b.lockExisting(queue)
	if sh == nil || err != nil {
		return nil, false, err
	}
	defer b.unlock(sh, sh.q.PendingCount())
	views, more := sh.q.List(state, after, limit)
	return views, more, nil
}

// QueueStats is one queue's stats.
type QueueStats struct {
	Name string
	workqueue.Stats
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
// SeenFor. sh.mu is held.
func (sh *shard) workers(now int64, leasedBy map[string]int) []WorkerStats {
	for w, t := range sh.seen {
		if now-t > int64(SeenFor) {
			delete(sh.seen, w)
		}
	}
	var out []WorkerStats
	for w, t := range sh.seen {
		out = append(out, WorkerStats{Name: w, Leased: leasedBy[w], LastLease: t})
	}
	for w, n := range leasedBy {
		if _, ok := sh.seen[w]; !ok && w != "" {
			out = append(out, WorkerStats{Name: w, Leased: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stats returns the stats of queue, or of every queue if it is empty.
func (b *Broker) Stats(queue string) ([]QueueStats, error) {
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
		sh, err := b.lockExisting(n)
		if err != nil {
			return nil, err
		}
		if sh == nil {
			continue // dropped meanwhile
		}
		if sh.exists {
			now := time.Now().UnixNano()
			st := sh.q.Stats(now)
			out = append(out, QueueStats{Name: n, Stats: st, Workers: sh.workers(now, st.LeasedBy)})
		}
		b.unlock(sh, sh.q.PendingCount())
	}
	if queue != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	return out, nil
}

// Epoch returns the epoch in the top bits of the tokens Lease hands out
// now: the store's, raised at every start and when a run has used up its
// token space. ClusterService reports it as the member's term.
func (b *Broker) Epoch() uint64 { return b.tokens.epoch.Load() }

// Durable returns the operations the store has made durable since the
// broker opened it (store.Durable): the member's applied index.
func (b *Broker) Durable() uint64 { return b.j.Durable() }

// Err returns the error that stopped the store, or nil.
func (b *Broker) Err() error { return b.j.Err() }

// Ready reports whether the broker accepts changes: not after the store
// stopped, nor while the disk is full (etcd's health likewise fails while
// its NOSPACE alarm is raised).
func (b *Broker) Ready() error {
	if err := b.j.Err(); err != nil {
		return err
	}
	if b.j.NoSpace() {
		return store.ErrNoSpace
	}
	return nil
}

// Drain makes every waiting Lease, and every later one, answer at once with
// what is ready (usually nothing). A stopping server calls it first: its
// graceful stop waits for the calls in flight, and a long poll may wait
// 30 s, longer than the grace period.
func (b *Broker) Drain() { b.drainOnce.Do(func() { close(b.draining) }) }

// Close stops timers and the store, after the log is written.
func (b *Broker) Close() error {
	first := false
	b.closeOnce.Do(func() { first = true })
	if !first {
		return b.j.Close() // already closed: the store says how it ended
	}
	close(b.closed)
	b.wg.Wait()
	b.mu.Lock()
	for _, sh := range b.queues {
		if sh.timer != nil {
			sh.timer.Stop()
		}
	}
	b.mu.Unlock()
	return b.j.Close()
}

// walk emits the stored state of every queue, one queue locked at a time.
func (b *Broker) walk(emit func([]byte) error) error {
	b.mu.RLock()
	shards := make([]*shard, 0, len(b.queues))
	for _, sh := range b.queues {
		shards = append(shards, sh)
	}
	b.mu.RUnlock()
	var buf []byte
	for _, sh := range shards {
		if err := b.walkShard(sh, &buf, emit); err != nil {
			return err
		}
	}
	return nil
}

// walkShard emits one queue's stored state in steps of a few thousand keys,
// holding its lock only for each step, so a snapshot of millions of keys
// never stalls the queue for long.
func (b *Broker) walkShard(sh *shard, buf *[]byte, emit func([]byte) error) error {
	step := b.walkStep
	if step <= 0 {
		step = 4096
	}
	sh.mu.Lock()
	exists := sh.exists
	sh.mu.Unlock()
	if !exists {
		return nil
	}
	*buf = record.Append((*buf)[:0], &record.Record{Kind: record.KindQueue, Queue: sh.q.Name()})
	cursor, startGen := 0, uint64(0)
	for first := true; cursor >= 0; first = false {
		sh.mu.Lock()
		next, gen := sh.q.EachStep(cursor, step, func(r *record.Record) { *buf = record.Append(*buf, r) })
		if !first && gen != startGen {
			// Resized between steps: items moved, so start over.
			next, gen = sh.q.EachStep(0, step, func(r *record.Record) { *buf = record.Append(*buf, r) })
		}
		startGen = gen
		sh.mu.Unlock()
		cursor = next
		if err := emit(*buf); err != nil {
			return err
		}
		*buf = (*buf)[:0]
	}
	return nil
}

func (b *Broker) maybeCompact() {
	wal, snap := b.j.WALBytes()
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
		snapshot := b.j.Snapshot
		if b.node != nil {
			snapshot = b.compactReplicated
		}
		if err := snapshot(b.walk); errors.Is(err, errStateReplaced) {
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
		if b.node != nil {
			// A replicated queue's followers take no calls to compact
			// after; every member compacts its own log.
			b.maybeCompact()
		}
		b.dropEmpty(time.Now().UnixNano())
	}
}

// dropEmpty forgets the queues that have held nothing, with no worker
// waiting, for EmptyRetention. (Their Queue record in the log makes them
// exist again at a restart, empty, until the next snapshot leaves it out.)
func (b *Broker) dropEmpty(now int64) {
	old := now - int64(b.cfg.EmptyRetention)
	var idle []string
	b.mu.RLock()
	for name, sh := range b.queues {
		sh.mu.Lock()
		if sh.q.Len() == 0 && sh.waiters.Load() == 0 && sh.used < old {
			idle = append(idle, name)
		}
		sh.mu.Unlock()
	}
	b.mu.RUnlock()
	if len(idle) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range idle {
		if sh := b.queues[name]; sh != nil && b.dropLocked(name, sh, func(sh *shard) bool { return sh.used < old }) {
			b.log.Info("forgot an empty queue", "queue", name, "empty_for_at_least", b.cfg.EmptyRetention)
		}
	}
}

// tokens makes fencing tokens: the store's epoch in the top 20 bits and a
// counter below, so no token repeats, also across restarts. When a run hands
// out 2^44 tokens it moves to a fresh epoch.
type tokens struct {
	epoch atomic.Uint64
	seq   atomic.Uint64
	mu    sync.Mutex
	j     journal
}

const seqBits = 44

func (t *tokens) Next() uint64 {
	n := t.seq.Add(1)
	if n >= 1<<seqBits {
		t.mu.Lock()
		if t.seq.Load() >= 1<<seqBits {
			if e, err := t.j.NextEpoch(); err == nil {
				t.epoch.Store(e)
				t.seq.Store(0)
			}
		}
		n = t.seq.Add(1)
		t.mu.Unlock()
	}
	return t.epoch.Load()<<seqBits | n
}
