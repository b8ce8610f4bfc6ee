// Package load drives a call from many goroutines for a time or a number of
// items and measures rates and latency percentiles.
package load

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Spec says how to drive a call.
type Spec struct {
	// Callers is the number of goroutines calling concurrently (≥ 1).
	Callers int
	// Duration stops the run after this long (0: no time bound).
	Duration time.Duration
	// Items stops the run once this many items are done (0: no bound); the
	// calls in flight then finish, so a run may overshoot by a batch per
	// caller.
	Items int64
	// Latency records every call's latency.
	Latency bool
}

// Result is what a run did.
type Result struct {
	Calls, Items int64
	Elapsed      time.Duration
	Latencies    []time.Duration // sorted; only with Spec.Latency
}

// CallRate is calls per second.
func (r Result) CallRate() float64 { return float64(r.Calls) / r.Elapsed.Seconds() }

// ItemRate is items per second.
func (r Result) ItemRate() float64 { return float64(r.Items) / r.Elapsed.Seconds() }

// Percentile returns the p-th percentile (0 < p ≤ 100) of the latencies, in
// milliseconds, or 0 if none were recorded.
func (r Result) Percentile(p float64) float64 {
	return Percentile(r.Latencies, p)
}

// Percentile returns the p-th percentile (nearest rank) of sorted, in
// milliseconds.
func Percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// Op is one call by caller number caller; it returns how many items it did.
type Op func(ctx context.Context, caller int) (int, error)

// Run drives op as spec says. The first error stops the run and is returned.
func Run(ctx context.Context, spec Spec, op Op) (Result, error) {
	if spec.Callers < 1 {
		spec.Callers = 1
	}
	if spec.Duration <= 0 && spec.Items <= 0 {
		return Result{}, errors.New("load: a run needs a duration or an item count")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		calls, items atomic.Int64
		mu           sync.Mutex
		lat          []time.Duration
		wg           sync.WaitGroup
		deadline     time.Time
	)
	start := time.Now()
	if spec.Duration > 0 {
		deadline = start.Add(spec.Duration)
	}
	for c := range spec.Callers {
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				if spec.Items > 0 && items.Load() >= spec.Items {
					break
				}
				t0 := time.Now()
				if !deadline.IsZero() && t0.After(deadline) {
					break
				}
				n, err := op(ctx, c)
				if err != nil {
					if ctx.Err() == nil {
						cancel(err)
					}
					break
				}
				if spec.Latency {
					mine = append(mine, time.Since(t0))
				}
				calls.Add(1)
				items.Add(int64(n))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res := Result{Calls: calls.Load(), Items: items.Load(), Elapsed: time.Since(start)}
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	slices.Sort(lat)
	res.Latencies = lat
	return res, nil
}
