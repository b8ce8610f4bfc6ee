package workqueue

import "hash/maphash"

// table indexes a queue's items by key: open addressing with linear probing
// over a slice of item pointers, plus one tag byte per slot (7 bits of the
// hash) so a probe touches an item only when its tag matches. It costs about
// 9 bytes a slot, 11 to 18 a key, where a Go map[string]*item costs about 53
// (a 24-byte slot, control bytes and the slack of its growth): the key
// string already lives in the item, so the table does not keep it twice.
type table struct {
	slots []*item
	tags  []uint8 // 0 empty, 1 deleted, otherwise 0x80 | 7 hash bits
	n     int     // live items
	used  int     // live items plus deleted slots
	gen   uint64  // bumped by every resize: slot positions changed
	seed  maphash.Seed
}

const (
	tagEmpty   = 0
	tagDeleted = 1
)

func (t *table) hash(k string) (uint64, uint8) {
	h := maphash.String(t.seed, k)
	return h, uint8(h>>57) | 0x80
}

func (t *table) len() int { return t.n }

func (t *table) get(k string) *item {
	if t.n == 0 {
		return nil
	}
	h, tag := t.hash(k)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case tagEmpty:
			return nil
		case tag:
			if it := t.slots[i]; it.key == k {
				return it
			}
		}
	}
}

// find returns the item with key k or, when there is none, the slot and tag
// with which putAt inserts it: one probe for an Add of a new key, where get
// and put would walk the same cache lines twice. It makes room first, so the
// slot stays valid until putAt as long as nothing else changes the table.
func (t *table) find(k string) (it *item, slot int, tag uint8) {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.resize()
	}
	h, tag := t.hash(k)
	mask := uint64(len(t.slots) - 1)
	free := -1
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case tagEmpty:
			if free < 0 {
				free = int(i)
			}
			return nil, free, tag
		case tagDeleted:
			if free < 0 {
				free = int(i)
			}
		case tag:
			if it := t.slots[i]; it.key == k {
				return it, -1, 0
			}
		}
	}
}

// putAt inserts it at the slot find returned for its key.
func (t *table) putAt(slot int, tag uint8, it *item) {
	if t.tags[slot] == tagEmpty {
		t.used++
	}
	t.tags[slot], t.slots[slot] = tag, it
	t.n++
}

// put adds it, whose key must not be in the table.
func (t *table) put(it *item) {
	// Keep at most 3/4 of the slots used, so misses stay short.
	if (t.used+1)*4 > len(t.slots)*3 {
		t.resize()
	}
	h, tag := t.hash(it.key)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.tags[i] > tagDeleted {
		i = (i + 1) & mask
	}
	if t.tags[i] == tagEmpty {
		t.used++
	}
	t.tags[i], t.slots[i] = tag, it
	t.n++
}

// del removes it, which must be in the table.
func (t *table) del(it *item) {
	h, tag := t.hash(it.key)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		if t.tags[i] == tag && t.slots[i] == it {
			t.tags[i], t.slots[i] = tagDeleted, nil
			t.n--
			break
		}
	}
	// A mostly empty table shrinks, so a drained queue gives memory back.
	if len(t.slots) > 64 && t.n*8 < len(t.slots) {
		t.resize()
	}
}

// resize rehashes into a table sized for the live items, dropping deleted
// slots.
func (t *table) resize() {
	size := 16
	for size*3 < (t.n+1)*4*2 { // live items fill at most 3/8 after a resize
		size *= 2
	}
	old, oldTags := t.slots, t.tags
	if t.slots == nil {
		t.seed = maphash.MakeSeed()
	}
	t.slots, t.tags, t.n, t.used = make([]*item, size), make([]uint8, size), 0, 0
	t.gen++
	for i, it := range old {
		if oldTags[i] > tagDeleted {
			t.put(it)
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
		if t.tags[i] > tagDeleted {
			f(t.slots[i])
		}
	}
	return end, t.gen
}

// each calls f for every item until f returns false. f must not change the
// table.
func (t *table) each(f func(*item) bool) {
	for i, it := range t.slots {
		if t.tags[i] > tagDeleted && !f(it) {
			return
		}
	}
}
