package workqueue

// ring is the FIFO of one priority's pending keys. Entries are never removed
// from the middle: a key that leaves (forgotten, raised to another priority)
// leaves a stale slot that front skips. A slot is live only if its item is
// still pending at this priority and the item's pos is this slot's absolute
// position, so a key that leaves and comes back is served at its new place.
//
// The slots live in fixed blocks, not one slice: a slice of millions of
// pointers regrows by a quarter at a time, copying (and having the garbage
// collector scan) every earlier entry again, which was a tenth of the CPU of
// durable Adds in batches. Blocks are dropped as soon as they are read, so
// memory follows the live length.
type ring struct {
	blocks [][]*item // blocks[0][off] is the first unread slot
	off    int
	n      int    // slots from off to the tail, live or stale
	base   uint64 // absolute position of blocks[0][0]
	rank   int
	spare  []*item // the last block read, reused for the next one needed
}

// ringBlock is the slots per block: 4 KiB of pointers, so an empty queue's
// ring costs little and a long one few blocks.
const ringBlock = 512

func (r *ring) push(it *item) {
	i := r.off + r.n
	b := i / ringBlock
	if b == len(r.blocks) {
		blk := r.spare
		r.spare = nil
		if blk == nil {
			blk = make([]*item, ringBlock)
		}
		r.blocks = append(r.blocks, blk)
	}
	r.blocks[b][i%ringBlock] = it
	it.pos = uint32(r.base + uint64(i))
	r.n++
}

// front returns the oldest live entry, dropping stale ones, or nil.
func (r *ring) front() *item {
	for r.n > 0 {
		it := r.blocks[0][r.off]
		if it.state == Pending && it.prio().rank() == r.rank && it.pos == uint32(r.base+uint64(r.off)) {
			return it
		}
		r.pop()
	}
	return nil
}

// pop drops the entry front returned.
func (r *ring) pop() {
	r.blocks[0][r.off] = nil
	r.off++
	r.n--
	switch {
	case r.n == 0:
		// Empty: the next key goes to the head of the same block (every
		// slot of it is nil again), at the next absolute position, so
		// positions never repeat.
		r.base += uint64(r.off)
		r.off = 0
	case r.off == ringBlock:
		// The head block is read: keep it for the next block needed.
		r.base += ringBlock
		r.off = 0
		r.spare = r.blocks[0]
		r.blocks[0] = nil
		r.blocks = r.blocks[1:]
	}
}
