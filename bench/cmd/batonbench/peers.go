package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/bench/internal/load"
	"github.com/batonrun/baton/bench/internal/peers"
	"github.com/batonrun/baton/bench/internal/plot"
	"github.com/batonrun/baton/bench/internal/refs"
	"github.com/batonrun/baton/bench/internal/report"
)

// The side-by-side contenders, beside batonQ and clientGo.
const (
	// batonStream is baton through the work stream (peers.BatonStream): the
	// keys leased and acked as the worker SDK takes them. It runs workload
	// 1's cycle shapes only, beside batonQ's unary Lease and Ack.
	batonStream = "baton (work stream)"
	// relayQ is the floor of batonStream's single-key cycle: the same
	// client and messages against refs' relay, a server in another process
	// that keeps keys in a channel and nothing else (no collapsing, no log,
	// no fsync). It runs workload 1's single-key shapes only.
	relayQ      = "gRPC relay (no queue)"
	natsDefault = "nats"
	natsSync    = "nats (sync always)"
	etcdQueue   = "etcd-queue"

	mDeliveries = "deliveries"
	mViolations = "violations"
	mLost       = "acknowledged but lost"
	mAgain      = "acked before the kill, delivered again after it"
)

// sideContenders in the order they run and are charted.
var sideContenders = []string{batonQ, batonStream, relayQ, clientGo, natsDefault, natsSync, etcdQueue}

// cycleOnly are the contenders that run workload 1 alone.
var cycleOnly = map[string]bool{batonStream: true, relayQ: true, batonR3Stream: true}

// singleKeyOnly are the contenders that run workload 1's batch-1 shapes
// alone.
var singleKeyOnly = map[string]bool{relayQ: true}

// cycleShapes are workload 1's (batch, callers) pairs.
var cycleShapes = [][2]int{{1, 1}, {1, 64}, {1000, 1}, {1000, 64}}

func wSideCycle(batch, callers int) string {
	s := "s"
	if callers == 1 {
		s = ""
	}
	return fmt.Sprintf("cycle Add→Lease→Ack, distinct keys, batch %d, %d caller%s", batch, callers, s)
}

// tStreamCycle names the target of the single-key cycle through the work
// stream from callers callers against peer.
func tStreamCycle(callers int, peer string) string {
	s := "s"
	if callers == 1 {
		s = ""
	}
	return fmt.Sprintf("single-key cycle through the work stream, %d caller%s, vs %s", callers, s, peer)
}

func wSideCollapse(n int) string {
	return fmt.Sprintf("collapse: %s announcements of 1,000 keys, then drain", report.Format(float64(n), "keys"))
}

func wSideChanges(n int) string {
	return fmt.Sprintf("change while leased: %s events, 4 workers", report.Format(float64(n), "keys"))
}

const wSideCrash = "crash: SIGKILL during the cycle, restart, drain"

// sideBySide runs workloads 1–3 against every contender (1 alone against
// the cycleOnly ones), 4 against the durable ones, and 5 and 6 against the
// peers; -only and -contenders narrow it (selected).
func (b *bench) sideBySide(ctx context.Context) error {
	defer b.closeRefs() // the relay's server
	for _, name := range b.cfg.chosen(sideContenders) {
		if err := b.contender(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if !b.cfg.runs(gSide) {
		return nil
	}
	for _, name := range b.cfg.chosen([]string{batonQ, natsDefault, natsSync, etcdQueue}) {
		if err := b.crash(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, name := range b.cfg.chosen([]string{natsDefault, natsSync, etcdQueue}) {
		if err := b.peerHeapAndRestart(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// procKinds maps the peers to the servers a child process runs for them.
var procKinds = map[string]string{natsDefault: peers.KindNATS, natsSync: peers.KindNATSSync, etcdQueue: peers.KindEtcd}

// openRemote starts a fresh instance of a peer with its server in a child
// process (the bench binary's serve subcommand), which can be SIGKILLed.
func (b *bench) openRemote(ctx context.Context, name string, leaseFor time.Duration) (*peers.Remote, func(), error) {
	command, err := serveCommand()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(b.cfg.dir, dirName(name)+"-proc-")
	if err != nil {
		return nil, nil, err
	}
	r, err := peers.StartRemote(ctx, command, procKinds[name], dir, leaseFor)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return r, func() { r.Close(); os.RemoveAll(dir) }, nil
}

// peerBigKeys is workloads 5 and 6's size for a peer: a fifth of baton's
// keys (filling etcd with a million keys takes minutes here), a hundredth
// for nats with sync always (it fsyncs every message on its own, 500 to
// 3,000 a second on this disk: a fifth would take minutes).
func (b *bench) peerBigKeys(name string) int {
	if name == natsSync {
		return b.cfg.bigKeys / 100
	}
	return b.cfg.bigKeys / 5
}

// peerHeapAndRestart is workloads 5 and 6 for a peer whose server runs in
// a child process: the child's live heap and RSS per pending key, then a
// SIGKILL and a restart timed until the keys are served again.
func (b *bench) peerHeapAndRestart(ctx context.Context, name string) error {
	r, closeR, err := b.openRemote(ctx, name, time.Minute)
	if err != nil {
		return err
	}
	defer closeR()
	n := b.peerBigKeys(name)
	heap0, err := r.Proc.Heap(ctx)
	if err != nil {
		return err
	}
	rss0, err := r.Proc.RSS()
	if err != nil {
		return err
	}
	done := b.step(fmt.Sprintf("%s: fill %d keys", name, n))
	var next atomic.Int64
	const batch = 1000
	if _, err := load.Run(ctx, load.Spec{Callers: 4, Items: int64(n)}, func(ctx context.Context, _ int) (int, error) {
		first := int(next.Add(batch)) - batch
		if first >= n {
			return 0, nil
		}
		k := min(batch, n-first)
		return k, r.Queue.Add(ctx, refs.Keys("big", first, k))
	}); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	done()
	heap1, err := r.Proc.Heap(ctx)
	if err != nil {
		return err
	}
	rss1, err := r.Proc.RSS()
	if err != nil {
		return err
	}
	b.record(name, wPeerHeap(n), "live heap (server process)", (float64(heap1)-float64(heap0))/float64(n), "B/key")
	b.record(name, wPeerHeap(n), "RSS (server process)", (float64(rss1)-float64(rss0))/float64(n), "B/key")
	done = b.step(name + ": " + wPeerRestart(n))
	took, err := r.Restart(ctx, int64(n))
	if err != nil {
		return err
	}
	done()
	b.record(name, wPeerRestart(n), "time", took.Seconds(), "s")
	return nil
}

func wPeerHeap(n int) string {
	return fmt.Sprintf("memory per pending key (%s 11-byte keys, server in its own process)", report.Format(float64(n), "keys"))
}

func wPeerRestart(n int) string {
	return fmt.Sprintf("restart with %s unfinished keys (SIGKILL, exec → serving them)", report.Format(float64(n), "keys"))
}

// isBaton reports whether contender is one of Baton's, whose errors fail
// the run (a peer's are figures).
func isBaton(contender string) bool { return strings.HasPrefix(contender, batonQ) }

func dirName(contender string) string {
	return strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(contender)
}

// open starts a fresh instance of a contender (nothing inherited from the
// previous workload).
func (b *bench) open(ctx context.Context, name string) (peers.Queue, func(), error) {
	dir, err := os.MkdirTemp(b.cfg.dir, dirName(name)+"-")
	if err != nil {
		return nil, nil, err
	}
	var q peers.Queue
	cleanup := func() { os.RemoveAll(dir) }
	switch name {
	case batonQ, batonStream:
		s, err := baton.Start(ctx, b.cfg.bin, dir)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		if name == batonStream {
			// Each worker's stream holds up to its first Lease's max: the
			// batch, in workload 1.
			q := &peers.BatonStream{Client: s.Client, Name: "side"}
			return q, func() { q.Close(); s.Close(); cleanup() }, nil
		}
		return peers.Baton{Client: s.Client, Name: "side"}, func() { s.Close(); cleanup() }, nil
	case relayQ:
		if err := b.refsProc(ctx); err != nil {
			cleanup()
			return nil, nil, err
		}
		c, closeC, err := refs.RelayClient(b.refs.Addr)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		// A queue name of its own each time: a relay keeps what a run
		// left in it.
		b.relays++
		q := &peers.BatonStream{Client: c, Name: fmt.Sprintf("relay%d", b.relays)}
		return q, func() { q.Close(); closeC(); cleanup() }, nil
	case clientGo:
		q = peers.NewClientGo()
	case natsDefault, natsSync:
		q, err = peers.StartNATS(ctx, dir, name == natsSync)
	case etcdQueue:
		q, err = peers.StartEtcdQueue(ctx, filepath.Join(dir, "etcd"))
	default:
		err = fmt.Errorf("unknown contender %q", name)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return q, func() { q.Close(); cleanup() }, nil
}

func (b *bench) contender(ctx context.Context, name string) error {
	with := func(f func(peers.Queue) error) error {
		q, closeQ, err := b.open(ctx, name)
		if err != nil {
			return err
		}
		defer closeQ()
		return f(q)
	}
	if b.cfg.runs(gCycle) {
		for _, sh := range cycleShapes {
			if singleKeyOnly[name] && sh[0] != 1 {
				continue
			}
			if err := with(func(q peers.Queue) error { return b.sideCycle(ctx, name, q, sh, isBaton(name)) }); err != nil {
				return err
			}
		}
	}
	if cycleOnly[name] || !b.cfg.runs(gSide) {
		return nil
	}
	n := b.collapseAnnouncements(name)
	if err := with(func(q peers.Queue) error {
		w := wSideCollapse(n)
		done := b.step(name + ": " + w)
		d, err := peers.Collapse(ctx, q, n, 1000)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		done()
		b.record(name, w, mDeliveries, float64(d), "keys")
		return nil
	}); err != nil {
		return err
	}
	return with(func(q peers.Queue) error {
		w := wSideChanges(b.cfg.changes)
		done := b.step(name + ": " + w)
		c, n, err := peers.Changes(ctx, q, b.cfg.changes, 1000, 4)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		done()
		b.record(name, w, "events made (fewer: the queue ran dry)", float64(n), "count")
		b.record(name, w, mViolations, float64(c.Total()), "count")
		b.record(name, w, "delivered to two workers at once", float64(c.Concurrent), "count")
		b.record(name, w, "announcement lost", float64(c.Lost), "count")
		b.record(name, w, "duplicate delivery", float64(c.Unexpected), "count")
		return nil
	})
}

// sideCycle is workload 1 in one shape ({batch, callers}) against q, a
// fresh instance of contender name. A peer that fails under the load
// (etcd answers "request timed out" to 64 callers racing for the same
// keys) keeps the keys it acked before, and the failure is a figure too;
// for a baton contender (strict) it is an error.
func (b *bench) sideCycle(ctx context.Context, name string, q peers.Queue, sh [2]int, strict bool) error {
	w := wSideCycle(sh[0], sh[1])
	done := b.step(name + ": " + w)
	r, err := peers.Cycle(ctx, q, "cyc", sh[0], sh[1], b.cfg.dur)
	if err != nil && (strict || ctx.Err() != nil) {
		return fmt.Errorf("%s: %w", w, err)
	}
	done()
	if err != nil {
		fmt.Fprintf(b.log, "batonbench: %s: %s stopped by an error: %v\n", name, w, err)
		b.record(name, w, "stopped by an error", 1, "count")
	}
	b.record(name, w, mRate, r.Rate(), "keys/s")
	if r.P50 > 0 {
		b.record(name, w, "round p50", r.P50, "ms")
		b.record(name, w, "round p99", r.P99, "ms")
	}
	return nil
}

// collapseAnnouncements is workload 2's size: the etcd queue gets a tenth
// (each of its announcements is a write through raft and a fsync'd WAL; a
// million would take minutes on this machine).
func (b *bench) collapseAnnouncements(name string) int {
	if name == etcdQueue {
		return b.cfg.collapse / 10
	}
	return b.cfg.collapse
}

// crashLease is how long a lease lasts in the crash workload: keys leased
// at the kill come back this soon after the restart.
const crashLease = 2 * time.Second

// crash is workload 4 (peers.Crash): 2 adders (batches of 1000) and 4
// workers (leases of up to 100 keys for 2 s) run the cycle against a
// contender's server in its own process, which is SIGKILLed halfway through
// the workload's duration (later if not two batches were added yet) and
// started again on the same data; then the queue is drained. A key whose
// Add was answered OK must be acked before the crash or delivered after it;
// keys whose Add or Ack was in flight at the kill are uncertain and not
// counted.
func (b *bench) crash(ctx context.Context, name string) error {
	var (
		q    peers.Queue
		spec peers.CrashSpec
	)
	run, quiet := b.cfg.dur/2, crashLease+3*time.Second
	if name == batonQ {
		s, err := baton.Start(ctx, b.cfg.bin, b.cfg.dir)
		if err != nil {
			return err
		}
		defer s.Close()
		q = peers.Baton{Client: s.Client, Name: "crash", LeaseFor: crashLease}
		spec = peers.CrashSpec{Run: run, Quiet: quiet, Kill: s.Kill, Restart: func(ctx context.Context) error {
			_, err := s.Restart(ctx)
			return err
		}}
	} else {
		r, closeR, err := b.openRemote(ctx, name, crashLease)
		if err != nil {
			return err
		}
		defer closeR()
		q, spec = r.Queue, r.CrashSpec(run, quiet)
	}
	done := b.step(name + ": " + wSideCrash)
	r, err := peers.Crash(ctx, q, spec)
	if err != nil {
		return fmt.Errorf("%s: %w", wSideCrash, err)
	}
	done()
	fmt.Fprintf(b.log, "batonbench: %s crash: %+v\n", name, r)
	b.record(name, wSideCrash, "keys added (answered OK) before the kill", float64(r.Added), "keys")
	b.record(name, wSideCrash, "of which acked before the kill", float64(r.Acked), "keys")
	b.record(name, wSideCrash, mLost, float64(r.Lost), "keys")
	b.record(name, wSideCrash, mAgain, float64(r.Again), "keys")
	if r.Left >= 0 {
		b.record(name, wSideCrash, "kept but not delivered in the drain", float64(r.Left), "keys")
	}
	return nil
}

// bestCycle is a contender's best batch-1000 cycle rate over 1 and 64
// callers.
func (b *bench) bestCycle(name string, batch int) (float64, bool) {
	best, ok := 0.0, false
	for _, sh := range cycleShapes {
		if sh[0] != batch {
			continue
		}
		if v, found := b.set.Get(name, wSideCycle(sh[0], sh[1]), mRate); found {
			best, ok = max(best, v), true
		}
	}
	return best, ok
}

// sideTargets judges the side-by-side targets.
func (b *bench) sideTargets() []report.Target {
	var ts targetList
	add := ts.add
	bc, ok := b.bestCycle(batonQ, 1000)
	for _, p := range []struct {
		name   string
		factor float64
	}{{natsDefault, 1}, {natsSync, 20}, {etcdQueue, 5}} {
		pc, ok2 := b.bestCycle(p.name, 1000)
		ok2 = ok2 && pc > 0 // no key through in the time allowed: no ratio
		add(report.Target{Name: "cycle, batch 1000 (best of 1 and 64 callers) vs " + p.name, Measured: bc, Limit: p.factor * pc, Unit: "keys/s", AtLeast: true,
			Basis: fmt.Sprintf("%g × %s", p.factor, p.name)}, ok, ok2)
	}
	// Single keys through the work stream, each against the
	// peer's figure of the same shape in this run.
	for _, p := range []struct {
		callers int
		peer    string
	}{{1, natsSync}, {64, natsDefault}} {
		w := wSideCycle(1, p.callers)
		m, ok1 := b.set.Get(batonStream, w, mRate)
		r, ok2 := b.set.Get(p.peer, w, mRate)
		basis := fmt.Sprintf("1 × %s, the same shape", p.peer)
		// The relay's figure says how much of the bound any server of this
		// protocol can reach here (its floor, not a target).
		if f, ok := b.set.Get(relayQ, w, mRate); ok && r > 0 {
			basis += fmt.Sprintf("; %s: %s keys/s, %s × %s", relayQ, report.Format(f, "keys/s"), report.Format(f/r, "x"), p.peer)
		}
		add(report.AtLeastTimes(tStreamCycle(p.callers, p.peer), m, p.peer, r, 1, "keys/s", basis), ok1, ok2)
	}
	bd, ok1 := b.set.Get(batonQ, wSideCollapse(b.cfg.collapse), mDeliveries)
	cd, ok2 := b.set.Get(clientGo, wSideCollapse(b.cfg.collapse), mDeliveries)
	add(report.Target{Name: "collapse deliveries", Measured: bd, Limit: 1.01 * cd, Unit: "keys", Basis: "client-go's + 1%"}, ok1, ok2)
	v, ok1 := b.set.Get(batonQ, wSideChanges(b.cfg.changes), mViolations)
	add(report.Target{Name: "change-while-leased violations", Measured: v, Limit: 0, Unit: "count", Basis: "none"}, ok1)
	l, ok1 := b.set.Get(batonQ, wSideCrash, mLost)
	add(report.Target{Name: "acknowledged keys lost in a crash", Measured: l, Limit: 0, Unit: "keys", Basis: "none"}, ok1)
	return ts
}

// writeCyclePlot charts the cycle rates of the records (the same records
// the JSON holds): one bar per contender and batch size, the best of 1 and
// 64 callers, on a log scale.
func writeCyclePlot(path string, recs []report.Record) error {
	var set report.Set
	set.Records = recs
	var bars []plot.Bar
	for _, batch := range []int{1000, 1} {
		for i, c := range sideContenders {
			best := 0.0
			for _, sh := range cycleShapes {
				if sh[0] == batch {
					if v, ok := set.Get(c, wSideCycle(sh[0], sh[1]), mRate); ok {
						best = max(best, v)
					}
				}
			}
			if best > 0 {
				bars = append(bars, plot.Bar{Label: fmt.Sprintf("%s, batch %d", c, batch), Value: best, Text: report.Format(best, "keys/s") + " keys/s", Group: i})
			}
		}
	}
	var buf bytes.Buffer
	c := plot.Chart{Title: "Add-Lease-Ack cycle, keys/s, best of 1 and 64 callers (log scale)", Bars: bars, Log: true}
	if err := c.WritePNG(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
