package peers

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// ClientGo is k8s.io/client-go's typed rate-limiting workqueue in this
// process: what a controller uses, not durable, no network.
type ClientGo struct {
	q workqueue.TypedRateLimitingInterface[string]
	// mu makes "is something queued, then take it" atomic among this
	// adapter's callers, so Get never blocks (the workqueue has no
	// non-blocking Get).
	mu sync.Mutex
}

// NewClientGo returns an empty queue.
func NewClientGo() *ClientGo {
	return &ClientGo{q: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
}

// Add implements Queue.
func (c *ClientGo) Add(_ context.Context, keys []string) error {
	for _, k := range keys {
		c.q.Add(k)
	}
	return nil
}

// Lease implements Queue by polling Len (every 100 µs) until wait passes.
func (c *ClientGo) Lease(ctx context.Context, _ string, max int, wait time.Duration) ([]Leased, error) {
	deadline := time.Now().Add(wait)
	for {
		c.mu.Lock()
		var out []Leased
		for len(out) < max && c.q.Len() > 0 {
			k, _ := c.q.Get()
			out = append(out, Leased{Key: k})
		}
		c.mu.Unlock()
		if len(out) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return out, nil
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Ack implements Queue: Forget (reset the rate limiter) and Done.
func (c *ClientGo) Ack(_ context.Context, _ string, ls []Leased) error {
	for _, l := range ls {
		c.q.Forget(l.Key)
		c.q.Done(l.Key)
	}
	return nil
}

// Close implements Queue.
func (c *ClientGo) Close() error {
	c.q.ShutDown()
	return nil
}
