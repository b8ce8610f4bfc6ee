package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/batonrun/baton/bench/internal/load"
	"github.com/batonrun/baton/bench/internal/pipeline"
	"github.com/batonrun/baton/bench/internal/report"
)

// pipeConfig is workload 7: Baton's whole path, etcd → observer
// → queue → worker, against etcd's own figures of the same run.
type pipeConfig struct {
	enabled, only     bool
	observer, worker  string // the binaries (default: beside -bin)
	rate              int    // changes a second of the latency workload
	dur               time.Duration
	sets              int // ReplicaSets of the cold start
	concurrency       int // baton-worker's --concurrency in the cold start
	probeConcurrency  int // the latency probe's reconciles at once
	coldStartDeadline time.Duration
}

// pipelineFlags registers workload 7's flags.
func pipelineFlags(fs *flag.FlagSet, p *pipeConfig) {
	fs.BoolVar(&p.enabled, "pipeline", true, "also run workload 7: etcd put → reconcile start, and the ReplicaSet cold start, through baton-observer, baton-queue and a worker")
	fs.BoolVar(&p.only, "pipeline-only", false, "run workload 7 alone (for working on it; the other targets show n/a)")
	fs.StringVar(&p.observer, "observer-bin", "", "the baton-observer binary (default: beside -bin)")
	fs.StringVar(&p.worker, "worker-bin", "", "the baton-worker binary (default: beside -bin)")
	fs.IntVar(&p.sets, "sets", 0, "ReplicaSets of the cold start (default 10,000; 500 with -quick)")
}

// The pipeline's workloads. The latency figures are measured on the same
// puts: the reference (etcd's watch, etcd's put call) and baton's reconcile
// start, so the target compares like with like.
func wPipeLatency(rate int) string {
	return fmt.Sprintf("pipeline: etcd put → reconcile start, %s changes/s (observer, queue, worker)", report.Format(float64(rate), "changes/s"))
}

func wEtcdWatch(rate int) string {
	return fmt.Sprintf("etcd put → watch event on another connection, the same puts (%s/s)", report.Format(float64(rate), "changes/s"))
}

func wEtcdPut(rate int) string {
	return fmt.Sprintf("etcd put call, the same puts (%s/s)", report.Format(float64(rate), "changes/s"))
}

func wColdStart(sets int) string {
	return fmt.Sprintf("cold start: %s ReplicaSets × 3 pods until every set reports 3 ready (observer, queue, worker)", report.Format(float64(sets), "sets"))
}

func wEtcdAlone(sets, writers int) string {
	return fmt.Sprintf("etcd alone: the write requests of the %s-set cold start, %d writers", report.Format(float64(sets), "sets"), writers)
}

const mVsEtcdAlone = "time / etcd alone"

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// settle fills in the defaults that depend on -quick and -bin.
func (p *pipeConfig) settle(quick bool, bin string) error {
	p.rate, p.dur, p.concurrency, p.probeConcurrency = 1000, 10*time.Second, 64, 16
	p.coldStartDeadline = 10 * time.Minute
	if p.sets <= 0 {
		p.sets = 10_000
		if quick {
			p.sets = 500
		}
	}
	if quick {
		p.dur = 2 * time.Second
	}
	for _, b := range []struct {
		path *string
		name string
	}{{&p.observer, "baton-observer"}, {&p.worker, "baton-worker"}} {
		if *b.path == "" {
			*b.path = filepath.Join(filepath.Dir(bin), b.name)
		}
		abs, err := filepath.Abs(*b.path)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return fmt.Errorf("%w (run `make build` first, or pass -pipeline=false)", err)
		}
		*b.path = abs
	}
	return nil
}

// pipeline runs workload 7: the latency first (on a stack of its own), then
// the cold start (on a fresh one), then etcd alone replaying the cold
// start's writes.
func (b *bench) pipeline(ctx context.Context) error {
	p := &b.cfg.pipe
	if !p.enabled && !p.only {
		return nil
	}
	if err := p.settle(b.cfg.quick, b.cfg.bin); err != nil {
		return err
	}
	bins := pipeline.Bins{Queue: b.cfg.bin, Observer: p.observer, Worker: p.worker}

	name := wPipeLatency(p.rate)
	done := b.step(name)
	s, err := pipeline.StartStack(ctx, b.cfg.dir, bins, pipeline.ProbeRules)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	lat, err := pipeline.Latency(ctx, s, pipeline.LatencyConfig{Rate: p.rate, Duration: p.dur, Concurrency: p.probeConcurrency})
	s.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	done()
	b.record(batonQ, name, mP50, load.Percentile(lat.Reconcile, 50), "ms")
	b.record(batonQ, name, mP99, load.Percentile(lat.Reconcile, 99), "ms")
	b.record(batonQ, name, "changes", float64(lat.Puts), "changes")
	b.record(batonQ, name, "put rate achieved", lat.PutRate(), "changes/s")
	if lat.ObserverAdd > 0 {
		b.record(batonQ, name, "observer: observed → Add accepted, mean", ms(lat.ObserverAdd), "ms")
	}
	if lat.QueueWait > 0 {
		b.record(batonQ, name, "queue: ready → leased, mean", ms(lat.QueueWait), "ms")
	}
	b.record(ref, wEtcdWatch(p.rate), mP50, load.Percentile(lat.Watch, 50), "ms")
	b.record(ref, wEtcdWatch(p.rate), mP99, load.Percentile(lat.Watch, 99), "ms")
	b.record(ref, wEtcdPut(p.rate), mP50, load.Percentile(lat.Put, 50), "ms")
	b.record(ref, wEtcdPut(p.rate), mP99, load.Percentile(lat.Put, 99), "ms")

	name = wColdStart(p.sets)
	done = b.step(name)
	fmt.Fprintln(b.log)
	cold, err := pipeline.ColdStart(ctx, b.cfg.dir, bins, pipeline.ColdConfig{Sets: p.sets, Concurrency: p.concurrency, Timeout: p.coldStartDeadline},
		func(msg string) { fmt.Fprintf(b.log, "batonbench:   %s\n", msg) })
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	done()
	b.record(batonQ, name, "time", cold.Converge.Seconds(), "s")
	b.record(batonQ, name, "etcd write requests", float64(cold.Requests), "requests")
	b.record(batonQ, name, "keys written", float64(cold.KeyWrites), "keys")
	b.record(batonQ, name, "reconciles", cold.Reconciles, "reconciles")
	b.record(batonQ, name, mVsEtcdAlone, cold.Ratio(), "x")
	b.record(ref, wEtcdAlone(p.sets, cold.Writers), "time", cold.Alone.Seconds(), "s")
	return nil
}

// pipelineTargets is the target of workload 7. The cold start has
// none: its ratio to etcd alone is a figure (mVsEtcdAlone).
func (b *bench) pipelineTargets() []report.Target {
	p := b.cfg.pipe
	if !p.enabled && !p.only {
		return nil
	}
	lat, ok1 := b.set.Get(batonQ, wPipeLatency(p.rate), mP50)
	watch, ok2 := b.set.Get(ref, wEtcdWatch(p.rate), mP50)
	t := report.Target{Name: "etcd put → reconcile start p50", Measured: lat, Limit: watch + 1, Unit: "ms",
		Basis: "etcd put → watch event p50 + 1 ms, the same puts"}
	t.Missing = !ok1 || !ok2
	return []report.Target{t}
}

// pipelineDoc is workload 7's section of docs/benchmarks.md.
func (b *bench) pipelineDoc() string {
	p := b.cfg.pipe
	if !p.enabled && !p.only {
		return ""
	}
	var out strings.Builder
	if err := pipelineTemplate.Execute(&out, map[string]any{
		"Rate": report.Format(float64(p.rate), "changes/s"), "Dur": p.dur, "Puts": report.Format(float64(p.rate)*p.dur.Seconds(), "changes"),
		"Warm": report.Format(float64(p.rate/5), "changes"), "Probe": p.probeConcurrency,
		"Sets": report.Format(float64(p.sets), "sets"), "Pods": report.Format(float64(3*p.sets), "pods"),
		"Conc": p.concurrency, "Writers": 2 * p.concurrency, "Deadline": p.coldStartDeadline,
	}); err != nil {
		return "(workload 7's section failed to render: " + err.Error() + ")\n\n"
	}
	return out.String()
}

var pipelineTemplate = template.Must(template.New("pipeline").Parse(`## Pipeline (workload 7)

Baton only, against its own ceilings: etcd's figures measured in the same
run, on the same embedded etcd. etcd v3.6.16 runs in the bench process
(` + "`services/etcdembed`" + `, default fsync, data under ` + "`bench/out/`" + `); ` + "`bin/baton-queue`" + `,
` + "`bin/baton-observer`" + ` and (for the cold start) ` + "`bin/baton-worker`" + ` run as child
processes on loopback, each as deployed (` + "`--log-level warn`" + `, otherwise their
defaults). The code is ` + "`bench/internal/pipeline`" + `.

**put → reconcile start.** The observer runs with one rule, every change
under ` + "`/registry/probes/`" + ` to the queue ` + "`probe`" + `. A probe worker in the bench
process, the worker SDK's ` + "`manager`" + ` with {{.Probe}} reconciles at once,
leases from that queue; its reconcile only notes the time it started. The
bench puts {{.Puts}} distinct small objects ({{.Rate}} a second for {{.Dur}},
each put at its slot of the schedule in a goroutine of its own, so a slow
put does not delay the next; each object new, so no two announcements
collapse into one reconcile), after a warm-up of {{.Warm}} more. For each put,
timed from just before the put call on the same clock:

- **pipeline: etcd put → reconcile start** (baton): until the probe's
  Reconcile of that key begins: etcd's commit, its watch event to the
  observer, the observer's cache and outbox, the Add to the queue, the
  worker's long-polled Lease. The queue hands out a key as soon as the Add
  has put it in memory; the Add's answer to the observer waits for its
  fsync (a crash before it loses nothing acknowledged: the observer still
  holds the key and sends it again). **put rate achieved** says whether the
  schedule was kept.
- **etcd put → watch event** (reference): until the same put's event
  arrives on a plain clientv3 watch of the prefix over a connection of its
  own, in the bench process: etcd's own notification latency. Measured on
  the same puts at the same moments as the pipeline, so both see the same
  etcd, disk and load.
- **etcd put call** (reference): until the put call returns.

Where the pipeline's time goes, as means over the measured puts from the
services' own histograms: **observer: observed → Add accepted**
(` + "`baton_observer_add_latency_seconds`" + `: from the watch event reaching the
observer to the queue's OK, its fsync included) and **queue: ready →
leased** (` + "`baton_queue_queue_duration_seconds`" + `: how long a key waited for the
worker's Lease).

The target: the pipeline's p50 ≤ the watch's p50 + 1 ms.

**Cold start.** A fresh stack with the observer's built-in rules and one
` + "`baton-worker`" + ` running the ReplicaSet controller and the pod runtime
(` + "`--controllers replicasets,pods --concurrency {{.Conc}}`" + `, the
setting of ` + "`BenchmarkColdStart`" + `). The bench creates {{.Sets}} ReplicaSets of 3
replicas in transactions of 100 from one writer, and times from the first
create until a watch of ` + "`/registry/replicasets/`" + ` has seen every set report
3 ready pods for generation 1 ({{.Pods}} pods created and started; given up
after {{.Deadline}}). **etcd write requests** are the revisions etcd
committed in that time (a transaction is one request: the creates in
hundreds, each controller write, the observer's checkpoints), **keys
written** the puts and deletes in them, **reconciles** the worker's
` + "`baton_worker_reconcile_total`" + ` at convergence.

**etcd alone** (reference) is "the same number of writes" taken literally:
after the cold start the bench reads those very write requests back from
etcd's history (same keys, same values, same grouping into transactions),
stops everything, and sends them to a fresh etcd with nothing else running,
from {{.Writers}} concurrent writers (the worker's reconciles at once: 2
controllers × {{.Conc}}), each request as a plain put or delete or an
unconditional transaction (the controllers' compare-and-swap guards left
out), in any order. **time / etcd alone** is the cold start's time over
that: what the observer, the queue, the worker and the chain of
dependencies (a set's pods exist only after its reconcile, run only after
theirs) cost beyond etcd's own writes. No target bounds it.

` + "`-pipeline=false`" + ` skips this workload; ` + "`-pipeline-only`" + ` runs it alone, and
` + "`-sets N`" + ` changes the cold start's size.

`))
