package raftbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// RecordSize is the queue's typical record (a Put with a short queue name,
// an 11-byte key and no error text is ~60 bytes; with an error ~200).
const RecordSize = 120

// Record makes a distinct record for caller c's n-th proposal.
func Record(c, n int) []byte {
	b := make([]byte, RecordSize)
	b[0] = 'P'
	binary.BigEndian.PutUint32(b[1:], uint32(c))
	binary.BigEndian.PutUint64(b[5:], uint64(n))
	return b
}

// ThroughputResult is one closed-loop run.
type ThroughputResult struct {
	Records  int
	Elapsed  time.Duration
	P50, P99 time.Duration
	Syncs    uint64 // the leader's durable batches during the run
	Entries  uint64 // the leader's log entries during the run
	Errors   int
}

// PerSecond is records committed per second.
func (r ThroughputResult) PerSecond() float64 { return float64(r.Records) / r.Elapsed.Seconds() }

// SyncsPerSecond is the leader's durable batches per second.
func (r ThroughputResult) SyncsPerSecond() float64 { return float64(r.Syncs) / r.Elapsed.Seconds() }

// Throughput runs callers closed loops (each proposes, waits, proposes
// again) for warm+dur and reports the dur part: what the queue's broker
// would see with that many concurrent operations in flight.
func Throughput(c Cluster, callers int, warm, dur time.Duration) (ThroughputResult, error) {
	leader, err := WaitLeader(c, 10*time.Second)
	if err != nil {
		return ThroughputResult{}, err
	}
	start := time.Now()
	measureFrom, end := start.Add(warm), start.Add(warm+dur)
	lats := make([][]time.Duration, callers)
	errs := make([]int, callers)
	var wg sync.WaitGroup
	var before Stats
	var once sync.Once
	for i := range callers {
		wg.Go(func() {
			for n := 0; ; n++ {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				if !t0.Before(measureFrom) {
					once.Do(func() { before = c.Stats(leader) })
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.Propose(ctx, Record(i, n))
				cancel()
				t1 := time.Now()
				if t0.Before(measureFrom) || t1.After(end) {
					continue
				}
				if err != nil {
					errs[i]++
					continue
				}
				lats[i] = append(lats[i], t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	after := c.Stats(leader)
	var all []time.Duration
	res := ThroughputResult{Elapsed: dur, Syncs: after.Syncs - before.Syncs, Entries: after.Entries - before.Entries}
	for i := range callers {
		all = append(all, lats[i]...)
		res.Errors += errs[i]
	}
	if c.Leader() != leader {
		return res, fmt.Errorf("raftbench: leadership moved from member %d during the run", leader)
	}
	res.Records = len(all)
	res.P50, res.P99 = Percentile(all, 0.50), Percentile(all, 0.99)
	return res, nil
}

// Percentile returns the q-quantile of ds (sorting ds).
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// WaitLeader polls until some member leads.
func WaitLeader(c Cluster, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l >= 0 {
			return l, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return -1, errors.New("raftbench: no leader elected in time")
}

// ProposeRetry proposes rec until one attempt succeeds or timeout passes;
// each attempt is bounded so that one sent to a leader that just died does
// not hold the next attempt back.
func ProposeRetry(c Cluster, rec []byte, attempt, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), attempt)
		err = c.Propose(ctx, rec)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("raftbench: no commit within %v: %w", timeout, err)
}

// WaitCaughtUp polls until every live member in members has applied the
// same sequence as member ref.
func WaitCaughtUp(c Cluster, ref int, members []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		want := c.Applied(ref)
		same := true
		for _, m := range members {
			if got := c.Applied(m); got.Count != want.Count || got.Sum != want.Sum {
				same = false
			}
		}
		if same {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("raftbench: members %v did not catch up with %d (%d records) in %v", members, ref, want.Count, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FailoverOnce kills the leader and returns how long it took until a
// proposal committed on a survivor; then it restarts the killed member and
// waits until it has caught up, so the next repetition starts whole.
func FailoverOnce(c Cluster, seq int) (time.Duration, error) {
	old, err := WaitLeader(c, 10*time.Second)
	if err != nil {
		return 0, err
	}
	// A commit first, so the leader is settled and every member is current.
	if err := ProposeRetry(c, Record(-1, 2*seq), 500*time.Millisecond, 10*time.Second); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := c.Kill(old); err != nil {
		return 0, err
	}
	if err := ProposeRetry(c, Record(-1, 2*seq+1), 300*time.Millisecond, 20*time.Second); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	if err := c.Restart(old); err != nil {
		return took, err
	}
	now, err := WaitLeader(c, 10*time.Second)
	if err != nil {
		return took, err
	}
	all := []int{0, 1, 2}
	return took, WaitCaughtUp(c, now, all, 20*time.Second)
}
