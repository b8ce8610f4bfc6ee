package workqueue

import "hash/maphash"

// table indexes a queue's items by key: open addressing with linear probing
// over a slice of item pointers, plus 32 bits of each key's hash per slot. A
// probe touches an item only when the stored hash matches, and a resize
// moves items by their stored hashes without touching them: growing to
// millions of keys used to spend most of its time fetching each item from
// memory to rehash its key. It costs 12 bytes a slot (16 to 32 a key, at
// the table's 3/8 to 3/4 fill), where a Go map[string]*item costs about 53
// (a 24-byte slot, control bytes and the slack of its growth): the key
// string already lives in the item, so the table does not keep it twice.
type table struct {
	slots []*item
	hs    []uint32 // hashEmpty, hashDeleted, or the key's 32-bit hash (at least 2)
	n     int      // live items
	used  int      // live items plus deleted slots
	gen   uint64   // bumped by every resize: slot positions changed
	seed  maphash.Seed
}

const (
	hashEmpty   = 0
	hashDeleted = 1
)

// hash is the key's 32-bit hash: its slot is hash & mask, and the rest of
// its bits tell keys of the same slot apart before their strings are
// compared. 0 and 1 are moved out of the way of hashEmpty and hashDeleted.
func (t *table) hash(k string) uint32 {
	h := uint32(maphash.String(t.seed, k) >> 32)
	if h <= hashDeleted {
		h += 2
	}
	return h
}

func (t *table) len() int { return t.n }

func (t *table) get(k string) *item {
	if t.n == 0 {
		return nil
	}
	h := t.hash(k)
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.hs[i] {
		case hashEmpty:
			return nil
		case h:
			if it := t.slots[i]; it.key == k {
				return it
			}
		}
	}
}

// find returns the item with key k or, when there is none, the slot and hash
// with which putAt inserts it: one probe for an Add of a new key, where get
// and put would walk the same cache lines twice. It makes room first, so the
// slot stays valid until putAt as long as nothing else changes the table.
func (t *table) find(k string) (it *item, slot int, h uint32) {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.resize()
	}
	h = t.hash(k)
	mask := uint32(len(t.slots) - 1)
	free := -1
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.hs[i] {
		case hashEmpty:
			if free < 0 {
				free = int(i)
			}
			return nil, free, h
		case hashDeleted:
			if free < 0 {
				free = int(i)
			}
		case h:
			if it := t.slots[i]; it.key == k {
				return it, -1, 0
			}
		}
	}
}

// putAt inserts it, of hash h, at a free slot of its probe sequence (the one
// find returned).
func (t *table) putAt(slot int, h uint32, it *item) {
	if t.hs[slot] == hashEmpty {
		t.used++
	}
	t.hs[slot], t.slots[slot] = h, it
	t.n++
}

// put adds it, whose key must not be in the table.
func (t *table) put(it *item) {
	// Keep at most 3/4 of the slots used, so misses stay short.
	if (t.used+1)*4 > len(t.slots)*3 {
		t.resize()
	}
	t.place(t.hash(it.key), it)
}

// place puts it, of hash h, in the first free slot of its probe sequence;
// the table has room.
func (t *table) place(h uint32, it *item) {
	mask := uint32(len(t.slots) - 1)
	i := h & mask
	for t.hs[i] > hashDeleted {
		i = (i + 1) & mask
	}
	t.putAt(int(i), h, it)
}

// del removes it, which must be in the table.
func (t *table) del(it *item) {
	h := t.hash(it.key)
	mask := uint32(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		if t.hs[i] == h && t.slots[i] == it {
			t.hs[i], t.slots[i] = hashDeleted, nil
			t.n--
			break
		}
	}
	// A mostly empty table shrinks, so a drained queue gives memory back.
	if len(t.slots) > 64 && t.n*8 < len(t.slots) {
		t.resize()
	}
}

// resize moves the live items into a table sized for them, dropping deleted
// slots. It reads only the stored hashes, never the items.
func (t *table) resize() {
	// Live items fill at most half the new table: growth from 3/4 full
	// doubles it. (Asking for 3/8 made a table that had just reached 3/4
	// quadruple, one key past 3/8 of the doubled size.)
	size := 16
	for size < (t.n+1)*2 {
		size *= 2
	}
	old, oldHs := t.slots, t.hs
	if t.slots == nil {
		t.seed = maphash.MakeSeed()
	}
	t.slots, t.hs, t.n, t.used = make([]*item, size), make([]uint32, size), 0, 0
	t.gen++
	for i, it := range old {
		if h := oldHs[i]; h > hashDeleted {
			t.place(h, it)
		}
	}
}

// eachFrom calls f for the items in slots [from, from+n) and returns the
// next slot (len(slots) at the end) and the table's generation, so a caller
// can walk a large table in steps, letting others change it in between: an
// item that stays put is visited exactly once as long as the generation
// holds (only a resize moves items between slots).
func (t *table) eachFrom(from, n int, f func(*item)) (next int, gen uint64) {
	end := min(from+n, len(t.slots))
	for i := from; i < end; i++ {
		if t.hs[i] > hashDeleted {
			f(t.slots[i])
		}
	}
	return end, t.gen
}

// each calls f for every item until f returns false. f must not change the
// table.
func (t *table) each(f func(*item) bool) {
	for i, it := range t.slots {
		if t.hs[i] > hashDeleted && !f(it) {
			return
		}
	}
}
