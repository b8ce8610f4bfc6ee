package workqueue

// ring is the FIFO of one priority's pending keys. Entries are never removed
// from the middle: a key that leaves (forgotten, raised to another priority)
// leaves a stale slot that front skips. A slot is live only if its item is
// still pending at this priority and the item's pos is this slot's absolute
// position, so a key that leaves and comes back is served at its new place.
type ring struct {
	buf  []*item
	off  int    // index of the first unread slot in buf
	base uint64 // absolute position of buf[0]
	rank int
}

func (r *ring) push(it *item) {
	it.pos = uint32(r.base + uint64(len(r.buf)))
	r.buf = append(r.buf, it)
}

// front returns the oldest live entry, dropping stale ones, or nil.
func (r *ring) front() *item {
	for r.off < len(r.buf) {
		it := r.buf[r.off]
		if it.state == Pending && it.prio().rank() == r.rank && it.pos == uint32(r.base+uint64(r.off)) {
			return it
		}
		r.buf[r.off] = nil
		r.off++
	}
	r.compact()
	return nil
}

// pop drops the entry front returned.
func (r *ring) pop() {
	r.buf[r.off] = nil
	r.off++
	r.compact()
}

// compact reclaims the consumed head once it is at least half the buffer,
// so memory follows the live length at amortised O(1) per entry.
func (r *ring) compact() {
	if r.off == 0 || (r.off < 1024 && r.off < len(r.buf)) || r.off*2 < len(r.buf) {
		return
	}
	n := copy(r.buf, r.buf[r.off:])
	clear(r.buf[n:])
	r.buf = r.buf[:n]
	r.base += uint64(r.off)
	r.off = 0
	if cap(r.buf) > 4096 && n < cap(r.buf)/4 {
		r.buf = append(make([]*item, 0, 2*n+16), r.buf...)
	}
}
