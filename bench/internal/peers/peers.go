// Package peers puts Baton and the queues a user might pick instead of it
// (client-go's in-process workqueue, NATS JetStream, a queue built directly
// on etcd) behind one small interface, and runs the side-by-side workloads
// against any of them: the Add→Lease→Ack cycle, collapse, change while
// leased, and a crash (SIGKILL mid-cycle, restart, drain). For the crash,
// restart and memory workloads the NATS and etcd servers run in a child
// process (Proc, ServeMain) that can be killed apart from the bench.
package peers

import (
	"context"
	"time"
)

// Leased is one key a worker holds, with the contender's handle on it.
type Leased struct {
	Key    string
	handle any
}

// Queue is what the workloads need from a contender.
type Queue interface {
	// Add announces keys; it returns once the contender acknowledged them.
	Add(ctx context.Context, keys []string) error
	// Lease takes up to max ready keys for worker, waiting up to wait for
	// the first; none is not an error.
	Lease(ctx context.Context, worker string, max int, wait time.Duration) ([]Leased, error)
	// Ack finishes leased keys successfully.
	Ack(ctx context.Context, worker string, ls []Leased) error
	// Close releases the contender.
	Close() error
}

// Leaver is a Queue that keeps something per worker (BatonStream: a work
// stream on which the queue pushes that worker's leases). Leave tells it
// worker will lease no more, so that it hands back what it holds for it.
type Leaver interface {
	Leave(worker string)
}

// leave calls q's Leave, if it has one.
func leave(q Queue, worker string) {
	if l, ok := q.(Leaver); ok {
		l.Leave(worker)
	}
}
