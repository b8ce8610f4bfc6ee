package events

import (
	"container/list"
	"time"
)

// maxTracked bounds the objects whose token buckets a Recorder keeps, and
// the events whose stored revision it remembers (client-go keeps as many
// in its LRU caches). Forgetting one costs little: a forgotten object
// starts with a full bucket, a forgotten event costs one read when it
// repeats.
const maxTracked = 4096

// bucket is one object's token bucket: up to burst events at once, one
// more each refill.
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token at now if there is one.
func (b *bucket) take(now time.Time, burst int, refill time.Duration) bool {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(burst), b.tokens+float64(d)/float64(refill))
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// lru maps keys to values, keeping the most recently used max of them.
// It is not safe for concurrent use.
type lru[V any] struct {
	max   int
	order *list.List // of *lruEntry[V], most recent first
	index map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), index: map[string]*list.Element{}}
}

// get returns key's value and marks it used.
func (c *lru[V]) get(key string) (V, bool) {
	if e, ok := c.index[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[V]).val, true
	}
	var zero V
	return zero, false
}

// put sets key's value, marks it used and forgets the least recently used
// key beyond max.
func (c *lru[V]) put(key string, val V) {
	if e, ok := c.index[key]; ok {
		e.Value.(*lruEntry[V]).val = val
		c.order.MoveToFront(e)
		return
	}
	c.index[key] = c.order.PushFront(&lruEntry[V]{key: key, val: val})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.index, last.Value.(*lruEntry[V]).key)
	}
}

// remove forgets key.
func (c *lru[V]) remove(key string) {
	if e, ok := c.index[key]; ok {
		c.order.Remove(e)
		delete(c.index, key)
	}
}

func (c *lru[V]) len() int { return c.order.Len() }
