package workqueue

// timerHeap is a min-heap of items by deadline: the delayed keys (deadline =
// not_before) and the leased ones (deadline = lease expiry). A key is in it
// exactly when it is delayed or leased; item.hidx is its index.
type timerHeap []*item

func (h *timerHeap) push(it *item) {
	it.hidx = int32(len(*h))
	*h = append(*h, it)
	h.up(int(it.hidx))
}

func (h *timerHeap) remove(it *item) {
	i := int(it.hidx)
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	it.hidx = -1
	if i != last {
		h.fixAt(i)
	}
}

func (h *timerHeap) fix(it *item) {
	if it.hidx >= 0 {
		h.fixAt(int(it.hidx))
	}
}

func (h *timerHeap) fixAt(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// less breaks deadline ties by key, so the order in which simultaneous
// deadlines fire is deterministic (the model-based test relies on it).
func (h timerHeap) less(i, j int) bool {
	a, b := h[i], h[j]
	da, db := a.deadline(), b.deadline()
	return da < db || (da == db && a.key < b.key)
}

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = int32(i)
	h[j].hidx = int32(j)
}

func (h timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timerHeap) down(i0 int) bool {
	i, n := i0, len(h)
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
