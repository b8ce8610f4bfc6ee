package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

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
	c       compactor
	log     *slog.Logger
	metrics *Metrics
	tokens  tokens

	// mu is held shared by every operation on a queue, exclusively to add
	// a queue to the registry or drop one from it.
	mu     sync.RWMutex
	queues map[string]*queueState
	// existing counts the queues that exist (Add made them, or recovery):
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

	// since is when this member's counters began: it opened, or began
	// to lead (Unix ns).
	since atomic.Int64

	compacting atomic.Bool
	walkStep   int // keys per locked step of a snapshot walk
	closed     chan struct{}
	draining   chan struct{} // closed by Drain
	drainOnce  sync.Once
	closeOnce  sync.Once
	wg         sync.WaitGroup
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
		b.load(b.queueLocked(r.Queue), r)
		if r.Kind != record.KindQueue {
			restored++
		}
	})
	if err != nil {
		debug.SetGCPercent(gc)
		return nil, fmt.Errorf("open store: %w", err)
	}
	b.since.Store(time.Now().UnixNano())
	b.j = storeJournal{st}
	b.c = storeJournal{st}
	b.tokens.epoch.Store(st.Epoch())
	b.tokens.epochs = st
	b.leading.Store(true)
	now := time.Now().UnixNano()
	keys := 0
	for _, qs := range b.queues {
		// Under the queue's lock like every other change: the timer armed
		// here may fire, and take the lock, before this loop moves on.
		qs.mu.Lock()
		qs.used = now // an empty queue is kept for EmptyRetention from here
		qs.q.Settle(now)
		qs.q.SetSink(qs.sink)
		keys += qs.q.Len()
		b.reschedule(qs)
		qs.mu.Unlock()
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
	return &Broker{cfg: cfg, log: log, metrics: metrics, queues: map[string]*queueState{}, closed: make(chan struct{}), draining: make(chan struct{})}
}

// Draining is closed once Drain is called: a work stream then pushes no
// more leases.
func (b *Broker) Draining() <-chan struct{} { return b.draining }

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
	for _, qs := range b.queues {
		if qs.timer != nil {
			qs.timer.Stop()
		}
	}
	b.mu.Unlock()
	return b.j.Close()
}
