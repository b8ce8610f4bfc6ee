package broker

// Timers: each queue has one, set for its next deadline (a delayed key
// becoming ready, a lease lapsing), which applies what is due through the
// commit protocol.

import "time"

func (b *Broker) reschedule(qs *queueState) {
	next, ok := qs.q.NextDeadline()
	if !ok {
		return
	}
	if qs.stalled {
		next = max(next, time.Now().Add(time.Second).UnixNano())
	}
	if next == qs.timerAt {
		return
	}
	qs.timerAt = next
	d := time.Duration(next - time.Now().UnixNano())
	if qs.timer == nil {
		qs.timer = time.AfterFunc(d, func() { b.fire(qs) })
		return
	}
	qs.timer.Reset(d)
}

// fire applies due deadlines: delayed keys become ready, leases lapse.
func (b *Broker) fire(qs *queueState) {
	select {
	case <-b.closed:
		return
	default:
	}
	b.mu.RLock()
	if !b.leading.Load() || b.queues[qs.q.Name()] != qs {
		// A queue of an ended leadership, discarded by Follow: its state
		// is not the log's, and nothing of it may be written.
		b.mu.RUnlock()
		return
	}
	qs.mu.Lock()
	before := qs.q.PendingCount()
	qs.timerAt = 0
	b.advance(qs)
	b.unlock(qs, before)
}
