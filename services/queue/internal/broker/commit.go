package broker

// The commit protocol every change follows: lock the queue (lock applies
// due deadlines first), begin a workqueue transaction, make the change,
// put the records it produced in line on the journal while still holding
// the lock (so the log holds each key's changes in their order), unlock,
// and wait for the records outside the lock. A refused write rolls the
// transaction back: nobody ever sees a change that is not in the log.

import (
	"context"
	"slices"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
)

// abort ends an operation begun on qs that changed nothing.
func (b *Broker) abort(qs *queueState, pendingBefore int) {
	qs.q.Rollback()
	b.unlock(qs, pendingBefore)
}

// advance applies due deadlines (delayed keys become ready, leases lapse)
// in a transaction of their own: if their records are refused, they are
// undone and tried again by the next operation or the timer.
// Keys it makes ready wake waiting Leases: an operation that begins here
// counts what is pending only after it (pendingBefore), so these keys
// would wake no one there, and the queue's timer, firing later, finds
// nothing due.
func (b *Broker) advance(qs *queueState) {
	qs.q.Begin()
	ready := qs.q.Advance(time.Now().UnixNano())
	if len(qs.buf) == 0 {
		qs.q.Commit()
		qs.wake(ready)
		return
	}
	_, err := b.j.Append(qs.ver, qs.buf) // expiry records need no waiter
	qs.buf = qs.buf[:0]
	if err != nil {
		qs.q.Rollback()
		qs.stalled = true
		return
	}
	qs.q.Commit()
	qs.stalled = false
	qs.wake(ready)
}

// wake wakes up to n waiting Leases, the longest-waiting first, each for a
// key that became ready. qs.mu is held. One that finds the key taken
// waits again; one that leaves without looking passes it on (lease).
func (qs *queueState) wake(n int) {
	for ; n > 0 && len(qs.waitq) > 0; n-- {
		qs.waitq[0] <- struct{}{} // buffered, and sent to once: never blocks
		qs.waitq[0] = nil
		qs.waitq = qs.waitq[1:]
	}
	if len(qs.waitq) == 0 {
		qs.waitq = nil // let the backing array go
	}
}

// unwait takes ch out of qs.waitq; false if it was woken (no longer in
// it). qs.mu is held.
func (qs *queueState) unwait(ch chan struct{}) bool {
	for i, c := range qs.waitq {
		if c == ch {
			qs.waitq = slices.Delete(qs.waitq, i, i+1)
			return true
		}
	}
	return false
}

// unlock ends an operation that changed nothing stored (reads, Lease,
// Extend): it wakes waiters if keys became ready, re-arms the timer and
// releases the locks.
func (b *Broker) unlock(qs *queueState, pendingBefore int) {
	qs.wake(qs.q.PendingCount() - pendingBefore)
	b.reschedule(qs)
	qs.mu.Unlock()
	b.mu.RUnlock()
}

// begin starts an operation that changes stored state, on a queue from
// lock; end it with commit.
func (qs *queueState) begin() (pendingBefore int, existed bool) {
	qs.q.Begin()
	return qs.q.PendingCount(), qs.exists
}

// commit writes the operation's records and keeps its changes, or, if the
// log refuses them, undoes every one; then it unlocks. The returned batch is
// durable once Wait returns nil.
func (b *Broker) commit(qs *queueState, pendingBefore int, existed bool) (waiter, error) {
	return b.commitTo(qs, pendingBefore, existed, b.j.Append)
}

// commitTo is commit through appendTo, the journal's Append or AppendLazy.
// An operation that wrote nothing (an Add that collapsed, a Forget of
// nothing, an Ack refused) is answered from memory alone: its batch is a
// confirmation (below), not the latest proposal, whose commit may be
// older than the operation.
func (b *Broker) commitTo(qs *queueState, pendingBefore int, existed bool, appendTo func(format.Version, []byte) (waiter, error)) (waiter, error) {
	wrote := len(qs.buf) > 0
	gen := b.gen.Load() // under the locks: the operation's leadership
	batch, err := appendTo(qs.ver, qs.buf)
	qs.buf = qs.buf[:0]
	if err != nil {
		qs.q.Rollback()
		qs.exists = existed
	} else {
		qs.q.Commit()
	}
	b.unlock(qs, pendingBefore)
	if err == nil && !wrote {
		batch = confirmation{b, gen}
	}
	return batch, err
}

// A confirmation is what an answer given from memory alone waits for.
// An operation that writes an entry learns from the entry's commit that
// this member still led when it ran: a majority took the entry in its
// term, so no later leader lacks the state the operation read. One that
// writes nothing has no such proof, and a leader frozen (or cut off) while
// the others elected another and changed the queue still believes it
// leads for a moment after it resumes: its memory would answer an Add of
// a key the new leader has forgotten "collapsed", which acknowledges an
// Add that never happened. So the answer waits, as a read's does
// (settled), for a majority to confirm that this member leads, in the
// leadership gen the operation ran in, and for everything it saw to be
// committed. On a single member it is the latest group commit alone.
type confirmation struct {
	b   *Broker
	gen uint64
}

func (c confirmation) Wait(ctx context.Context) error { return c.b.settled(ctx, c.gen, true) }
