package manager

import (
	"sync"
	"sync/atomic"
)

// pool runs reconciles on goroutines that outlive them. A reconcile goes
// deep (gRPC's header encoding, JSON), and a goroutine started for each one
// grew its stack from the minimum, copying it twice or more, every time: in
// the 10,000-ReplicaSet cold start's profile that copying was 9% of the
// worker's CPU. A goroutine that stays keeps the stack it grew (until the
// garbage collector shrinks an idle one).
type pool struct {
	jobs chan func() // unbuffered: a job never waits behind a busy goroutine
	wg   *sync.WaitGroup
	// extra counts the jobs that found no idle goroutine and got one of
	// their own.
	extra atomic.Int64
}

// newPool starts n goroutines, counted in wg until close.
func newPool(n int, wg *sync.WaitGroup) *pool {
	p := &pool{jobs: make(chan func()), wg: wg}
	for range n {
		wg.Go(func() {
			for f := range p.jobs {
				f()
			}
		})
	}
	return p
}

// run runs f on an idle goroutine of the pool, or on a new one (counted in
// wg) when none is idle, so that f never waits. The flow control keeps the
// jobs at most the pool's size, but a goroutine that has just sent its ack
// may not be back waiting when the next lease arrives, and a cancelled
// reconcile may still be running when its key's next lease does.
func (p *pool) run(f func()) {
	select {
	case p.jobs <- f:
	default:
		p.extra.Add(1)
		p.wg.Go(f)
	}
}

// close lets the pool's goroutines end once their jobs are done. run must
// not be called after it.
func (p *pool) close() { close(p.jobs) }
