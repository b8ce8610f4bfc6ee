// Package violation counts breaches of the workqueue contract a controller
// relies on, from the events a benchmark observes: a key announced again
// while a worker holds it must be delivered exactly once more after the ack,
// and never to two workers at once.
package violation

import "sync"

// Counts are the breaches seen.
type Counts struct {
	// Concurrent counts deliveries of a key while another worker held it.
	Concurrent int
	// Unexpected counts deliveries of a key that was not pending: a
	// duplicate (the same announcement delivered twice).
	Unexpected int
	// Lost counts announcements never delivered: a key announced (while
	// held or not) that was still owed a delivery at the end.
	Lost int
}

// Total is every breach.
func (c Counts) Total() int { return c.Concurrent + c.Unexpected + c.Lost }

type state struct {
	holder  string // "" when no worker holds the key
	pending bool   // owed a delivery
	dirty   bool   // announced while held: owed a delivery after the ack
}

// Checker follows each key's state as the contract defines it. Record an
// Ack before sending it to the queue and a delivery after the lease returns:
// then the checker never sees a legitimate handover as an overlap (it may
// miss an overlap whose records interleave, so its Concurrent count is a
// lower bound). Safe for concurrent use.
type Checker struct {
	mu     sync.Mutex
	keys   map[string]*state
	counts Counts
	events int
}

// New returns an empty checker.
func New() *Checker { return &Checker{keys: map[string]*state{}} }

func (c *Checker) key(k string) *state {
	s := c.keys[k]
	if s == nil {
		s = &state{}
		c.keys[k] = s
	}
	return s
}

// Announced records that key was added. It returns whether a worker held it
// then: a change-while-leased event.
func (c *Checker) Announced(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.key(key)
	if s.holder != "" {
		s.dirty = true
		c.events++
		return true
	}
	s.pending = true
	return false
}

// Delivered records that worker leased key.
func (c *Checker) Delivered(key, worker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.key(key)
	switch {
	case s.holder != "" && s.holder != worker:
		// Delivered too early: this delivery answers the announcement
		// made while the other worker held the key.
		c.counts.Concurrent++
		s.dirty = false
	case !s.pending:
		c.counts.Unexpected++
	}
	s.holder, s.pending = worker, false
}

// Acked records that worker finished key (call it before the ack is sent).
// A key announced while held becomes owed once more.
func (c *Checker) Acked(key, worker string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.key(key)
	if s.holder == worker {
		s.holder = ""
	}
	if s.dirty {
		s.pending, s.dirty = true, false
	}
}

// Events is the number of change-while-leased events recorded.
func (c *Checker) Events() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

// Finish returns the counts, treating every key still owed a delivery as
// lost; call it once the queue has been drained.
func (c *Checker) Finish() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	for _, s := range c.keys {
		if s.pending || s.dirty {
			out.Lost++
		}
	}
	return out
}
