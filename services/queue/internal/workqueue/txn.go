package workqueue

// A transaction makes a group of calls undoable: the broker applies an
// operation, writes its records, and undoes the operation if the write is
// refused (a full disk), so that an error means nothing changed, in memory
// as on disk. Between Begin and Commit or Rollback the queue keeps, for
// every item it changes, the item as it was before its first change in the
// transaction, and the counters at Begin.
//
// Rollback puts every item back as it was, in the table and the timer heap.
// The rings need nothing: a transaction only pushes onto them, a slot is live
// only while its item is pending there at that position, so an item put back
// makes what the transaction pushed for it stale, and its old slot is live
// again (nothing popped it). Lease pops rings and is therefore not allowed
// inside a transaction; it writes nothing, so it never needs one.

type txn struct {
	active bool
	undo   []undo
	counts [5]int
	stats  Counters
}

// undo is one item as it was before a change.
type undo struct {
	it      *item
	prev    item
	ext     itemExt // *prev.ext, when prev.ext is set
	created bool    // the item did not exist before
}

// Begin starts a transaction. Calls until Commit or Rollback can be undone.
func (q *Queue) Begin() {
	if q.tx.active {
		panic("workqueue: Begin inside a transaction")
	}
	q.tx.active = true
	q.tx.counts = [5]int{q.pending, q.delayed, q.leased, q.dirty, q.parked}
	q.tx.stats = q.stats
}

// Commit ends the transaction, keeping its changes.
func (q *Queue) Commit() {
	q.endTxn()
}

// Rollback ends the transaction, undoing every change made since Begin.
func (q *Queue) Rollback() {
	u := q.tx.undo
	// Out of the timer heap first: each item goes back in below if it was
	// there at Begin. (Equal deadlines may then come out in another order;
	// Advance orders what falls due by deadline and key itself.)
	for i := range u {
		if u[i].it.hidx >= 0 {
			q.timers.remove(u[i].it)
		}
	}
	// Latest change first, so the value left is the one before the first
	// change; the table follows each step (an item is in the table exactly
	// when its state is not Absent).
	for i := len(u) - 1; i >= 0; i-- {
		it := &u[i]
		in, want := it.it.state != Absent, !it.created && it.prev.state != Absent
		switch {
		case in && !want:
			q.items.del(it.it)
		case !in && want:
			q.items.put(it.it)
		}
		if it.created {
			it.it.state = Absent
			continue
		}
		*it.it = it.prev
		it.it.hidx = -1
		if it.it.ext != nil {
			*it.it.ext = it.ext
		}
	}
	// Earliest record of each item: the entry it had at Begin.
	first := make(map[*item]bool, len(u))
	for i := range u {
		it := u[i].it
		if first[it] {
			continue
		}
		first[it] = true
		if !u[i].created && u[i].prev.hidx >= 0 {
			q.timers.push(it)
		}
	}
	c := q.tx.counts
	q.pending, q.delayed, q.leased, q.dirty, q.parked = c[0], c[1], c[2], c[3], c[4]
	q.stats = q.tx.stats
	q.endTxn()
}

func (q *Queue) endTxn() {
	clear(q.tx.undo)
	if cap(q.tx.undo) > 4096 {
		q.tx.undo = nil // a batch of 10,000 keys need not keep its record
	}
	q.tx.undo = q.tx.undo[:0]
	q.tx.active = false
}

// touch records it before a change, inside a transaction.
func (q *Queue) touch(it *item) {
	if !q.tx.active {
		return
	}
	u := undo{it: it, prev: *it}
	if it.ext != nil {
		u.ext = *it.ext
	}
	q.tx.undo = append(q.tx.undo, u)
}

// created records a new item, inside a transaction.
func (q *Queue) created(it *item) {
	if q.tx.active {
		q.tx.undo = append(q.tx.undo, undo{it: it, created: true})
	}
}
