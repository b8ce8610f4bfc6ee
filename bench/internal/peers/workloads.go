package peers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/bench/internal/load"
	"github.com/batonrun/baton/bench/internal/violation"
)

// CycleResult is what a cycle run did.
type CycleResult struct {
	Keys     int64 // acked
	Elapsed  time.Duration
	P50, P99 float64 // per round (Add of a batch, then Lease and Ack until as many keys are acked), ms
}

// Rate is acked keys per second.
func (r CycleResult) Rate() float64 { return float64(r.Keys) / r.Elapsed.Seconds() }

// Cycle runs callers goroutines for d, each in rounds: Add batch distinct
// new keys, then Lease (up to what it still owes) and Ack until it has acked
// batch keys (anyone's: the queue is shared). A caller leases at most what
// it owes, so every added key is owed by someone and the run cannot stall;
// a caller that is done leaves (Leaver), so that a queue that pushes keys to
// its workers (BatonStream) hands back those it still holds for it.
// No round starts after d; the rounds in flight may finish until
// CycleGrace(d), when they are abandoned (a slow contender's first round of
// 1000 keys from 64 callers can take minutes). Acked keys count, whole
// rounds or not.
func Cycle(ctx context.Context, q Queue, prefix string, batch, callers int, d time.Duration) (CycleResult, error) {
	outer := ctx
	ctx, cancelT := context.WithTimeout(ctx, CycleGrace(d))
	defer cancelT()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := time.Now().Add(d)
	var (
		acked atomic.Int64
		mu    sync.Mutex
		lat   []time.Duration
		wg    sync.WaitGroup
	)
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%02d", c)
			// A caller that is done hands back what a push queue holds
			// for it: keys others still owe.
			defer leave(q, worker)
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for n := 0; ctx.Err() == nil && time.Now().Before(deadline); n += batch {
				t0 := time.Now()
				if err := q.Add(ctx, keys(fmt.Sprintf("%s%02d/", prefix, c), n, batch)); err != nil {
					if ctx.Err() == nil {
						cancel(fmt.Errorf("add: %w", err))
					}
					return
				}
				for owed := batch; owed > 0; {
					if ctx.Err() != nil {
						return
					}
					ls, err := q.Lease(ctx, worker, owed, 20*time.Millisecond)
					if err == nil && len(ls) > 0 {
						err = q.Ack(ctx, worker, ls)
					}
					if err != nil {
						if ctx.Err() == nil {
							cancel(fmt.Errorf("lease/ack: %w", err))
						}
						return
					}
					owed -= len(ls)
					acked.Add(int64(len(ls)))
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	res := CycleResult{Keys: acked.Load(), Elapsed: time.Since(start)}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return res, err
	}
	if outer.Err() != nil {
		return res, outer.Err()
	}
	slices.Sort(lat)
	res.P50, res.P99 = load.Percentile(lat, 50), load.Percentile(lat, 99)
	return res, nil
}

// CycleGrace is how long Cycle lets the rounds in flight at d finish.
func CycleGrace(d time.Duration) time.Duration { return max(3*d, 10*time.Second) }

func keys(prefix string, first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%07d", prefix, first+i)
	}
	return out
}

// Collapse announces the keys distinct keys announcements times in all
// (batches of 1000, 4 callers) before any worker runs, then drains the
// queue and returns the deliveries: a collapsing queue delivers each key
// once.
func Collapse(ctx context.Context, q Queue, announcements, distinct int) (int, error) {
	ks := keys("col/", 0, distinct)
	const batch = 1000
	var next atomic.Int64
	if _, err := load.Run(ctx, load.Spec{Callers: 4, Items: int64(announcements)}, func(ctx context.Context, _ int) (int, error) {
		first := int(next.Add(batch)) - batch
		if first >= announcements {
			return 0, nil
		}
		n := min(batch, announcements-first)
		b := make([]string, n)
		for i := range b {
			b[i] = ks[(first+i)%distinct]
		}
		return n, q.Add(ctx, b)
	}); err != nil {
		return 0, err
	}
	n := 0
	err := Drain(ctx, q, func(ls []Leased) { n += len(ls) })
	return n, err
}

// Drain leases and acks until two leases in a row, each waiting 300 ms,
// find nothing; seen gets every batch before it is acked.
func Drain(ctx context.Context, q Queue, seen func([]Leased)) error {
	for empty := 0; empty < 2; {
		ls, err := q.Lease(ctx, "drain", 1000, 300*time.Millisecond)
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			empty++
			continue
		}
		empty = 0
		seen(ls)
		if err := q.Ack(ctx, "drain", ls); err != nil {
			return err
		}
	}
	return nil
}

// Changes runs workers that lease keys and, while holding each, announce it
// again, until events such announcements were made; then drains the queue.
// A checker follows the contract: each such key must be delivered exactly
// once more after the ack, never to two workers at once. The keys distinct
// keys are added first. It returns the violations and the events made
// (fewer than asked if the queue ran dry: it lost the announcements). Workers hold their keys for a moment after
// announcing them again, as a reconcile would, so a queue that hands a
// changed key to a second worker gets the chance to.
// hold is how long a worker in Changes keeps its keys after announcing
// them again: the rest of a reconcile.
const hold = 2 * time.Millisecond

func Changes(ctx context.Context, q Queue, events, distinct, workers int) (violation.Counts, int, error) {
	c := violation.New()
	ks := keys("chg/", 0, distinct)
	for _, k := range ks {
		c.Announced(k)
	}
	for i := 0; i < len(ks); i += 1000 {
		if err := q.Add(ctx, ks[i:min(i+1000, len(ks))]); err != nil {
			return violation.Counts{}, 0, err
		}
	}
	var made atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for idle := 0; ctx.Err() == nil && made.Load() < int64(events) && idle < 25; {
				ls, err := q.Lease(ctx, worker, 16, 20*time.Millisecond)
				if err != nil {
					cancel(err)
					return
				}
				// A queue that drops announcements runs dry: stop after
				// half a second without a key.
				idle++
				if len(ls) > 0 {
					idle = 0
				}
				for _, l := range ls {
					c.Delivered(l.Key, worker)
				}
				var again []string
				for _, l := range ls {
					if made.Add(1) <= int64(events) {
						again = append(again, l.Key)
					}
				}
				if len(again) > 0 {
					for _, k := range again {
						c.Announced(k)
					}
					if err := q.Add(ctx, again); err != nil {
						cancel(err)
						return
					}
					// The worker is still reconciling: another worker must
					// not get the key now.
					time.Sleep(hold)
				}
				for _, l := range ls {
					c.Acked(l.Key, worker)
				}
				if len(ls) > 0 {
					if err := q.Ack(ctx, worker, ls); err != nil {
						cancel(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return violation.Counts{}, 0, err
	}
	if err := Drain(ctx, q, func(ls []Leased) {
		for _, l := range ls {
			c.Delivered(l.Key, "drain")
			c.Acked(l.Key, "drain")
		}
	}); err != nil {
		return violation.Counts{}, 0, err
	}
	return c.Finish(), c.Events(), nil
}
