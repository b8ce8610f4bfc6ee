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
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// ErrQueueNotFound is returned by Stats for a queue that was never used.
var ErrQueueNotFound = errors.New("broker: queue not found")

// Config configures a Broker.
type Config struct {
	Queue workqueue.Config
	// DefaultLease is the lease length when a caller gives none.
	DefaultLease time.Duration
	// CompactBytes snapshots once the log has grown past both this and twice
	// the last snapshot (64 MiB when 0).
	CompactBytes int64
}

// Broker owns every queue of one store.
type Broker struct {
	cfg     Config
	st      *store.Store
	log     *slog.Logger
	metrics *Metrics
	tokens  tokens

	mu     sync.RWMutex // held shared by every operation, exclusively to heal
	queues map[string]*shard

	compacting atomic.Bool
	walkStep   int // keys per locked step of a snapshot walk
	closed     chan struct{}
	draining   chan struct{} // closed by Drain
	drainOnce  sync.Once
	wg         sync.WaitGroup
}

type shard struct {
	mu      sync.Mutex
	q       *workqueue.Queue
	exists  bool          // announced at least once (Stats answers NOT_FOUND before)
	buf     []byte        // records of the operation in progress
	ready   chan struct{} // closed (and replaced) when keys become ready
	waiters atomic.Int32  // Leases waiting on ready
	timer   *time.Timer
	timerAt int64
	// stalled is set while due deadlines cannot be applied because their
	// records were refused: the timer then retries in a second rather
	// than at once.
	stalled bool
	obs     *queueObservers
}

// Open recovers the queues from the store in dir and starts the broker.
func Open(cfg Config, opts store.Options, metrics *Metrics, log *slog.Logger) (*Broker, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultLease <= 0 {
		cfg.DefaultLease = 30 * time.Second
	}
	if cfg.CompactBytes <= 0 {
		cfg.CompactBytes = 64 << 20
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	b := &Broker{cfg: cfg, log: log, metrics: metrics, queues: map[string]*shard{}, closed: make(chan struct{}), draining: make(chan struct{})}
	opts.Logger = log
	start := time.Now()
	restored := 0
	// Recovery allocates every item at once and keeps them all: collecting
	// garbage at the default pace would scan the growing heap again and
	// again for nothing.
	gc := debug.SetGCPercent(800)
	st, err := store.Open(opts, func(r *record.Record) {
		sh := b.shardLocked(r.Queue)
		sh.exists = true
		if r.Kind != record.KindQueue {
			sh.q.Restore(r)
			restored++
		}
	})
	if err != nil {
		debug.SetGCPercent(gc)
		return nil, fmt.Errorf("open store: %w", err)
	}
	b.st = st
	b.tokens.epoch.Store(st.Epoch())
	b.tokens.st = st
	now := time.Now().UnixNano()
	keys := 0
	for _, sh := range b.queues {
		// Under the shard's lock like every other change: the timer armed
		// here may fire, and take the lock, before this loop moves on.
		sh.mu.Lock()
		sh.q.Settle(now)
		sh.q.SetSink(sh.sink)
		keys += sh.q.Len()
		b.reschedule(sh)
		sh.mu.Unlock()
	}
	debug.SetGCPercent(gc)
	log.Info("recovered", "queues", len(b.queues), "keys", keys, "records", restored, "epoch", st.Epoch(), "took", time.Since(start))
	b.wg.Add(1)
	go b.probeSpace()
	return b, nil
}

func (sh *shard) sink(r *record.Record) { sh.buf = record.Append(sh.buf, r) }

// shardLocked returns the named shard, creating it; the caller holds b.mu
// exclusively or is recovering.
func (b *Broker) shardLocked(name string) *shard {
	sh := b.queues[name]
	if sh == nil {
		sh = &shard{ready: make(chan struct{}), obs: b.metrics.observers(name)}
		sh.q = workqueue.New(name, &b.cfg.Queue, &b.tokens, sh.sink)
		b.queues[name] = sh
	}
	return sh
}

// lock returns the named shard locked, with b.mu held shared, and its due
// deadlines applied; end with b.unlock, or b.commit for a change. It creates
// the shard (not yet existing for Stats) if needed.
func (b *Broker) lock(name string) *shard {
	b.mu.RLock()
	sh := b.queues[name]
	if sh == nil {
		b.mu.RUnlock()
		b.mu.Lock()
		sh = b.shardLocked(name)
		b.mu.Unlock()
		b.mu.RLock()
	}
	sh.mu.Lock()
	b.advance(sh)
	return sh
}

// advance applies due deadlines (delayed keys become ready, leases lapse)
// in a transaction of their own: if their records are refused, they are
// undone and tried again by the next operation or the timer.
func (b *Broker) advance(sh *shard) {
	sh.q.Begin()
	sh.q.Advance(time.Now().UnixNano())
	if len(sh.buf) == 0 {
		sh.q.Commit()
		return
	}
	_, err := b.st.Append(sh.buf) // expiry records need no waiter
	sh.buf = sh.buf[:0]
	if err != nil {
		sh.q.Rollback()
		sh.stalled = true
		return
	}
	sh.q.Commit()
	sh.stalled = false
}

// unlock ends an operation that changed nothing stored (reads, Lease,
// Extend): it wakes waiters if keys became ready, re-arms the timer and
// releases the locks.
func (b *Broker) unlock(sh *shard, pendingBefore int) {
	if sh.q.PendingCount() > pendingBefore && sh.waiters.Load() > 0 {
		close(sh.ready)
		sh.ready = make(chan struct{})
	}
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
func (b *Broker) commit(sh *shard, pendingBefore int, existed bool) (*store.Batch, error) {
	batch, err := b.st.Append(sh.buf)
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
	sh.mu.Lock()
	before := sh.q.PendingCount()
	sh.timerAt = 0
	b.advance(sh)
	b.unlock(sh, before)
}

// Add announces keys to queue. It returns how many were queued and
// collapsed, once every change is durable.
func (b *Broker) Add(ctx context.Context, queue string, keys []string, delay time.Duration, p workqueue.Priority) (queued, collapsed int, err error) {
	sh := b.lock(queue)
	before, existed := sh.begin()
	now := time.Now().UnixNano()
	if !sh.exists {
		sh.exists = true
		sh.sink(&record.Record{Kind: record.KindQueue, Queue: queue})
	}
	for _, k := range keys {
		if sh.q.Add(k, delay, p, now) {
			queued++
		}
	}
	batch, err := b.commit(sh, before, existed)
	if err == nil {
		err = batch.Wait(ctx)
	}
	if err != nil {
		return 0, 0, err
	}
	b.maybeCompact()
	return queued, len(keys) - queued, nil
}

// Lease hands out up to max ready keys, waiting up to wait for one.
func (b *Broker) Lease(ctx context.Context, queue, worker string, max int, d, wait time.Duration) ([]workqueue.Grant, error) {
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
		sh := b.lock(queue)
		before := sh.q.PendingCount()
		now := time.Now().UnixNano()
		grants := sh.q.Lease(nil, max, worker, d, now)
		if len(grants) > 0 || wait <= 0 || expired {
			obs := sh.obs
			b.unlock(sh, before)
			for _, g := range grants {
				obs.queueDur.Observe(float64(now-g.PendingSince) / 1e9)
			}
			return grants, nil
		}
		sh.waiters.Add(1)
		ready := sh.ready
		b.unlock(sh, before)
		select {
		case <-ready:
		case <-timeout:
			expired = true // one last look, then answer empty
		case <-b.draining:
			expired = true // shutting down: answer now, with what is ready
		case <-ctx.Done():
			sh.waiters.Add(-1)
			return nil, ctx.Err()
		case <-b.closed:
			sh.waiters.Add(-1)
			return nil, store.ErrClosed
		}
		sh.waiters.Add(-1)
	}
}

// AckItem is one ack of a batch.
type AckItem struct {
	Key     string
	Token   uint64
	Outcome workqueue.Outcome
}

// Ack applies outcomes and reports, per item, whether it was accepted.
func (b *Broker) Ack(ctx context.Context, queue string, acks []AckItem) ([]bool, error) {
	sh := b.lock(queue)
	before, existed := sh.begin()
	now := time.Now().UnixNano()
	ok := make([]bool, len(acks))
	started := make([]int64, 0, len(acks))
	for i, a := range acks {
		res, accepted := sh.q.Ack(a.Key, a.Token, a.Outcome, now)
		ok[i] = accepted
		if accepted {
			started = append(started, res.LeaseStart)
		}
	}
	obs := sh.obs
	batch, err := b.commit(sh, before, existed)
	if err == nil {
		for _, s := range started {
			obs.workDur.Observe(float64(now-s) / 1e9)
		}
		err = batch.Wait(ctx)
	}
	if err != nil {
		return nil, err
	}
	b.maybeCompact()
	return ok, nil
}

// Extend extends live leases to now+d; a zero expiry means LEASE_LOST.
func (b *Broker) Extend(queue string, refs []AckItem, d time.Duration) []int64 {
	if d <= 0 {
		d = b.cfg.DefaultLease
	}
	sh := b.lock(queue)
	before := sh.q.PendingCount()
	now := time.Now().UnixNano()
	out := make([]int64, len(refs))
	for i, r := range refs {
		out[i], _ = sh.q.Extend(r.Key, r.Token, d, now)
	}
	b.unlock(sh, before)
	return out
}

// Forget removes keys and returns how many were present.
func (b *Broker) Forget(ctx context.Context, queue string, keys []string) (int, error) {
	sh := b.lock(queue)
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

// known reports whether a queue has a shard, so reads of names nobody uses
// create nothing.
func (b *Broker) known(queue string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.queues[queue] != nil
}

// Inspect returns one key's state.
func (b *Broker) Inspect(queue, key string) workqueue.View {
	if !b.known(queue) {
		return workqueue.View{Key: key, State: workqueue.Absent}
	}
	sh := b.lock(queue)
	defer b.unlock(sh, sh.q.PendingCount())
	return sh.q.Inspect(key)
}

// List returns a page of items in key order after `after`.
func (b *Broker) List(queue string, state workqueue.State, after string, limit int) ([]workqueue.View, bool) {
	if !b.known(queue) {
		return nil, false
	}
	sh := b.lock(queue)
	defer b.unlock(sh, sh.q.PendingCount())
	return sh.q.List(state, after, limit)
}

// QueueStats is one queue's stats.
type QueueStats struct {
	Name string
	workqueue.Stats
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
		sh := b.lock(n)
		if sh.exists {
			out = append(out, QueueStats{Name: n, Stats: sh.q.Stats(time.Now().UnixNano())})
		}
		b.unlock(sh, sh.q.PendingCount())
	}
	if queue != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrQueueNotFound, queue)
	}
	return out, nil
}

// Err returns the error that stopped the store, or nil.
func (b *Broker) Err() error { return b.st.Err() }

// Ready reports whether the broker accepts changes: not after the store
// stopped, nor while the disk is full (etcd's health likewise fails while
// its NOSPACE alarm is raised).
func (b *Broker) Ready() error {
	if err := b.st.Err(); err != nil {
		return err
	}
	if b.st.NoSpace() {
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
	close(b.closed)
	b.wg.Wait()
	b.mu.Lock()
	for _, sh := range b.queues {
		if sh.timer != nil {
			sh.timer.Stop()
		}
	}
	b.mu.Unlock()
	return b.st.Close()
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
	wal, snap := b.st.WALBytes()
	if wal < b.cfg.CompactBytes || wal < 2*snap || !b.compacting.CompareAndSwap(false, true) {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.compacting.Store(false)
		start := time.Now()
		if err := b.st.Snapshot(b.walk); err != nil {
			b.log.Error("snapshot failed; the log keeps growing until one succeeds", "error", err)
			return
		}
		b.log.Info("snapshot written", "took", time.Since(start))
	}()
}

// probeSpace tries the disk every second while it is full, so readiness
// comes back with the space even when no change comes in to find out.
func (b *Broker) probeSpace() {
	defer b.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-b.closed:
			return
		case <-t.C:
		}
		if b.st.NoSpace() && b.st.Err() == nil {
			b.st.ProbeSpace()
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
	st    *store.Store
}

const seqBits = 44

func (t *tokens) Next() uint64 {
	n := t.seq.Add(1)
	if n >= 1<<seqBits {
		t.mu.Lock()
		if t.seq.Load() >= 1<<seqBits {
			if e, err := t.st.NextEpoch(); err == nil {
				t.epoch.Store(e)
				t.seq.Store(0)
			}
		}
		n = t.seq.Add(1)
		t.mu.Unlock()
	}
	return t.epoch.Load()<<seqBits | n
}
