// Package outbox hands keys from the observer to the queue without ever
// making observation wait. Each queue has an outbox: a set of keys, each with
// the highest priority it was announced at and when it was first observed, so
// its size is bounded by distinct keys, not by events. A drainer per queue
// sends the set in batched Adds; when the queue is slow or down the set
// grows, Adds are retried with capped backoff, and Put still returns at once.
//
// A key announced again while an Add carrying it is in flight stays in the
// set and is sent again: the queue may have handed the earlier announcement
// to a worker that read the object before the newer change.
//
// Queues come and go with the rules (controllers' declarations name
// them): an outbox whose queue is in no rule goes, with its drainer, once
// it holds no key (Retain), so queues of declarations long deleted cost
// nothing.
package outbox

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// Adder is the part of the queue client the outbox needs.
type Adder interface {
	Add(ctx context.Context, queue string, keys []string, o queueclient.AddOptions) (queueclient.AddResult, error)
}

// Options tune the drainers; zero values take the defaults.
type Options struct {
	// MaxBatch is the most keys per Add (default limits.MaxBatch).
	MaxBatch int
	// CallTimeout bounds one Add (default 10 s).
	CallTimeout time.Duration
	// RetryMin and RetryMax bound the wait after a failed Add (defaults
	// 50 ms and 5 s; it doubles per consecutive failure, with jitter).
	RetryMin, RetryMax time.Duration
	// FlushTimeout bounds the last delivery attempt when Run's context ends
	// (default 3 s). What is left is not lost for good: a restarted
	// observer lists everything again.
	FlushTimeout time.Duration
	// InFlight is the most Adds one queue's outbox has in flight at once
	// (default 4). Keys observed while Adds are in flight go out in the
	// next one at once instead of waiting for them: the queue's group
	// commit makes concurrent Adds share their fsyncs, so the wait was
	// pure latency. A key is in at most one Add at a time.
	InFlight int
	// Source is sent as AddRequest.source.
	Source string
	// Latency, if set, observes the time from a key's observation to the
	// Add that delivered it, per queue.
	Latency func(queue string, d time.Duration)
	// Logger; nil discards.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.MaxBatch <= 0 || o.MaxBatch > limits.MaxBatch {
		o.MaxBatch = limits.MaxBatch
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 50 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(5*time.Second, o.RetryMin)
	}
	if o.InFlight <= 0 {
		o.InFlight = 4
	}
	if o.FlushTimeout <= 0 {
		o.FlushTimeout = 3 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// rank orders priorities: LOW < NORMAL (and unspecified) < HIGH.
func rank(p queuev1.Priority) int {
	switch p {
	case queuev1.Priority_PRIORITY_LOW:
		return 0
	case queuev1.Priority_PRIORITY_HIGH:
		return 2
	default:
		return 1
	}
}

type entry struct {
	prio  queuev1.Priority
	seq   uint64    // bumped by every Put of the key
	since time.Time // first observation not yet delivered
	rev   int64     // etcd revision of that observation (0: none, e.g. a resync)

	// While an Add carrying the key is in flight: the seq it carries, and
	// the first announcement made since (which the Add does not cover).
	takenSeq   uint64
	afterRev   int64
	afterSince time.Time
}

// Box is one queue's outbox.
type Box struct {
	queue string
	add   Adder
	opts  Options

	mu      sync.Mutex
	items   map[string]*entry
	seq     uint64
	lastErr string
	// maxRev is the highest revision announced to this queue: every Add
	// carries it, so a worker's lease says which revision of the
	// observer's cache holds the change behind its key.
	maxRev int64

	retired bool          // left the set (Retain) while empty: takes no more keys
	quit    chan struct{} // closed when retired: its drainer ends
	set     *Set
	leaving atomic.Bool // its queue is in no rule: it goes once empty

	wake      chan struct{}
	delivered atomic.Uint64
	failures  atomic.Uint64
	dropped   atomic.Uint64
}

// Set holds the outbox of every queue. Queues are added (Ensure) as rules
// come into force, and an outbox leaves (Retain) once its queue is in no
// rule and it holds no key: declarations may come and go with queues of
// their own, and those of declarations long gone must cost nothing. An
// outbox that still holds keys when its last rule goes stays until they
// are delivered.
type Set struct {
	add  Adder
	opts Options

	mu    sync.Mutex // serializes Ensure
	boxes atomic.Pointer[boxes]
	added chan struct{} // Ensure added a box: Run starts its drainer
}

// boxes is one immutable version of the set's outboxes.
type boxes struct {
	byQueue map[string]*Box
	names   []string // sorted
}

// NewSet makes an outbox for each queue, delivering through add.
func NewSet(queues []string, add Adder, opts Options) *Set {
	opts.defaults()
	s := &Set{add: add, opts: opts, added: make(chan struct{}, 1)}
	s.boxes.Store(&boxes{byQueue: map[string]*Box{}})
	s.Ensure(queues)
	return s
}

// Ensure makes an outbox for each of queues that has none yet; Run drains
// it too.
func (s *Set) Ensure(queues []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.boxes.Load()
	var next *boxes
	for _, q := range queues {
		if b := cur.byQueue[q]; b != nil {
			b.leaving.Store(false)
			continue
		}
		if next != nil && next.byQueue[q] != nil {
			continue
		}
		if next == nil {
			next = &boxes{byQueue: maps.Clone(cur.byQueue), names: slices.Clone(cur.names)}
		}
		next.byQueue[q] = &Box{queue: q, add: s.add, opts: s.opts, items: map[string]*entry{}, wake: make(chan struct{}, 1), quit: make(chan struct{}), set: s}
		next.names = append(next.names, q)
	}
	if next == nil {
		return
	}
	slices.Sort(next.names)
	s.boxes.Store(next)
	select {
	case s.added <- struct{}{}:
	default:
	}
}

// Retain removes the outboxes of queues not in queues that hold no key
// (those in flight included) and ends their drainers; an outbox that still
// holds keys stays until its drainer has delivered them, then goes (unless
// Ensure has taken its queue back meanwhile).
func (s *Set) Retain(queues []string) {
	keep := make(map[string]bool, len(queues))
	for _, q := range queues {
		keep[q] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []*Box
	for q, b := range s.boxes.Load().byQueue {
		switch {
		case keep[q]:
			b.leaving.Store(false)
		case b.retire():
			gone = append(gone, b)
		default:
			b.leaving.Store(true)
			b.signal() // its drainer looks again once its keys are out
		}
	}
	s.remove(gone)
}

// retireLeaving removes b if its queue is still out of the rules and it
// holds no key; it reports whether it did.
func (s *Set) retireLeaving(b *Box) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !b.leaving.Load() || s.boxes.Load().byQueue[b.queue] != b || !b.retire() {
		return false
	}
	s.remove([]*Box{b})
	return true
}

// remove takes the retired boxes gone out of the set (s.mu held) and ends
// their drainers.
func (s *Set) remove(gone []*Box) {
	if len(gone) == 0 {
		return
	}
	cur := s.boxes.Load()
	next := &boxes{byQueue: maps.Clone(cur.byQueue)}
	for _, b := range gone {
		delete(next.byQueue, b.queue)
		close(b.quit)
	}
	next.names = slices.Sorted(maps.Keys(next.byQueue))
	s.boxes.Store(next)
	select {
	case s.added <- struct{}{}: // Run forgets the drainers that ended
	default:
	}
}

// retire marks the box retired if it holds no key.
func (b *Box) retire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.items) > 0 {
		return false
	}
	b.retired = true
	return true
}

// ErrUnknownQueue is returned by Put for a queue the set was not made for.
var ErrUnknownQueue = errors.New("outbox: unknown queue")

// Put adds keys to queue's outbox, announcing a change observed at `at`
// in etcd revision rev (0 if the announcement is not a change, e.g. a
// resync). It never blocks on delivery.
func (s *Set) Put(queue string, keys []string, prio queuev1.Priority, at time.Time, rev int64) error {
	for {
		b := s.boxes.Load().byQueue[queue]
		if b == nil {
			return ErrUnknownQueue
		}
		if b.put(keys, prio, at, rev) {
			return nil
		}
		// Retired as this was announced (its queue left the rules just
		// now): a new outbox takes the keys rather than losing them, and
		// goes in turn once they are delivered.
		s.Ensure([]string{queue})
	}
}

// MinPendingRevision returns the lowest etcd revision whose announcement
// has not been accepted by the queue yet, or 0 if every announced change
// has been delivered.
func (s *Set) MinPendingRevision() int64 {
	var low int64
	for _, b := range s.boxes.Load().byQueue {
		if r := b.minPendingRevision(); r > 0 && (low == 0 || r < low) {
			low = r
		}
	}
	return low
}

// Box returns queue's outbox (nil if none).
func (s *Set) Box(queue string) *Box { return s.boxes.Load().byQueue[queue] }

// Queues returns the queue names, sorted.
func (s *Set) Queues() []string { return s.boxes.Load().names }

// Len returns the keys waiting in every outbox.
func (s *Set) Len() int {
	n := 0
	for _, b := range s.boxes.Load().byQueue {
		n += b.Len()
	}
	return n
}

// Run drains every outbox, those Ensure adds meanwhile too, until ctx
// ends, then makes one bounded attempt to deliver what is left.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[*Box]bool{}
	for {
		cur := s.boxes.Load().byQueue
		for _, b := range cur {
			if !running[b] {
				running[b] = true
				wg.Go(func() { b.run(ctx) })
			}
		}
		for b := range running {
			if cur[b.queue] != b {
				delete(running, b) // retired: its drainer ends by itself
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.added:
		}
	}
}

// put adds keys; false if the box is retired (nothing added).
func (b *Box) put(keys []string, prio queuev1.Priority, at time.Time, rev int64) bool {
	if len(keys) == 0 {
		return true
	}
	b.mu.Lock()
	if b.retired {
		b.mu.Unlock()
		return false
	}
	b.maxRev = max(b.maxRev, rev)
	for _, k := range keys {
		// A key the queue refuses would fail its whole batch forever, so
		// such keys are dropped (and counted) instead of delivered.
		if !limits.ValidKey(k) {
			b.dropped.Add(1)
			b.opts.Logger.Warn("dropping a key the queue would refuse (empty, over 1024 bytes or not UTF-8)", "queue", b.queue, "key", k)
			continue
		}
		b.seq++
		e := b.items[k]
		if e == nil {
			b.items[k] = &entry{prio: prio, seq: b.seq, since: at, rev: rev}
			continue
		}
		if e.takenSeq != 0 && e.afterSince.IsZero() {
			e.afterRev, e.afterSince = rev, at
		}
		if e.rev == 0 {
			e.rev = rev
		}
		e.seq = b.seq
		if rank(prio) > rank(e.prio) {
			e.prio = prio
		}
	}
	b.mu.Unlock()
	b.signal()
	return true
}

// Len returns the distinct keys waiting, those in flight included.
func (b *Box) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.items)
}

// LastError is the error of the last Add if it failed, else "".
func (b *Box) LastError() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr
}

func (b *Box) minPendingRevision() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var low int64
	for _, e := range b.items {
		if e.rev > 0 && (low == 0 || e.rev < low) {
			low = e.rev
		}
	}
	return low
}

// Delivered counts keys delivered; Failures counts failed Adds.
func (b *Box) Delivered() uint64 { return b.delivered.Load() }

// Failures counts failed Add calls.
func (b *Box) Failures() uint64 { return b.failures.Load() }

// Dropped counts keys refused by Put because the queue would refuse them.
func (b *Box) Dropped() uint64 { return b.dropped.Load() }

type sent struct {
	key   string
	seq   uint64
	since time.Time
}

// take returns up to n keys grouped by priority, leaving out keys already in
// an Add in flight, and the highest revision announced so far, which covers
// every one of them.
func (b *Box) take(n int) (map[queuev1.Priority][]sent, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[queuev1.Priority][]sent{}
	i := 0
	for k, e := range b.items {
		if i == n {
			break
		}
		if e.takenSeq != 0 {
			continue
		}
		out[e.prio] = append(out[e.prio], sent{key: k, seq: e.seq, since: e.since})
		e.takenSeq, e.afterRev, e.afterSince = e.seq, 0, time.Time{}
		i++
	}
	return out, b.maxRev
}

// done removes delivered keys not announced again since they were taken.
func (b *Box) done(batch []sent, now time.Time) {
	again := false
	b.mu.Lock()
	b.lastErr = ""
	for _, s := range batch {
		e := b.items[s.key]
		if e == nil {
			continue
		}
		if e.seq == s.seq {
			delete(b.items, s.key)
			continue
		}
		// Announced again during the Add: what remains is the newer news,
		// to be sent again.
		e.rev, e.since, e.takenSeq = e.afterRev, e.afterSince, 0
		again = true
	}
	b.mu.Unlock()
	if again {
		b.signal()
	}
	b.delivered.Add(uint64(len(batch)))
	if b.opts.Latency != nil {
		for _, s := range batch {
			b.opts.Latency(b.queue, now.Sub(s.since))
		}
	}
}

// fail returns the keys of a failed Add to the outbox.
func (b *Box) fail(batch []sent, err error) {
	b.failures.Add(1)
	b.mu.Lock()
	b.lastErr = err.Error()
	for _, s := range batch {
		if e := b.items[s.key]; e != nil {
			e.takenSeq = 0 // the failed Add covered nothing; rev and since stand
		}
	}
	b.mu.Unlock()
}

// signal wakes the drainer.
func (b *Box) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run drains the outbox with up to InFlight Adds at a time until ctx ends.
// After a failed Add it lets the others finish, then waits (capped
// exponential backoff with jitter) before sending again.
func (b *Box) run(ctx context.Context) {
	log := b.opts.Logger.With("queue", b.queue)
	wait := b.opts.RetryMin
	var (
		slots     = make(chan struct{}, b.opts.InFlight)
		failed    = make(chan error, b.opts.InFlight) // one per failed Add at most
		delivered atomic.Bool
		flights   sync.WaitGroup
	)
	defer func() {
		flights.Wait()
		b.flush(log)
	}()
	// backoff waits after a failure; false means ctx ended.
	backoff := func(err error) bool {
		flights.Wait() // the queue is failing: let the other Adds end first
		for len(failed) > 0 {
			<-failed
		}
		log.Warn("add failed; keys stay in the outbox", "error", err, "outbox", b.Len(), "retry_in", wait)
		t := time.NewTimer(time.Duration(float64(wait) * (0.5 + rand.Float64()/2)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		wait = min(2*wait, b.opts.RetryMax)
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-failed:
			if !backoff(err) {
				return
			}
			continue
		case slots <- struct{}{}:
		}
		if delivered.Swap(false) {
			wait = b.opts.RetryMin
		}
		taken, rev := b.take(b.opts.MaxBatch)
		if len(taken) == 0 {
			<-slots
			if b.leaving.Load() && b.set != nil && b.set.retireLeaving(b) {
				return // its queue left the rules and its keys are delivered
			}
			select {
			case <-ctx.Done():
				return
			case <-b.quit:
				return // retired: empty, and takes no more keys
			case err := <-failed:
				if !backoff(err) {
					return
				}
			case <-b.wake:
			}
			continue
		}
		flights.Go(func() {
			defer func() { <-slots }()
			if err := b.deliver(ctx, taken, rev); err != nil {
				failed <- err
				return
			}
			delivered.Store(true)
			if b.leaving.Load() {
				b.signal() // maybe empty now: the drainer retires it
			}
		})
	}
}

// deliver sends one taken batch, one Add per priority, each at revision
// rev. The keys of an Add that fails (and of those not tried after it) go
// back to the outbox.
func (b *Box) deliver(ctx context.Context, taken map[queuev1.Priority][]sent, rev int64) error {
	var err error
	for prio, batch := range taken {
		if err != nil {
			b.fail(batch, err)
			continue
		}
		keys := make([]string, len(batch))
		for i, s := range batch {
			keys[i] = s.key
		}
		cctx, cancel := context.WithTimeout(ctx, b.opts.CallTimeout)
		_, err = b.add.Add(cctx, b.queue, keys, queueclient.AddOptions{Priority: prio, Source: b.opts.Source, Revision: rev})
		cancel()
		if err != nil {
			b.fail(batch, err)
			continue
		}
		b.done(batch, time.Now())
	}
	return err
}

func (b *Box) flush(log *slog.Logger) {
	if b.Len() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.FlushTimeout)
	defer cancel()
	for b.Len() > 0 && ctx.Err() == nil {
		taken, rev := b.take(b.opts.MaxBatch)
		if err := b.deliver(ctx, taken, rev); err != nil {
			log.Warn("outbox not flushed at shutdown; a restarted observer lists everything again", "error", err, "left", b.Len())
			return
		}
	}
}
