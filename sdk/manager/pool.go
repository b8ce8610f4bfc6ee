package manager

// The goroutines reconciles run on, kept with the stacks they grew.

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
	jobs chan func() // unbuffered: a job goes to a goroutine that is free
	wg   *sync.WaitGroup
	// idle counts the goroutines that are free: each has added itself
	// before it receives its next job, and run takes one away before it
	// sends, so a send always has a receiver on its way (one that has
	// finished its job, maybe not yet back at the receive). A select with
	// a default instead gave the job a goroutine of its own whenever the
	// free one was not parked yet: on a busy machine, nearly always.
	idle atomic.Int64
	// extra counts the jobs that found no free goroutine and got one of
	// their own.
	extra atomic.Int64
}

// newPool starts n goroutines, counted in wg until close.
func newPool(n int, wg *sync.WaitGroup) *pool {
	p := &pool{jobs: make(chan func()), wg: wg}
	for range n {
		wg.Go(func() {
			for {
				p.idle.Add(1)
				f, ok := <-p.jobs
				if !ok {
					return
				}
				f()
			}
		})
	}
	return p
}

// run runs f on a free goroutine of the pool, or on a new one (counted in
// wg) when none is free, so that f never waits behind a busy one. The flow
// control keeps the jobs at most the pool's size, but a cancelled
// reconcile may still be running when its key's next lease comes.
func (p *pool) run(f func()) {
	if p.idle.Add(-1) >= 0 {
		p.jobs <- f
		return
	}
	p.idle.Add(1)
	p.extra.Add(1)
	p.wg.Go(f)
}

// close lets the pool's goroutines end once their jobs are done. run must
// not be called after it.
func (p *pool) close() { close(p.jobs) }
