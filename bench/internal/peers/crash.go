package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CrashSpec is how Crash kills and restarts a contender's server.
type CrashSpec struct {
	// Run is how long the cycle runs at least before the kill; it runs on
	// (up to 30 s) until two batches were added and a key acked.
	Run time.Duration
	// Kill SIGKILLs the server (no shutdown of any kind).
	Kill func() error
	// Restart starts the server again on the same data and reconnects the
	// queue; no call uses the queue meanwhile.
	Restart func(context.Context) error
	// Quiet ends the drain after this long without a delivery (longer than
	// a lease, so keys leased at the kill come back); a queue that counts
	// its Unfinished keys ends it sooner, once that count is 0.
	Quiet time.Duration
}

// CrashResult is what a crash run found. Keys whose Add or Ack call failed
// (in flight at the kill) are uncertain and counted in no other figure.
type CrashResult struct {
	Added   int // keys whose Add was answered OK before the kill
	Acked   int // of which acked (answered OK) before the kill
	Drained int // distinct keys delivered after the restart
	Unsure  int // keys whose Add or Ack failed
	// Lost: added, not acked, never delivered after the restart: work the
	// contender acknowledged and then dropped.
	Lost int
	// Again: acked before the kill, yet delivered again after the restart
	// (an ack the contender had answered but not kept).
	Again int
	// Left: what the contender still counts as unfinished after the drain
	// (kept, yet not delivered); -1 if it cannot count.
	Left int64
}

// Counter is a contender that can count its unfinished (pending or leased)
// keys.
type Counter interface {
	Unfinished(ctx context.Context) (int64, error)
}

// The crash cycle's shape (the numbers baton's reports have used throughout): 2 adders in
// batches of 1000, 4 workers leasing up to 100 keys, so the workers fall
// behind and the kill finds keys pending and leased, not only acked.
const (
	crashAdders, crashBatch   = 2, 1000
	crashWorkers, crashLeases = 4, 100
	crashMaxRun               = 30 * time.Second
)

// Crash runs the cycle against q (see CrashSpec.Run), SIGKILLs the server, stops
// the callers, restarts the server, then drains the queue, and compares
// what was acknowledged before the kill with what came back after it.
func Crash(ctx context.Context, q Queue, spec CrashSpec) (CrashResult, error) {
	var (
		mu                   sync.Mutex
		added, acked, unsure = map[string]bool{}, map[string]bool{}, map[string]bool{}
		next                 int
		wg                   sync.WaitGroup
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for range crashAdders {
		wg.Go(func() {
			for runCtx.Err() == nil {
				mu.Lock()
				first := next
				next += crashBatch
				mu.Unlock()
				ks := keys("crs/", first, crashBatch)
				err := q.Add(runCtx, ks)
				mu.Lock()
				for _, k := range ks {
					if err == nil {
						added[k] = true
					} else {
						unsure[k] = true
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	for w := range crashWorkers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for runCtx.Err() == nil {
				ls, err := q.Lease(runCtx, worker, crashLeases, 20*time.Millisecond)
				if err != nil {
					return
				}
				if len(ls) == 0 {
					continue
				}
				err = q.Ack(runCtx, worker, ls)
				mu.Lock()
				for _, l := range ls {
					if err == nil {
						acked[l.Key] = true
					} else {
						unsure[l.Key] = true
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	// The cycle runs; the kill lands mid-flight, once some Adds and Acks
	// were answered (a slow contender's first batch of 1000 can take longer
	// than Run), or at crashMaxRun.
	start := time.Now()
	for ctx.Err() == nil && time.Since(start) < crashMaxRun {
		mu.Lock()
		progress := len(added) >= 2*crashBatch && len(acked) > 0
		mu.Unlock()
		if progress && time.Since(start) >= spec.Run {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	kerr := spec.Kill()
	stop()
	wg.Wait()
	if kerr != nil {
		return CrashResult{}, fmt.Errorf("kill: %w", kerr)
	}
	if err := ctx.Err(); err != nil {
		return CrashResult{}, err
	}
	if err := spec.Restart(ctx); err != nil {
		return CrashResult{}, fmt.Errorf("restart: %w", err)
	}
	drained, left, err := drainAfterCrash(ctx, q, spec.Quiet)
	if err != nil {
		return CrashResult{}, err
	}
	r := CrashResult{Added: len(added), Drained: len(drained), Unsure: len(unsure), Left: left}
	for k := range added {
		switch {
		case unsure[k]:
		case acked[k]:
			r.Acked++
		case !drained[k]:
			r.Lost++
		}
	}
	for k := range acked {
		if drained[k] && !unsure[k] {
			r.Again++
		}
	}
	return r, nil
}

// drainAfterCrash leases and acks until the queue counts no unfinished key
// or quiet passes without a delivery; it gives up with an error if keys
// keep coming for two minutes. It returns the keys delivered and what the
// queue still counts (-1 if it cannot).
func drainAfterCrash(ctx context.Context, q Queue, quiet time.Duration) (map[string]bool, int64, error) {
	drained := map[string]bool{}
	counter, counts := q.(Counter)
	left := int64(-1)
	deadline := time.Now().Add(2 * time.Minute)
	last := time.Now()
	for {
		ls, err := q.Lease(ctx, "drain", 1000, 300*time.Millisecond)
		if err != nil {
			return nil, 0, fmt.Errorf("drain: %w", err)
		}
		if len(ls) > 0 {
			for _, l := range ls {
				drained[l.Key] = true
			}
			if err := q.Ack(ctx, "drain", ls); err != nil {
				return nil, 0, fmt.Errorf("drain: %w", err)
			}
			last = time.Now()
			if time.Now().After(deadline) {
				return nil, 0, errors.New("drain: keys still delivered two minutes after the restart")
			}
			continue
		}
		if counts {
			if left, err = counter.Unfinished(ctx); err != nil {
				return nil, 0, fmt.Errorf("drain: %w", err)
			}
			if left == 0 {
				return drained, 0, nil
			}
		}
		if time.Since(last) >= quiet {
			return drained, left, nil
		}
	}
}
