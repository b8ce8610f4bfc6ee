package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/bench/internal/heap"
	"github.com/batonrun/baton/bench/internal/peers"
	"github.com/batonrun/baton/bench/internal/plot"
	"github.com/batonrun/baton/bench/internal/refs"
	"github.com/batonrun/baton/bench/internal/report"
	"github.com/batonrun/baton/services/queue/client"
)

// The side-by-side contenders (issue 6), beside batonQ and clientGo.
const (
	natsDefault = "nats"
	natsSync    = "nats (sync always)"
	etcdQueue   = "etcd-queue"

	mDeliveries = "deliveries"
	mViolations = "violations"
	mLost       = "acknowledged but lost"
)

// sideContenders in the order they run and are charted.
var sideContenders = []string{batonQ, clientGo, natsDefault, natsSync, etcdQueue}

// cycleShapes are workload 1's (batch, callers) pairs.
var cycleShapes = [][2]int{{1, 1}, {1, 64}, {1000, 1}, {1000, 64}}

func wSideCycle(batch, callers int) string {
	s := "s"
	if callers == 1 {
		s = ""
	}
	return fmt.Sprintf("cycle Add→Lease→Ack, distinct keys, batch %d, %d caller%s", batch, callers, s)
}

func wSideCollapse(n int) string {
	return fmt.Sprintf("collapse: %s announcements of 1,000 keys, then drain", report.Format(float64(n), "keys"))
}

func wSideChanges(n int) string {
	return fmt.Sprintf("change while leased: %s events, 4 workers", report.Format(float64(n), "keys"))
}

const wSideCrash = "crash: SIGKILL during the cycle, restart, drain"

// sideBySide runs workloads 1–3 against every contender and 4 against baton.
func (b *bench) sideBySide(ctx context.Context) error {
	for _, name := range sideContenders {
		if err := b.contender(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := b.crash(ctx); err != nil {
		return err
	}
	for _, name := range []string{natsDefault, etcdQueue} {
		if err := b.peerHeapAndRestart(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// peerHeapAndRestart is workloads 5 and 6 for the embedded peers, with a
// fifth of baton's keys (filling etcd with a million keys takes minutes
// here): the bench process's live heap per pending key, then a graceful
// restart timed until the keys are served again.
func (b *bench) peerHeapAndRestart(ctx context.Context, name string) error {
	q, closeQ, err := b.open(ctx, name)
	if err != nil {
		return err
	}
	defer closeQ()
	n := b.cfg.bigKeys / 5
	done := b.step(fmt.Sprintf("%s: fill %d keys", name, n))
	before := heap.Live()
	for i := 0; i < n; i += 1000 {
		if err := q.Add(ctx, refs.Keys("big", i, min(1000, n-i))); err != nil {
			return err
		}
	}
	after := heap.Live()
	done()
	b.record(name, wPeerHeap(n), "live heap (bench process)", (float64(after)-float64(before))/float64(n), "B/key")
	done = b.step(name + ": " + wPeerRestart(n))
	var took time.Duration
	switch q := q.(type) {
	case *peers.NATS:
		took, err = q.Restart(ctx, uint64(n))
	case *peers.EtcdQueue:
		took, err = q.Restart(ctx, int64(n))
	}
	if err != nil {
		return err
	}
	done()
	b.record(name, wPeerRestart(n), "time", took.Seconds(), "s")
	return nil
}

func wPeerHeap(n int) string {
	return fmt.Sprintf("heap per pending key (%s 11-byte keys, in process)", report.Format(float64(n), "keys"))
}

func wPeerRestart(n int) string {
	return fmt.Sprintf("restart with %s unfinished keys (graceful stop, start → serving them)", report.Format(float64(n), "keys"))
}

// open starts a fresh instance of a contender (nothing inherited from the
// previous workload).
func (b *bench) open(ctx context.Context, name string) (peers.Queue, func(), error) {
	dir, err := os.MkdirTemp(b.cfg.dir, strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(name)+"-")
	if err != nil {
		return nil, nil, err
	}
	var q peers.Queue
	cleanup := func() { os.RemoveAll(dir) }
	switch name {
	case batonQ:
		s, err := baton.Start(ctx, b.cfg.bin, dir)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		return peers.Baton{Client: s.Client, Name: "side"}, func() { s.Close(); cleanup() }, nil
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
	for _, sh := range cycleShapes {
		w := wSideCycle(sh[0], sh[1])
		if err := with(func(q peers.Queue) error {
			done := b.step(name + ": " + w)
			r, err := peers.Cycle(ctx, q, "cyc", sh[0], sh[1], b.cfg.dur)
			if err != nil && (name == batonQ || ctx.Err() != nil) {
				return fmt.Errorf("%s: %w", w, err)
			}
			done()
			if err != nil {
				// A peer that fails under the load (etcd answers "request
				// timed out" to 64 callers racing for the same keys) keeps
				// the keys it acked before; the failure is a figure too.
				fmt.Fprintf(b.log, "batonbench: %s: %s stopped by an error: %v\n", name, w, err)
				b.record(name, w, "stopped by an error", 1, "count")
			}
			b.record(name, w, mRate, r.Rate(), "keys/s")
			if r.P50 > 0 {
				b.record(name, w, "round p50", r.P50, "ms")
				b.record(name, w, "round p99", r.P99, "ms")
			}
			return nil
		}); err != nil {
			return err
		}
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

// collapseAnnouncements is workload 2's size: the etcd queue gets a tenth
// (each of its announcements is a write through raft and a fsync'd WAL; a
// million would take minutes on this machine).
func (b *bench) collapseAnnouncements(name string) int {
	if name == etcdQueue {
		return b.cfg.collapse / 10
	}
	return b.cfg.collapse
}

// crash is workload 4 for baton: 2 adders (batches of 1000) and 4 workers
// (leases of 100) run the cycle
// against a baton-queue process, which is SIGKILLed halfway and restarted;
// then the queue is drained. A key whose Add was answered OK must be acked
// before the crash or delivered after it; keys whose Add or Ack was in
// flight at the kill are uncertain and not counted.
func (b *bench) crash(ctx context.Context) error {
	return b.withServer(ctx, func(s *baton.Server) error {
		done := b.step(wSideCrash)
		const batch, queue = 1000, "crash"
		var (
			mu                   sync.Mutex
			added, acked, unsure = map[string]bool{}, map[string]bool{}, map[string]bool{}
			next                 int
			wg                   sync.WaitGroup
		)
		runCtx, stop := context.WithCancel(ctx)
		for range 2 {
			wg.Go(func() {
				for runCtx.Err() == nil {
					mu.Lock()
					first := next
					next += batch
					mu.Unlock()
					ks := refs.Keys("crs", first, batch)
					_, err := s.Client.Add(runCtx, queue, ks, client.AddOptions{})
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
		for w := range 4 {
			wg.Go(func() {
				for runCtx.Err() == nil {
					// Leases of 100 keys: the workers fall behind the adders, so
					// the kill finds keys pending and leased, not only acked.
					ls, err := s.Client.Lease(runCtx, queue, client.LeaseOptions{Worker: fmt.Sprintf("w%d", w), MaxItems: 100, Wait: 20 * time.Millisecond, Duration: 2 * time.Second})
					if err != nil {
						return
					}
					acks := make([]client.Ack, len(ls))
					for i, l := range ls {
						acks[i] = client.Ack{Key: l.Key, Token: l.Token, Outcome: client.Success()}
					}
					if len(acks) == 0 {
						continue
					}
					res, err := s.Client.Ack(runCtx, queue, acks)
					mu.Lock()
					for i, a := range acks {
						switch {
						case err != nil:
							unsure[a.Key] = true
						case res[i].Status == client.OK:
							acked[a.Key] = true
						}
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		time.Sleep(b.cfg.dur / 2) // the cycle runs; the kill lands mid-flight
		if _, err := s.Restart(ctx); err != nil {
			stop()
			wg.Wait()
			return fmt.Errorf("restart: %w", err)
		}
		stop()
		wg.Wait()
		drained := map[string]bool{}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ls, err := s.Client.Lease(ctx, queue, client.LeaseOptions{Worker: "drain", MaxItems: batch, Wait: 300 * time.Millisecond, Duration: time.Minute})
			if err != nil {
				return fmt.Errorf("drain: %w", err)
			}
			acks := make([]client.Ack, len(ls))
			for i, l := range ls {
				drained[l.Key] = true
				acks[i] = client.Ack{Key: l.Key, Token: l.Token, Outcome: client.Success()}
			}
			if len(acks) > 0 {
				if _, err := s.Client.Ack(ctx, queue, acks); err != nil {
					return fmt.Errorf("drain: %w", err)
				}
				continue
			}
			st, err := s.Client.Stats(ctx, queue)
			if err != nil {
				return err
			}
			if len(st) == 0 || st[0].GetPending()+st[0].GetLeased()+st[0].GetDelayed() == 0 {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("drain: keys still held two minutes after the restart")
			}
		}
		lost := 0
		for k := range added {
			if !acked[k] && !drained[k] && !unsure[k] {
				lost++
			}
		}
		done()
		fmt.Fprintf(b.log, "batonbench: crash: %d keys added, %d acked before the kill, %d drained after it, %d uncertain\n", len(added), len(acked), len(drained), len(unsure))
		b.record(batonQ, wSideCrash, "keys added (answered OK) before the kill", float64(len(added)), "keys")
		b.record(batonQ, wSideCrash, "of which acked before the kill", float64(len(acked)), "keys")
		b.record(batonQ, wSideCrash, mLost, float64(lost), "keys")
		return nil
	})
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

// sideTargets judges issue 6's targets.
func (b *bench) sideTargets() []report.Target {
	var ts []report.Target
	add := func(t report.Target, ok ...bool) {
		for _, o := range ok {
			t.Missing = t.Missing || !o
		}
		ts = append(ts, t)
	}
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
