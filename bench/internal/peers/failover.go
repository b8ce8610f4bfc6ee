package peers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// FailoverSpec is how Failover kills a replicated contender's leader and
// brings the member back.
type FailoverSpec struct {
	// Kills is how many times the leader is killed.
	Kills int
	// KillLeader SIGKILLs the member that leads now and returns how to
	// start it again on its data.
	KillLeader func(context.Context) (restart func(context.Context) error, err error)
	// Settled returns once every member serves and they agree on a
	// leader, so that the next kill finds a whole cluster.
	Settled func(context.Context) error
	// Between is how long the load runs between a member's return and the
	// next kill.
	Between time.Duration
	// Quiet ends the drain after this long without a delivery (see
	// CrashSpec.Quiet).
	Quiet time.Duration
}

// FailoverResult is what a failover run found.
type FailoverResult struct {
	// Takeover is, for each kill, the time from the kill to the first Add
	// sent after it that a surviving member answered OK.
	Takeover []time.Duration
	Added    int // keys whose Add was answered OK
	Acked    int // of which acked (answered OK) during the run
	Drained  int // distinct keys delivered in the drain after the last kill
	// Unsure: keys whose Add failed, or whose every Ack failed (a lost
	// answer may hide a success); counted in no other figure.
	Unsure int
	// Lost: added, never acked, never delivered in the drain.
	Lost int
	Left int64 // what the queue still counts after the drain; -1 if it cannot
}

// The failover load: the crash workload's shape, in smaller batches so
// that many calls are in flight at each kill.
const (
	failoverAdders, failoverBatch   = 2, 100
	failoverWorkers, failoverLeases = 4, 100
	// failoverCall bounds one call; the contender's client retries within
	// it (a call that outlives an election fails and its keys are unsure).
	failoverCall = 10 * time.Second
	// failoverProbe bounds one try of the takeover's probe.
	failoverProbe = 500 * time.Millisecond
)

// Failover runs the cycle against q, a client of every member, kills the
// leader spec.Kills times under that load and restarts it each time, then
// drains the queue and checks that every key whose Add was answered OK was
// acked or delivered. After each kill a probe adds one key at a time until
// a survivor answers OK: that times the takeover.
func Failover(ctx context.Context, q Queue, spec FailoverSpec) (FailoverResult, error) {
	var (
		mu                   sync.Mutex
		added, acked         = map[string]bool{}, map[string]bool{}
		addUnsure, ackFailed = map[string]bool{}, map[string]bool{}
		next                 int
		wg                   sync.WaitGroup
		takeover             []time.Duration
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(runCtx, failoverCall)
		defer cancel()
		return f(cctx)
	}
	pause := func() {
		select {
		case <-runCtx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	adder := func() {
		for runCtx.Err() == nil {
			mu.Lock()
			first := next
			next += failoverBatch
			mu.Unlock()
			ks := keys("fo/", first, failoverBatch)
			err := call(func(ctx context.Context) error { return q.Add(ctx, ks) })
			mu.Lock()
			for _, k := range ks {
				if err == nil {
					added[k] = true
				} else {
					addUnsure[k] = true
				}
			}
			mu.Unlock()
			if err != nil {
				pause()
			}
		}
	}
	// probe times one takeover: from killed, it adds one new key at a
	// time, each try bounded by failoverProbe so that an answer lost with
	// the killed member does not hold it up, until a survivor answers OK.
	probe := func(killed time.Time) (time.Duration, bool) {
		for ctx.Err() == nil && time.Since(killed) < 30*time.Second {
			mu.Lock()
			k := keys("probe/", next, 1)
			next++
			mu.Unlock()
			pctx, cancel := context.WithTimeout(ctx, failoverProbe)
			err := q.Add(pctx, k)
			cancel()
			mu.Lock()
			if err == nil {
				added[k[0]] = true
			} else {
				addUnsure[k[0]] = true
			}
			mu.Unlock()
			if err == nil {
				return time.Since(killed), true
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
		return 0, false
	}
	for range failoverAdders {
		wg.Go(adder)
	}
	for w := range failoverWorkers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for runCtx.Err() == nil {
				var ls []Leased
				err := call(func(ctx context.Context) (err error) {
					ls, err = q.Lease(ctx, worker, failoverLeases, 20*time.Millisecond)
					return err
				})
				if err != nil {
					pause()
					continue
				}
				if len(ls) == 0 {
					continue
				}
				err = call(func(ctx context.Context) error { return q.Ack(ctx, worker, ls) })
				mu.Lock()
				for _, l := range ls {
					if err == nil {
						acked[l.Key] = true
					} else {
						ackFailed[l.Key] = true
					}
				}
				mu.Unlock()
				if err != nil {
					pause()
				}
			}
		})
	}
	fail := func(err error) (FailoverResult, error) {
		stop()
		wg.Wait()
		return FailoverResult{}, err
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for kill := range spec.Kills {
		if !wait(spec.Between) {
			return fail(ctx.Err())
		}
		restart, err := spec.KillLeader(ctx)
		if err != nil {
			return fail(fmt.Errorf("kill %d: %w", kill+1, err))
		}
		took, ok := probe(time.Now())
		if !ok {
			return fail(fmt.Errorf("kill %d: no Add answered OK within 30 s", kill+1))
		}
		takeover = append(takeover, took)
		// The killed member comes back only now: the survivors took over
		// without it.
		if err := restart(ctx); err != nil {
			return fail(fmt.Errorf("restart after kill %d: %w", kill+1, err))
		}
		if err := spec.Settled(ctx); err != nil {
			return fail(fmt.Errorf("after kill %d: %w", kill+1, err))
		}
	}
	stop()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return FailoverResult{}, err
	}
	drained, left, err := drainAfterCrash(ctx, q, spec.Quiet)
	if err != nil {
		return FailoverResult{}, err
	}
	r := FailoverResult{Takeover: slices.Clone(takeover), Added: len(added), Drained: len(drained), Left: left}
	// Keys are never added twice, so no key is both added and addUnsure.
	r.Unsure = len(addUnsure)
	for k := range added {
		switch {
		case acked[k]:
			r.Acked++
		case drained[k]:
		case ackFailed[k]:
			r.Unsure++
		default:
			r.Lost++
		}
	}
	return r, nil
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of ds by the nearest rank;
// 0 for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
