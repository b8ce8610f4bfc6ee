package raftbench

import (
	"context"
	"sync"
)

// Batcher is group commit in front of Raft: callers hand it records, one
// goroutine takes every record waiting at that moment into one proposal and
// submits it without waiting for the previous one to commit (pipelining),
// and each caller is answered when its proposal's outcome is known. While a
// submit blocks (the Raft loop is busy with a fsync), more callers queue up,
// so batches grow with load exactly as the store's fsync groups do.
type Batcher struct {
	in     chan *batchReq
	submit SubmitFunc
	stop   chan struct{}
	wg     sync.WaitGroup
}

// SubmitFunc proposes one entry's records and returns a function that waits
// for its outcome; submit itself should return once the proposal is handed
// to the library, so the next batch can follow before this one commits.
type SubmitFunc func(recs [][]byte) (wait func() error)

type batchReq struct {
	rec  []byte
	done chan error
}

// maxBatchBytes bounds one proposal, well below both libraries' message
// limits, so a burst becomes several entries rather than one huge one.
const maxBatchBytes = 256 << 10

// NewBatcher starts the proposer goroutine.
func NewBatcher(submit SubmitFunc) *Batcher {
	b := &Batcher{in: make(chan *batchReq, 4096), submit: submit, stop: make(chan struct{})}
	b.wg.Add(1)
	go b.run()
	return b
}

// Propose waits for rec's proposal's outcome, or ctx.
func (b *Batcher) Propose(ctx context.Context, rec []byte) error {
	r := &batchReq{rec: rec, done: make(chan error, 1)}
	select {
	case b.in <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return ErrStopped
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Batcher) run() {
	defer b.wg.Done()
	for {
		var first *batchReq
		select {
		case first = <-b.in:
		case <-b.stop:
			return
		}
		batch := []*batchReq{first}
		size := len(first.rec)
	drain:
		for size < maxBatchBytes {
			select {
			case r := <-b.in:
				batch = append(batch, r)
				size += len(r.rec)
			default:
				break drain
			}
		}
		recs := make([][]byte, len(batch))
		for i, r := range batch {
			recs[i] = r.rec
		}
		wait := b.submit(recs)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			err := wait()
			for _, r := range batch {
				r.done <- err
			}
		}()
	}
}

// Close stops the proposer; callers still queued get no answer but their
// context's, which is how a crashed leader looks to them too.
func (b *Batcher) Close() {
	close(b.stop)
	b.wg.Wait()
}
