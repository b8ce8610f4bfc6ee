package workqueue

// timerHeap is a min-heap of items by deadline: the delayed keys (deadline =
// not_before) and the leased ones (deadline = lease expiry). A key is in it
// exactly when it is delayed or leased; item.hidx is its index.
//
// Each entry carries its item's deadline, so ordering never dereferences an
// item (a comparison used to fetch two items and, for leases, their
// details). Equal deadlines, which every lease of one Lease call shares, are
// ordered by when the entries went in; Advance sorts what falls due by
// deadline and key itself, so the order in which simultaneous deadlines fire
// stays deterministic (the model-based test relies on it).
type timerHeap struct {
	e   []timerEntry
	seq uint64
}

type timerEntry struct {
	at  int64  // the item's deadline
	seq uint64 // push order, among equal deadlines
	it  *item
}

func (h *timerHeap) len() int { return len(h.e) }

// min returns the entry with the earliest deadline; the heap is not empty.
func (h *timerHeap) min() timerEntry { return h.e[0] }

func (h *timerHeap) push(it *item) {
	it.hidx = int32(len(h.e))
	h.seq++
	h.e = append(h.e, timerEntry{at: it.deadline(), seq: h.seq, it: it})
	h.up(int(it.hidx))
}

func (h *timerHeap) remove(it *item) {
	i := int(it.hidx)
	if i < 0 {
		return
	}
	last := len(h.e) - 1
	if i != last {
		h.swap(i, last)
	}
	h.e[last] = timerEntry{}
	h.e = h.e[:last]
	it.hidx = -1
	if i != last {
		h.fixAt(i)
	}
}

// fix restores the order after its deadline changed.
func (h *timerHeap) fix(it *item) {
	if it.hidx >= 0 {
		h.e[it.hidx].at = it.deadline()
		h.fixAt(int(it.hidx))
	}
}

func (h *timerHeap) fixAt(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *timerHeap) less(i, j int) bool {
	a, b := &h.e[i], &h.e[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (h *timerHeap) swap(i, j int) {
	h.e[i], h.e[j] = h.e[j], h.e[i]
	h.e[i].it.hidx = int32(i)
	h.e[j].it.hidx = int32(j)
}

func (h *timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *timerHeap) down(i0 int) bool {
	i, n := i0, len(h.e)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
