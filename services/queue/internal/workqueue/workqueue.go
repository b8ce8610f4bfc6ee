// Package workqueue is the queue's state machine, exactly the table of docs/design.md:
// per named queue, each key is absent, pending, delayed, leased (maybe dirty)
// or parked, and every event moves it as the table says. It is pure: the
// caller passes the time into every method and serialises calls (the service
// holds one mutex per queue), so the model-based tests can drive it with a
// fake clock and compare it step by step with a reference model.
//
// Every change to what must survive a restart is reported to the Sink as a
// record.Record stating the key's whole stored state (leases are never
// stored: a leased key is stored as pending). The caller makes those records
// durable before it answers.
//
// # Memory
//
// A pending key costs a slot of the key table (12 bytes, at a fill of 3/8 to
// 3/4), its string, one 48-byte item and an 8-byte slot in a FIFO ring: the
// queue is meant to hold millions of keys in
// about the memory client-go's in-memory workqueue needs (docs/benchmarks.md
// measures it). What only leased or failed keys need (token, worker, holder,
// last error) lives in a side struct allocated for them alone.
//
// # Holders
//
// A lease may be bound to a holder: the name of the verified identity that
// took it (the client certificate's CN, which the server passes in). An Ack
// or Extend of a bound lease by any other holder, or by none, is refused
// exactly as a wrong token is (LEASE_LOST, nothing changes): a token
// fences, it does not authenticate (the broker's are an epoch and a dense
// counter, easily guessed), so it cannot be what keeps one worker identity
// from finishing another's work. A lease taken with a nil holder is bound
// to no one and, as before holders existed, answers to its token alone.
// Holders are never stored: like leases, they end with the process.
//
// A holder is passed as a pointer to the name, not as a string: a pointer
// is one word where a string is two, which keeps itemExt at 64 bytes (72
// would move every leased key's itemExt to the 80-byte size class, and cost
// a Lease and Ack measurably more allocation and collection), and the
// server can point at the name in the connection's own certificate, so
// binding copies and allocates nothing. Holders compare by name: the
// pointers of one connection are equal, which settles it at once; another
// connection of the same certificate compares the bytes.
package workqueue

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// State is where a key is.
type State uint8

// States, numbered as baton.queue.v1.ItemState: the server converts by a
// cast, and its TestEnumsAgreeWithTheAPI holds the two numberings together.
const (
	Absent  State = 1
	Pending State = 2
	Delayed State = 3
	Leased  State = 4
	Parked  State = 5
)

func (s State) String() string {
	switch s {
	case Absent:
		return "absent"
	case Pending:
		return "pending"
	case Delayed:
		return "delayed"
	case Leased:
		return "leased"
	case Parked:
		return "parked"
	}
	return "unknown"
}

// Priority orders ready keys, numbered as baton.queue.v1.Priority (held
// together with the API by the same test).
type Priority uint8

// Priorities.
const (
	Normal Priority = 1
	Low    Priority = 2
	High   Priority = 3
)

// rank orders priorities: a higher rank is served first.
func (p Priority) rank() int {
	switch p {
	case High:
		return 2
	case Low:
		return 0
	}
	return 1
}

// LeaseExpired is the last_error of a key whose lease lapsed.
const LeaseExpired = "lease expired"

// StreamEnded is the last_error of a key whose lease a work stream held
// when it ended (Release).
const StreamEnded = "work stream ended"

// Config holds the policies of every queue.
type Config struct {
	// BackoffBase is the wait after the first failure; the n-th consecutive
	// failure waits BackoffBase·2^(n−1), capped at BackoffMax, times a random
	// factor in [0.8, 1.2].
	BackoffBase, BackoffMax time.Duration
	// MaxAttempts parks a key whose attempts reach it; 0 never parks.
	MaxAttempts uint32
	// AgingBound serves a key that has been pending longer than this as HIGH,
	// so no stream of fresh changes starves LOW work.
	AgingBound time.Duration
	// Jitter returns the backoff factor; nil draws uniformly from [0.8, 1.2).
	Jitter func() float64
}

// DefaultConfig returns the defaults of docs/design.md.
func DefaultConfig() Config {
	return Config{BackoffBase: 5 * time.Millisecond, BackoffMax: 1000 * time.Second, AgingBound: 10 * time.Second}
}

// Backoff returns the wait after the n-th consecutive failure (n ≥ 1).
func (c *Config) Backoff(n uint32) time.Duration {
	if n == 0 {
		n = 1
	}
	d := float64(c.BackoffBase) * math.Pow(2, float64(n-1))
	if d > float64(c.BackoffMax) || math.IsInf(d, 0) {
		d = float64(c.BackoffMax)
	}
	f := 0.8 + 0.4*rand.Float64()
	if c.Jitter != nil {
		f = c.Jitter()
	}
	return time.Duration(d * f)
}

// Sink receives the records of stored-state changes, in the order they
// happen. The record is only valid during the call.
type Sink func(*record.Record)

// Tokens hands out fencing tokens; the service's implementation makes them
// unique across restarts.
type Tokens interface {
	Next() uint64
}

// item is one key's state. Field order keeps it at 48 bytes, Go's size
// class below 64: it is most of a pending key's memory.
type item struct {
	key       string
	at        int64    // pending, leased: when it became ready; delayed: not_before
	ext       *itemExt // lease and failure details, when there are any
	pos       uint32   // low bits of its position in its priority's ring
	attempts  uint32   // failures since the last success
	hidx      int32    // index in the timer heap, -1 when not in it
	announced uint16   // Adds since last leased or first seen (saturates)
	state     State
	pf        uint8 // priority, and dirtyBit: leased and announced again
}

const dirtyBit = 0x80

func (it *item) prio() Priority     { return Priority(it.pf &^ dirtyBit) }
func (it *item) setPrio(p Priority) { it.pf = it.pf&dirtyBit | uint8(p) }
func (it *item) dirty() bool        { return it.pf&dirtyBit != 0 }
func (it *item) setDirty(d bool) {
	if d {
		it.pf |= dirtyBit
	} else {
		it.pf &^= dirtyBit
	}
}

// deadline is when the timer heap acts on it: a delayed key's not_before, a
// leased key's expiry.
func (it *item) deadline() int64 {
	if it.state == Leased {
		return it.ext.expires
	}
	return it.at
}

func (it *item) announce() {
	if it.announced < math.MaxUint16 {
		it.announced++
	}
}

type itemExt struct {
	token      uint64
	worker     string
	holder     *string // who may ack or extend the lease; nil for anyone
	leaseStart int64
	expires    int64
	lastError  string
}

// Queue is one named queue. It is not safe for concurrent use.
type Queue struct {
	name   string
	cfg    *Config
	tokens Tokens
	sink   Sink
	rec    record.Record // scratch, reused for every record

	items table
	// restored collects pending keys during recovery, for Settle.
	restored []*item
	ready    [3]ring // by priority rank
	timers   timerHeap
	due      []timerEntry // Advance's scratch

	pending, delayed, leased, dirty, parked int
	stats                                   Counters
	tx                                      txn // see txn.go
}

// Counters are a queue's traffic since the process started.
type Counters struct {
	Adds, Collapsed, Leases, Acks, Failures, Expirations uint64
	// Releases counts the leases handed back by Release.
	Releases uint64
}

// New returns an empty queue. sink may be nil (nothing is stored).
func New(name string, cfg *Config, tokens Tokens, sink Sink) *Queue {
	if sink == nil {
		sink = func(*record.Record) {}
	}
	q := &Queue{name: name, cfg: cfg, tokens: tokens, sink: sink}
	for i := range q.ready {
		q.ready[i].rank = i
	}
	return q
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// PendingCount returns the number of keys ready to be leased.
func (q *Queue) PendingCount() int { return q.pending }

// Len returns the number of keys the queue holds.
func (q *Queue) Len() int { return q.items.len() }

// AddOptions says how Add announces a key. Its zero value announces it
// ready now, at Normal priority.
type AddOptions struct {
	// Delay > 0 asks for the key no sooner than now+Delay.
	Delay time.Duration
	// Priority is the key's; a value that is no Priority (zero among
	// them) means Normal.
	Priority Priority
}

// Add announces key as o says. It reports whether the key was queued (its
// next offer became sooner) rather than collapsed.
func (q *Queue) Add(key string, o AddOptions, now int64) (queued bool) {
	delay, p := o.Delay, o.Priority
	q.stats.Adds++
	if p < Normal || p > High {
		p = Normal
	}
	it, slot, h := q.items.find(key)
	if it == nil {
		it = &item{key: key, pf: uint8(p), hidx: -1, announced: 1}
		q.created(it)
		q.items.putAt(slot, h, it)
		if delay > 0 {
			q.toDelayed(it, now+int64(delay))
		} else {
			q.toPending(it, now)
		}
		q.store(it)
		return true
	}
	q.touch(it)
	it.announce()
	raised := p.rank() > it.prio().rank()
	if raised {
		it.setPrio(p)
	}
	switch it.state {
	case Pending:
		if raised {
			q.ready[p.rank()].push(it) // the old ring slot goes stale
		}
	case Delayed:
		at := now
		if delay > 0 {
			at = now + int64(delay)
		}
		if at < it.at {
			q.timers.remove(it)
			q.delayed--
			if delay > 0 {
				q.toDelayed(it, at)
			} else {
				q.toPending(it, now)
			}
			q.store(it)
			return true
		}
	case Leased:
		if !it.dirty() {
			it.setDirty(true)
			q.dirty++
			if raised {
				q.store(it)
			}
			return true
		}
	case Parked:
		q.parked--
		it.attempts = 0
		if delay > 0 {
			q.toDelayed(it, now+int64(delay))
		} else {
			q.toPending(it, now)
		}
		q.store(it)
		return true
	}
	if raised {
		q.store(it)
	}
	q.stats.Collapsed++
	return false
}

// GrantOverhead is what a grant costs in a Lease answer beside its key: the
// token, the attempt, two timestamps and their framing, rounded up.
const GrantOverhead = 64

// Grant is one key handed out by Lease.
type Grant struct {
	Key          string
	Token        uint64
	Attempt      uint32
	ExpiresAt    int64
	PendingSince int64
}

// LeaseRequest is what a Lease asks for.
type LeaseRequest struct {
	// Max is how many keys at most.
	Max int
	// MaxBytes, if > 0, stops before the keys granted, at GrantOverhead
	// bytes each beside the key itself, would pass it (the first key is
	// always granted): the answer must fit what a client can receive.
	MaxBytes int
	// Worker is the name the worker gives itself, for Inspect and Stats.
	Worker string
	// Holder is who the worker verifiably is, for Ack and Extend: every
	// key is bound to it (see Holders; nil binds them to no one).
	Holder *string
	// Duration is how long the leases last.
	Duration time.Duration
}

// Lease hands up to r.Max ready keys to r.Worker until now+r.Duration,
// appending them to dst. Among the heads of the three priorities it serves
// the highest effective priority (a head older than the aging bound counts
// as HIGH), the oldest first among equals.
func (q *Queue) Lease(dst []Grant, r LeaseRequest, now int64) []Grant {
	if q.tx.active {
		panic("workqueue: Lease inside a transaction") // it pops rings; see txn.go
	}
	bytes := 0
	for n := 0; n < r.Max; n++ {
		it := q.nextReady(now)
		if it == nil {
			break
		}
		if bytes += len(it.key) + GrantOverhead; r.MaxBytes > 0 && n > 0 && bytes > r.MaxBytes {
			break
		}
		q.ready[it.prio().rank()].pop()
		q.pending--
		it.state = Leased
		it.announced = 0
		if it.ext == nil {
			it.ext = &itemExt{}
		}
		it.ext.token = q.tokens.Next()
		it.ext.worker = r.Worker
		it.ext.holder = r.Holder // the caller's name, shared, not copied
		it.ext.leaseStart = now
		it.ext.expires = now + int64(r.Duration)
		q.timers.push(it)
		q.leased++
		q.stats.Leases++
		dst = append(dst, Grant{Key: it.key, Token: it.ext.token, Attempt: it.attempts, ExpiresAt: it.ext.expires, PendingSince: it.at})
	}
	return dst
}

func (q *Queue) nextReady(now int64) *item {
	var best *item
	bestRank := -1
	aged := now - int64(q.cfg.AgingBound)
	for i := range q.ready {
		it := q.ready[i].front()
		if it == nil {
			continue
		}
		r := i
		if q.cfg.AgingBound > 0 && it.at < aged {
			r = 2
		}
		if r > bestRank || (r == bestRank && it.at < best.at) {
			best, bestRank = it, r
		}
	}
	return best
}

// Outcome is what a worker reports for a lease.
type Outcome struct {
	// Failed marks a failed reconcile with Error as its message.
	Failed bool
	Error  string
	// Terminal marks a failure retrying cannot fix (with Error): the key is
	// parked, unless it was announced while leased.
	Terminal bool
	// RequeueAfter > 0 marks success with another look after it.
	RequeueAfter time.Duration
}

// AckResult tells the caller what an accepted ack did, for metrics.
type AckResult struct {
	// LeaseStart is when the acknowledged lease was granted.
	LeaseStart int64
}

// Ack applies a worker's outcome for (key, token), from holder. It returns
// false, and changes nothing, when token is not the key's live lease or the
// lease is bound to another holder.
func (q *Queue) Ack(key string, token uint64, holder *string, o Outcome, now int64) (AckResult, bool) {
	it := q.live(key, token, holder)
	if it == nil {
		return AckResult{}, false
	}
	q.touch(it)
	res := AckResult{LeaseStart: it.ext.leaseStart}
	q.stats.Acks++
	q.endLease(it)
	switch {
	case o.Terminal:
		q.stats.Failures++
		it.ext.lastError = o.Error
		it.attempts++
		if it.dirty() {
			// Announced meanwhile: the object changed, so look again.
			q.clearDirty(it)
			q.toPending(it, now)
		} else {
			it.state = Parked
			q.parked++
		}
		q.store(it)
	case o.Failed:
		q.stats.Failures++
		it.ext.lastError = o.Error
		q.fail(it, now, true)
	case it.dirty():
		// Announced while leased: offered again exactly once, afresh.
		it.attempts = 0
		q.clearDirty(it)
		q.toPending(it, now)
		q.store(it)
	case o.RequeueAfter > 0:
		it.attempts = 0
		q.toDelayed(it, now+int64(o.RequeueAfter))
		q.store(it)
	default:
		q.remove(it)
	}
	return res, true
}

// Extend moves the expiry of (key, token), from holder, to now+d. It
// returns the new expiry, or false if token is not the key's live lease or
// the lease is bound to another holder.
func (q *Queue) Extend(key string, token uint64, holder *string, d time.Duration, now int64) (int64, bool) {
	it := q.live(key, token, holder)
	if it == nil {
		return 0, false
	}
	q.touch(it)
	it.ext.expires = now + int64(d)
	q.timers.fix(it)
	return it.ext.expires, true
}

// Release ends the lease (key, token) of holder as if it had lapsed now:
// the key is pending again (or parked at the attempt limit), attempts + 1,
// last_error StreamEnded. A work stream that ends releases the leases it
// holds, so their keys go to another worker at once rather than after
// their expiry. It returns false, and changes nothing, when token is not
// the key's live lease or the lease is bound to another holder.
func (q *Queue) Release(key string, token uint64, holder *string, now int64) bool {
	it := q.live(key, token, holder)
	if it == nil {
		return false
	}
	q.touch(it)
	q.stats.Releases++
	q.endLease(it)
	it.ext.lastError = StreamEnded
	q.fail(it, now, false)
	return true
}

// live returns key's item if it is leased under token and holder may act on
// the lease: the lease is bound to no one, or to holder. Otherwise nil.
func (q *Queue) live(key string, token uint64, holder *string) *item {
	it := q.items.get(key)
	if it == nil || it.state != Leased || it.ext.token != token {
		return nil
	}
	if h := it.ext.holder; h != nil && h != holder && (holder == nil || *h != *holder) {
		return nil
	}
	return it
}

// Forget removes key in any state; a leased key's token stops being valid.
func (q *Queue) Forget(key string) bool {
	it := q.items.get(key)
	if it == nil {
		return false
	}
	q.touch(it)
	switch it.state {
	case Pending:
		q.pending--
	case Delayed:
		q.timers.remove(it)
		q.delayed--
	case Leased:
		q.endLease(it)
		q.clearDirty(it)
	case Parked:
		q.parked--
	}
	q.remove(it)
	return true
}

// Advance applies every deadline at or before now: delayed keys become
// pending, lapsed leases end. It returns how many keys became ready.
func (q *Queue) Advance(now int64) int {
	n := 0
	// Everything due, in deadline then key order: the heap orders equal
	// deadlines by arrival, and the order in which keys become pending is
	// the order workers get them.
	due := q.due[:0]
	for q.timers.len() > 0 && q.timers.min().at <= now {
		e := q.timers.min()
		q.touch(e.it)
		q.timers.remove(e.it)
		due = append(due, e)
	}
	slices.SortFunc(due, func(a, b timerEntry) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return strings.Compare(a.it.key, b.it.key)
	})
	for i := range due {
		it := due[i].it
		due[i] = timerEntry{}
		switch it.state {
		case Delayed:
			q.delayed--
			// It became ready at not_before, not at the moment we noticed.
			q.toPending(it, it.at)
			n++
		case Leased:
			q.stats.Expirations++
			q.endLease(it)
			it.ext.lastError = LeaseExpired
			if q.fail(it, now, false) == Pending {
				n++
			}
		}
	}
	if cap(due) <= 4096 {
		q.due = due[:0]
	} else {
		q.due = nil // a burst of expiries need not keep its scratch
	}
	return n
}

// NextDeadline returns the earliest pending deadline, if any.
func (q *Queue) NextDeadline() (int64, bool) {
	if q.timers.len() == 0 {
		return 0, false
	}
	return q.timers.min().at, true
}

// fail counts a failure of a lease that has just ended and moves the key on:
// pending if it was announced meanwhile, parked at the attempt limit, else
// delayed by backoff (a failed ack) or pending at once (a lapsed lease, whose
// wait was the lease itself). It returns the new state.
func (q *Queue) fail(it *item, now int64, backoff bool) State {
	it.attempts++
	switch {
	case it.dirty():
		q.clearDirty(it)
		q.toPending(it, now)
	case q.cfg.MaxAttempts > 0 && it.attempts >= q.cfg.MaxAttempts:
		it.state = Parked
		q.parked++
	case backoff:
		q.toDelayed(it, now+int64(q.cfg.Backoff(it.attempts)))
	default:
		q.toPending(it, now)
	}
	q.store(it)
	return it.state
}

func (q *Queue) endLease(it *item) {
	q.timers.remove(it)
	q.leased--
	it.ext.token = 0
	it.ext.worker = ""
	it.ext.holder = nil // an ended lease binds no one, and keeps no name alive
}

func (q *Queue) clearDirty(it *item) {
	if it.dirty() {
		it.setDirty(false)
		q.dirty--
	}
}

func (q *Queue) toPending(it *item, since int64) {
	it.state = Pending
	it.at = since
	q.ready[it.prio().rank()].push(it)
	q.pending++
}

func (q *Queue) toDelayed(it *item, at int64) {
	it.state = Delayed
	it.at = at
	q.timers.push(it)
	q.delayed++
}

func (q *Queue) remove(it *item) {
	it.state = Absent // stale ring slots see this
	q.items.del(it)
	q.rec = record.Record{Kind: record.KindDelete, Queue: q.name, Key: it.key}
	q.sink(&q.rec)
}

// store reports the key's stored state.
func (q *Queue) store(it *item) {
	q.rec = stored(q.name, it)
	q.sink(&q.rec)
}

// stored is what survives a restart of it: a lease is not stored, so a
// leased key is stored as pending.
func stored(queue string, it *item) record.Record {
	r := record.Record{Kind: record.KindPut, Queue: queue, Key: it.key, Priority: uint8(it.prio()), Attempts: it.attempts}
	if it.ext != nil {
		r.LastError = it.ext.lastError
	}
	switch it.state {
	case Delayed:
		r.State, r.NotBefore = record.StateDelayed, it.at
	case Parked:
		r.State = record.StateParked
	default:
		r.State, r.PendingSince = record.StatePending, it.at
	}
	return r
}

// SetSink replaces the sink (recovery restores with none).
func (q *Queue) SetSink(s Sink) {
	if s == nil {
		s = func(*record.Record) {}
	}
	q.sink = s
}

// Restore loads a stored record during recovery, before any other call.
// Call Settle when every record is loaded. It never reports to the sink: the
// log already holds what it replays.
func (q *Queue) Restore(r *record.Record) {
	if q.items.get(r.Key) != nil {
		sink := q.sink
		q.sink = func(*record.Record) {}
		q.Forget(r.Key)
		q.sink = sink
	}
	if r.Kind != record.KindPut {
		return
	}
	it := &item{key: r.Key, pf: r.Priority, attempts: r.Attempts, hidx: -1, at: r.PendingSince}
	if r.LastError != "" {
		it.ext = &itemExt{lastError: r.LastError}
	}
	q.items.put(it)
	switch r.State {
	case record.StateDelayed:
		q.toDelayed(it, r.NotBefore)
	case record.StateParked:
		it.state = Parked
		q.parked++
	default:
		it.state = Pending
		q.pending++
		// In log order, which is nearly always pending_since order:
		// Settle can then skip the sort.
		q.restored = append(q.restored, it)
		// A replicated queue's follower restores for as long as it
		// follows, and every record that replaces a key leaves its old
		// item here: dropped now and then, so the list stays near the
		// number of pending keys (a recovery that replaces keys often pays
		// the same small cost).
		if len(q.restored) > 2*q.pending+1024 {
			q.restored = slices.DeleteFunc(q.restored, func(it *item) bool { return it.state != Pending })
		}
	}
}

// Settle finishes a restore at time now: delayed keys already due become
// pending since their not_before, and every pending key enters its ring in
// order of pending_since, as if the queue had never stopped.
func (q *Queue) Settle(now int64) {
	ps := make([]*item, 0, q.pending)
	for _, it := range q.restored {
		// A key replaced by a later record left its old item behind, absent.
		if it.state == Pending {
			ps = append(ps, it)
		}
	}
	q.restored = nil
	for q.timers.len() > 0 && q.timers.min().at <= now {
		it := q.timers.min().it
		q.timers.remove(it)
		q.delayed--
		it.state = Pending // since its not_before, already in it.at
		q.pending++
		ps = append(ps, it)
	}
	byAge := func(a, b *item) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	}
	if !slices.IsSortedFunc(ps, byAge) {
		slices.SortFunc(ps, byAge)
	}
	for i := range q.ready {
		q.ready[i] = ring{rank: i}
	}
	for _, it := range ps {
		q.ready[it.prio().rank()].push(it)
	}
}

// EachStep calls f with the stored state of the keys in the next stretch of
// the key table, starting at cursor 0, and returns the next cursor (-1 when
// done) and a generation. A snapshot walks a queue in steps, releasing the
// queue's lock in between; if the generation changes between two steps the
// table was resized and the walk must start again from 0 (records visited
// twice are harmless: each states a key's whole state).
func (q *Queue) EachStep(cursor, n int, f func(*record.Record)) (next int, gen uint64) {
	next, gen = q.items.eachFrom(cursor, n, func(it *item) {
		r := stored(q.name, it)
		f(&r)
	})
	if next >= len(q.items.slots) {
		next = -1
	}
	return next, gen
}

// Each calls f with the stored state of every key, for a snapshot. It stops
// early if f returns false.
func (q *Queue) Each(f func(*record.Record) bool) {
	q.items.each(func(it *item) bool {
		r := stored(q.name, it)
		return f(&r)
	})
}

// View is a copy of one key's state, for Inspect and List.
type View struct {
	Key            string
	State          State
	Dirty          bool
	Attempts       uint32
	LastError      string
	PendingSince   int64 // 0 unless pending or leased
	NotBefore      int64 // 0 unless delayed
	Worker         string
	LeasedAt       int64 // 0 unless leased: when this lease began (Extend keeps it)
	LeaseExpiresAt int64 // 0 unless leased
	Announcements  uint32
	Priority       Priority
}

// Inspect returns key's view; State is Absent when the queue holds nothing.
func (q *Queue) Inspect(key string) View {
	it := q.items.get(key)
	if it == nil {
		return View{Key: key, State: Absent}
	}
	return view(it)
}

func view(it *item) View {
	v := View{Key: it.key, State: it.state, Dirty: it.dirty(), Attempts: it.attempts, Announcements: uint32(it.announced), Priority: it.prio()}
	if it.ext != nil {
		v.LastError = it.ext.lastError
	}
	switch it.state {
	case Pending:
		v.PendingSince = it.at
	case Delayed:
		v.NotBefore = it.at
	case Leased:
		v.PendingSince = it.at
		v.Worker = it.ext.worker
		v.LeasedAt = it.ext.leaseStart
		v.LeaseExpiresAt = it.ext.expires
	}
	return v
}

// List returns up to limit views in key order, of keys after `after`, in
// state (0 for all). more reports whether keys remain after the last one.
// It scans every key, or for leased and delayed keys the timer heap, which
// holds them and nothing else: listing is for operators, not for the hot
// path, but a dashboard lists the leases of a queue of a million pending
// keys every second.
func (q *Queue) List(state State, after string, limit int) (views []View, more bool) {
	var its []*item
	keep := func(it *item) bool {
		if it.key > after && (state == 0 || it.state == state) {
			its = append(its, it)
		}
		return true
	}
	if state == Leased || state == Delayed {
		for _, e := range q.timers.e {
			keep(e.it)
		}
	} else {
		q.items.each(keep)
	}
	slices.SortFunc(its, func(a, b *item) int { return strings.Compare(a.key, b.key) })
	if len(its) > limit {
		its, more = its[:limit], true
	}
	views = make([]View, len(its))
	for i, it := range its {
		views[i] = view(it)
	}
	return views, more
}

// Stats is a queue's state counts and counters at one moment.
type Stats struct {
	Counters
	Pending, Delayed, Leased, Dirty, Parked int
	// OldestPending and LongestLease are ages in nanoseconds (0 if none).
	OldestPending, LongestLease int64
	// UnfinishedWork sums the ages of live leases, in nanoseconds.
	UnfinishedWork int64
	// LeasedBy counts the live leases per worker name (nil when none).
	LeasedBy map[string]int
}

// Stats returns the queue's counts at now.
func (q *Queue) Stats(now int64) Stats {
	s := Stats{Counters: q.stats, Pending: q.pending, Delayed: q.delayed, Leased: q.leased, Dirty: q.dirty, Parked: q.parked}
	for i := range q.ready {
		if it := q.ready[i].front(); it != nil && now-it.at > s.OldestPending {
			s.OldestPending = now - it.at
		}
	}
	if q.leased > 0 {
		for _, e := range q.timers.e {
			if it := e.it; it.state == Leased {
				age := now - it.ext.leaseStart
				s.UnfinishedWork += age
				s.LongestLease = max(s.LongestLease, age)
				if s.LeasedBy == nil {
					s.LeasedBy = map[string]int{}
				}
				s.LeasedBy[it.ext.worker]++
			}
		}
	}
	return s
}
