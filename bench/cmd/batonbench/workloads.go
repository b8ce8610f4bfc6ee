package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/bench/internal/heap"
	"github.com/batonrun/baton/bench/internal/load"
	"github.com/batonrun/baton/bench/internal/peers"
	"github.com/batonrun/baton/bench/internal/profile"
	"github.com/batonrun/baton/bench/internal/refs"
	"github.com/batonrun/baton/bench/internal/report"
	queueclient "github.com/batonrun/baton/client/queue"
)

// Contenders and workload names: the JSON records and the targets use the
// same strings.
const (
	ref      = "reference"
	batonQ   = "baton"
	clientGo = "client-go"

	wFsync  = "append 64 B + fdatasync"
	wEcho1  = "gRPC empty unary call, 1 caller" + inChild
	wEcho64 = "gRPC empty unary call, 64 callers" + inChild
	wCarry1 = "gRPC carrying 1000-key Adds, 1 caller" + inChild
	wCarry8 = "gRPC carrying 1000-key Adds, 8 callers" + inChild

	// Where the reference server ran: the targets use the child's figures;
	// the same references against a server in the bench process itself are
	// shown for comparison (see refsProc).
	inChild       = " (server in another process)"
	inProcess     = " (server in the bench process)"
	wAdd1x1       = "durable Add, distinct keys, batch 1, 1 caller"
	wAdd1x64      = "durable Add, distinct keys, batch 1, 64 callers"
	wAdd1000x1    = "durable Add, distinct keys, batch 1000, 1 caller"
	wAdd1000x6    = "durable Add, distinct keys, batch 1000, 64 callers"
	wCollapse1    = "collapsed Add, batch 1000, 1 caller"
	wCollapse8    = "collapsed Add, batch 1000, 8 callers"
	wCycle        = "Add→Lease→Ack cycle, batches of 1000 (2 adders, 4 workers)"
	wCycleTLS     = wCycle + " over mTLS"
	wHeap         = "heap per pending key (11-byte keys)"
	wRestartEmpty = "restart of an empty queue (SIGKILL, exec → SERVING)"

	// The mTLS target's name, as docs/benchmarks.md's targets list it.
	tCycleTLS = "cycle in batches over mTLS"

	mRate = "rate"
	mP50  = "p50"
	mP99  = "p99"
)

func wRestart(n int) string {
	return fmt.Sprintf("restart with %s unfinished keys (SIGKILL, exec → SERVING)", report.Format(float64(n), "keys"))
}

type bench struct {
	cfg    config
	log    io.Writer
	set    report.Set
	refs   *peers.Proc // the child serving the gRPC references (refsProc)
	relays int         // queue names the relay contender has used
	// profiles are the cold start's CPU profiles (-profile), for the report.
	profiles []profile.Result
}

// record keeps the best value of a figure measured in several rounds: the
// highest rate, the lowest latency, time or size.
func (b *bench) record(contender, workload, metric string, v float64, unit string) {
	b.set.Keep(contender, workload, metric, v, unit, metric == mRate)
}

func (b *bench) step(name string) func() {
	fmt.Fprintf(b.log, "batonbench: %s ...", name)
	start := time.Now()
	return func() { fmt.Fprintf(b.log, " %v\n", time.Since(start).Round(time.Millisecond)) }
}

// all runs every workload. Each reference runs right before the baton
// workload it is compared with, so that load from other users of the machine
// (which comes and goes) weighs on both halves of a ratio alike.
//
// The paired workloads run in rounds (-rounds) and keep their best figures;
// so do the plaintext and mTLS cycles, alternating (cycles); the long ones
// (restart, heap) run once.
//
// -only and -contenders (config.selectWorkloads) leave some out.
func (b *bench) all(ctx context.Context) error {
	if err := b.queueWorkloads(ctx); err != nil {
		return err
	}
	if b.cfg.side {
		if err := b.sideBySide(ctx); err != nil {
			return err
		}
	}
	if b.cfg.replicated {
		if err := b.replicated(ctx); err != nil {
			return err
		}
	}
	return b.pipeline(ctx)
}

// queueWorkloads is baton's own workloads (the group queue): the paired
// references and baton figures, the cycles, restart and heap.
func (b *bench) queueWorkloads(ctx context.Context) error {
	if !b.cfg.runs(gQueue) {
		return nil
	}
	defer b.closeRefs()
	paired := []func(context.Context) error{
		b.fsyncRef,
		func(ctx context.Context) error { return b.echoRef(ctx, wEcho1, 1) },
		func(ctx context.Context) error { return b.durableAdd(ctx, wAdd1x1, 1, 1) },
		func(ctx context.Context) error { return b.echoRef(ctx, wEcho64, 64) },
		func(ctx context.Context) error { return b.durableAdd(ctx, wAdd1x64, 1, 64) },
		func(ctx context.Context) error { return b.durableAdd(ctx, wAdd1000x1, 1000, 1) },
		func(ctx context.Context) error { return b.durableAdd(ctx, wAdd1000x6, 1000, 64) },
		b.collapsedAdds,
	}
	for round := 1; round <= b.cfg.rounds; round++ {
		fmt.Fprintf(b.log, "batonbench: round %d of %d\n", round, b.cfg.rounds)
		for _, f := range paired {
			if err := f(ctx); err != nil {
				return err
			}
		}
	}
	for _, f := range []func(context.Context) error{b.cycles, b.restartAndHeap, b.clientGoHeap} {
		if err := f(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) fsyncRef(ctx context.Context) error {
	done := b.step(wFsync)
	r, err := refs.Fsync(ctx, b.cfg.dir, b.cfg.dur)
	if err != nil {
		return fmt.Errorf("%s: %w", wFsync, err)
	}
	done()
	b.record(ref, wFsync, mRate, r.ItemRate(), "ops/s")
	b.record(ref, wFsync, mP50, r.Percentile(50), "ms")
	b.record(ref, wFsync, mP99, r.Percentile(99), "ms")
	return nil
}

// refsProc starts the child process that serves the gRPC references. The
// queue is another process, so every call to it crosses a process boundary
// over loopback: the receiving process's threads are woken, by the kernel,
// from idle. A server inside the bench process shares the caller's runtime
// instead, whose threads are already awake, and answers three times faster
// here (p50 45 µs against 150 µs): comparing the queue with that would
// charge the queue for a cost no server in another process avoids. So the
// targets use the references in a child; the in-process figures are shown
// beside them.
func (b *bench) refsProc(ctx context.Context) error {
	if b.refs != nil {
		return nil
	}
	cmd, err := serveCommand()
	if err != nil {
		return err
	}
	p, err := peers.StartProc(ctx, cmd, peers.KindRefs, filepath.Join(b.cfg.dir, "refs"))
	if err != nil {
		return fmt.Errorf("start the reference server: %w", err)
	}
	b.refs = p
	return nil
}

// closeRefs stops the reference server's child, if it runs.
func (b *bench) closeRefs() {
	if b.refs != nil {
		b.refs.Close()
		b.refs = nil
	}
}

func (b *bench) echoRef(ctx context.Context, name string, callers int) error {
	return b.bothRefs(ctx, name, func(addr string) (load.Result, error) {
		return refs.Echo(ctx, addr, callers, b.cfg.dur)
	}, func(name string, r load.Result) {
		b.record(ref, name, mRate, r.CallRate(), "calls/s")
		b.record(ref, name, mP50, r.Percentile(50), "ms")
	})
}

func (b *bench) carryRef(ctx context.Context, name string, callers int) error {
	return b.bothRefs(ctx, name, func(addr string) (load.Result, error) {
		return refs.Carry(ctx, addr, callers, 1000, b.cfg.dur)
	}, func(name string, r load.Result) {
		b.record(ref, name, mRate, r.ItemRate(), "keys/s")
	})
}

// bothRefs measures a reference against the child's server (recorded as
// name, what the targets use) and then against one in the bench process
// (name with inProcess for inChild, for comparison).
func (b *bench) bothRefs(ctx context.Context, name string, measure func(addr string) (load.Result, error), record func(string, load.Result)) error {
	if err := b.refsProc(ctx); err != nil {
		return err
	}
	for _, at := range []struct{ addr, name string }{{b.refs.Addr, name}, {"", strings.Replace(name, inChild, inProcess, 1)}} {
		done := b.step(at.name)
		r, err := measure(at.addr)
		if err != nil {
			return fmt.Errorf("%s: %w", at.name, err)
		}
		done()
		record(at.name, r)
	}
	return nil
}

// withServer runs f against a fresh baton-queue with an empty data
// directory, so no workload inherits another's keys or log.
func (b *bench) withServer(ctx context.Context, f func(*baton.Server) error) error {
	s, err := baton.Start(ctx, b.cfg.bin, b.cfg.dir)
	if err != nil {
		return err
	}
	defer s.Close()
	return f(s)
}

func (b *bench) durableAdd(ctx context.Context, name string, batch, callers int) error {
	return b.withServer(ctx, func(s *baton.Server) error {
		done := b.step(name)
		spec := load.Spec{Callers: callers, Duration: b.cfg.dur, Latency: true}
		if batch > 1 {
			// Bounded by keys too, so the heap stays modest on a fast disk.
			spec.Items = int64(b.cfg.batchKeys)
		}
		next := make([]int, callers)
		// Batches are formatted before the clock starts, as the carrying
		// reference's are: formatting two million keys is the bench's own
		// CPU, taken from the two cores the queue runs on.
		var pool []string
		var taken atomic.Int64
		if batch > 1 {
			pool = refs.Keys("bat", 0, b.cfg.batchKeys+callers*batch)
		}
		r, err := load.Run(ctx, spec, func(ctx context.Context, c int) (int, error) {
			var keys []string
			if pool != nil {
				end := int(taken.Add(int64(batch)))
				if end > len(pool) {
					return 0, fmt.Errorf("key pool of %d exhausted", len(pool))
				}
				keys = pool[end-batch : end]
			} else {
				keys = refs.Keys(fmt.Sprintf("c%02d", c), next[c], batch)
				next[c] += batch
			}
			res, err := s.Client.Add(ctx, "bench", keys, queueclient.AddOptions{})
			if err == nil && res.Queued != batch {
				err = fmt.Errorf("%d of %d distinct keys queued", res.Queued, batch)
			}
			return res.Queued, err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		done()
		b.record(batonQ, name, mRate, r.ItemRate(), "keys/s")
		b.record(batonQ, name, mP50, r.Percentile(50), "ms")
		b.record(batonQ, name, mP99, r.Percentile(99), "ms")
		return nil
	})
}

func (b *bench) collapsedAdds(ctx context.Context) error {
	return b.withServer(ctx, func(s *baton.Server) error {
		keys := refs.Keys("col", 0, 1000)
		if _, err := s.Client.Add(ctx, "bench", keys, queueclient.AddOptions{}); err != nil {
			return err
		}
		for _, w := range []struct {
			name, ref string
			callers   int
		}{{wCollapse1, wCarry1, 1}, {wCollapse8, wCarry8, 8}} {
			if err := b.carryRef(ctx, w.ref, w.callers); err != nil {
				return err
			}
			done := b.step(w.name)
			r, err := load.Run(ctx, load.Spec{Callers: w.callers, Duration: b.cfg.dur}, func(ctx context.Context, _ int) (int, error) {
				res, err := s.Client.Add(ctx, "bench", keys, queueclient.AddOptions{})
				if err == nil && res.Collapsed != len(keys) {
					err = fmt.Errorf("%d of %d pending keys collapsed", res.Collapsed, len(keys))
				}
				return res.Collapsed, err
			})
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			done()
			b.record(batonQ, w.name, mRate, r.ItemRate(), "keys/s")
		}
		return nil
	})
}

// cycles measures the cycle over plaintext and over mutual TLS in
// alternating runs, rounds of each, keeping each figure's best: the mTLS
// target is a ratio of the two, and load from the machine's other users
// comes and goes, so neither half may run in a quieter stretch than the
// other. The order flips every round (plaintext first, then mTLS first:
// ABBA for two rounds), so a drift in the load over the runs weighs on both
// alike.
func (b *bench) cycles(ctx context.Context) error {
	dir := filepath.Join(b.cfg.dir, "certs")
	tlsFiles, err := baton.WriteCerts(dir)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	plain := func(ctx context.Context) error { return b.cycle(ctx, wCycle, baton.Options{}) }
	mtls := func(ctx context.Context) error { return b.cycle(ctx, wCycleTLS, baton.Options{TLS: tlsFiles}) }
	for _, run := range interleave(b.cfg.rounds, plain, mtls) {
		if err := run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// interleave returns rounds runs of a and of b alternating, the order
// flipped every round: a b, b a, a b, …
func interleave[F any](rounds int, a, b F) []F {
	out := make([]F, 0, 2*rounds)
	for r := range rounds {
		if r%2 == 0 {
			out = append(out, a, b)
		} else {
			out = append(out, b, a)
		}
	}
	return out
}

// cycle pushes cycleKeys distinct keys through Add, Lease and Ack with
// adders and workers running concurrently against a fresh queue started
// with o, and times until the last ack; it keeps the best rate as name.
func (b *bench) cycle(ctx context.Context, name string, o baton.Options) error {
	const batch, adders, workers = 1000, 2, 4
	s, err := baton.StartWith(ctx, b.cfg.bin, b.cfg.dir, o)
	if err != nil {
		return err
	}
	defer s.Close()
	done := b.step(name)
	total := int64(b.cfg.cycleKeys)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		added, acked atomic.Int64
		wg           sync.WaitGroup
	)
	pool := refs.Keys("cyc", 0, int(total)) // before the clock, as in durableAdd
	start := time.Now()
	for range adders {
		wg.Go(func() {
			for ctx.Err() == nil {
				end := added.Add(batch)
				if end > total {
					return
				}
				if _, err := s.Client.Add(ctx, "cycle", pool[end-batch:end], queueclient.AddOptions{}); err != nil {
					cancel(fmt.Errorf("add: %w", err))
					return
				}
			}
		})
	}
	for w := range workers {
		wg.Go(func() {
			acks := make([]queueclient.Ack, 0, batch)
			for ctx.Err() == nil && acked.Load() < total {
				leases, err := s.Client.Lease(ctx, "cycle", queueclient.LeaseOptions{Worker: fmt.Sprintf("w%d", w), MaxItems: batch, Wait: 50 * time.Millisecond, Duration: time.Minute})
				if err != nil {
					cancel(fmt.Errorf("lease: %w", err))
					return
				}
				if len(leases) == 0 {
					continue
				}
				acks = acks[:0]
				for _, l := range leases {
					acks = append(acks, queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()})
				}
				res, err := s.Client.Ack(ctx, "cycle", acks)
				if err != nil {
					cancel(fmt.Errorf("ack: %w", err))
					return
				}
				ok := 0
				for _, r := range res {
					if r.Status == queueclient.OK {
						ok++
					}
				}
				if ok != len(res) {
					cancel(fmt.Errorf("%d of %d acks of live leases refused", len(res)-ok, len(res)))
					return
				}
				acked.Add(int64(ok))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if acked.Load() != total {
		return fmt.Errorf("%s: %d of %d keys acked", name, acked.Load(), total)
	}
	done()
	b.record(batonQ, name, mRate, float64(total)/el.Seconds(), "keys/s")
	return nil
}

// restartAndHeap fills a queue with bigKeys pending keys, measures the live
// heap they take, then SIGKILLs the process and times its restart.
func (b *bench) restartAndHeap(ctx context.Context) error {
	return b.withServer(ctx, func(s *baton.Server) error {
		n := b.cfg.bigKeys
		// Garbage for the server's collector: the same 10,000 keys announced
		// again and again (collapsed after the first call, so the stored
		// state does not change between the two heap readings).
		ballast := refs.Keys("gcb", 0, 10000)
		churn := func(ctx context.Context) error {
			_, err := s.Client.Add(ctx, "ballast", ballast, queueclient.AddOptions{})
			return err
		}
		// The same restart with nothing stored: what process start and the
		// client's reconnection cost, apart from recovery.
		done := b.step(wRestartEmpty)
		took, err := s.Restart(ctx)
		if err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		done()
		b.record(batonQ, wRestartEmpty, "time", took.Seconds(), "s")

		done = b.step("heap of an empty queue")
		base, err := s.LiveHeap(ctx, churn)
		if err != nil {
			return err
		}
		done()
		done = b.step(fmt.Sprintf("fill %d keys", n))
		var next atomic.Int64
		const batch = 10000
		if _, err := load.Run(ctx, load.Spec{Callers: 4, Items: int64(n)}, func(ctx context.Context, _ int) (int, error) {
			first := int(next.Add(batch)) - batch
			if first >= n {
				return 0, nil
			}
			k := min(batch, n-first)
			res, err := s.Client.Add(ctx, "bench", refs.Keys("big", first, k), queueclient.AddOptions{})
			return res.Queued, err
		}); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		done()
		done = b.step("heap with the keys pending")
		full, err := s.LiveHeap(ctx, churn)
		if err != nil {
			return err
		}
		done()
		b.record(batonQ, wHeap, "live heap", (full.Live-base.Live)/float64(n), "B/key")
		b.record(batonQ, wHeap, "RSS", (full.RSS-base.RSS)/float64(n), "B/key")

		done = b.step(wRestart(n))
		took, err = s.Restart(ctx)
		if err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		st, err := s.Client.Stats(ctx, "bench")
		if err != nil {
			return err
		}
		if got := st[0].GetPending(); got != uint64(n) {
			return fmt.Errorf("restart: %d keys pending, want %d", got, n)
		}
		done()
		b.record(batonQ, wRestart(n), "time", took.Seconds(), "s")
		return nil
	})
}

func (b *bench) clientGoHeap(context.Context) error {
	done := b.step("client-go " + wHeap)
	per, err := heap.ClientGoPerKey(b.cfg.bigKeys)
	if err != nil {
		return err
	}
	done()
	b.record(clientGo, wHeap, "live heap", per, "B/key")
	return nil
}

// targetList collects targets, each marked Missing unless every figure it
// needs (ok) was measured.
type targetList []report.Target

func (l *targetList) add(t report.Target, ok ...bool) {
	for _, o := range ok {
		t.Missing = t.Missing || !o
	}
	*l = append(*l, t)
}

// targets judges the queue's targets as ratios of this run's figures.
func (b *bench) targets() []report.Target {
	get := func(c, w, m string) (float64, bool) { return b.set.Get(c, w, m) }
	var ts targetList
	add := ts.add

	add1, ok1 := get(batonQ, wAdd1x64, mRate)
	echo64, ok2 := get(ref, wEcho64, mRate)
	add(report.Target{Name: "durable Add, batch 1, 64 callers", Measured: add1, Limit: 0.5 * echo64, Unit: "keys/s", AtLeast: true,
		Basis: "50% of the empty echo to another process, 64 callers"}, ok1, ok2)

	b1, ok1 := get(batonQ, wAdd1000x1, mRate)
	b64, ok2 := get(batonQ, wAdd1000x6, mRate)
	add(report.Target{Name: "durable Add, batch 1000 (best of 1 and 64 callers)", Measured: max(b1, b64), Limit: 1_000_000, Unit: "keys/s", AtLeast: true,
		Basis: "absolute"}, ok1 || ok2)

	col, ok1 := get(batonQ, wCollapse8, mRate)
	carry, ok2 := get(ref, wCarry8, mRate)
	add(report.Target{Name: "collapsed Add, batch 1000, 8 callers", Measured: col, Limit: 0.25 * carry, Unit: "keys/s", AtLeast: true,
		Basis: "25% of gRPC carrying 1000-key messages to another process, 8 callers"}, ok1, ok2)

	// The targets fix the batches, not how many callers share the queue: the
	// best of this run's batch cycles, the 2-adder/4-worker shape and (with
	// the side-by-side run) workload 1's batch-1000 cycles from 1 and 64
	// callers, each of which is in the figures table.
	cyc, ok1 := get(batonQ, wCycle, mRate)
	for _, callers := range []int{1, 64} {
		if v, ok := get(batonQ, wSideCycle(1000, callers), mRate); ok {
			cyc, ok1 = max(cyc, v), true
		}
	}
	add(report.Target{Name: "Add→Lease→Ack cycle in batches (best of the batch-1000 shapes)", Measured: cyc, Limit: 300_000, Unit: "keys/s", AtLeast: true,
		Basis: "absolute"}, ok1)

	// The same shape both ways, in alternating runs (cycles): only the
	// transport and the authorization of each call differ.
	plain, ok1 := get(batonQ, wCycle, mRate)
	mtls, ok2 := get(batonQ, wCycleTLS, mRate)
	add(report.AtLeastTimes(tCycleTLS, mtls, "plaintext", plain, 0.8, "keys/s",
		"0.8 × the plaintext cycle, 2 adders and 4 workers both, alternated in this run"), ok1, ok2)

	p50, ok1 := get(batonQ, wAdd1x1, mP50)
	fs50, ok2 := get(ref, wFsync, mP50)
	echo50, ok3 := get(ref, wEcho1, mP50)
	add(report.Target{Name: "single Add p50", Measured: p50, Limit: 2 * (fs50 + echo50), Unit: "ms",
		Basis: "2 × (fdatasync p50 + p50 of the echo to another process)"}, ok1, ok2, ok3)

	rs, ok1 := get(batonQ, wRestart(b.cfg.bigKeys), "time")
	add(report.Target{Name: fmt.Sprintf("restart with %s unfinished keys", report.Format(float64(b.cfg.bigKeys), "keys")), Measured: rs, Limit: 2, Unit: "s",
		Basis: "absolute"}, ok1)

	hb, ok1 := get(batonQ, wHeap, "live heap")
	hc, ok2 := get(clientGo, wHeap, "live heap")
	add(report.Target{Name: "heap per pending key", Measured: hb, Limit: 1.5 * hc, Unit: "B/key",
		Basis: "1.5 × client-go's workqueue"}, ok1, ok2)
	if b.cfg.side {
		ts = append(ts, b.sideTargets()...)
	}
	if b.cfg.replicated {
		ts = append(ts, b.replicatedTargets()...)
	}
	return append(ts, b.pipelineTargets()...)
}
