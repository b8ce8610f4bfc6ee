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
	"github.com/batonrun/baton/bench/internal/profile"
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
	// profile: CPU profiles of every process during the cold start, written
	// to profileDir (run sets it: profiles under -dir, which the run's own
	// temporary directory is not).
	profile    bool
	profileDir string
}

// pipelineFlags registers workload 7's flags.
func pipelineFlags(fs *flag.FlagSet, p *pipeConfig) {
	fs.BoolVar(&p.enabled, "pipeline", true, "also run workload 7: etcd put → reconcile start, and the ReplicaSet cold start, through baton-observer, baton-queue and a worker")
	fs.BoolVar(&p.only, "pipeline-only", false, "run workload 7 alone (for working on it; the other targets show n/a)")
	fs.StringVar(&p.observer, "observer-bin", "", "the baton-observer binary (default: beside -bin)")
	fs.StringVar(&p.worker, "worker-bin", "", "the baton-worker binary (default: beside -bin)")
	fs.IntVar(&p.sets, "sets", 0, "ReplicaSets of the cold start (default 10,000; 500 with -quick)")
	fs.BoolVar(&p.profile, "profile", false, "take CPU profiles of every process during the cold start (baton-queue, baton-observer, baton-worker with --enable-pprof, and this process, which runs etcd) into DIR/profiles (-dir), and name their top functions in the report")
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

const (
	mVsEtcdAlone     = "time / etcd alone"
	mReconcilesPer   = "reconciles per set"
	mReadsPer        = "etcd reads (Range requests) per reconcile"
	mPipeTopN        = 8  // functions per process in the report
	profileTopN      = 30 // in profiles/top.txt
	tColdVsAlone     = "cold start vs etcd alone"
	tColdReconciles  = "cold start reconciles per ReplicaSet (pods included)"
	coldAloneFactor  = 2.0
	coldReconcileMax = 6.0
	pipeLatencySlack = 0.5 // ms over etcd's put → watch p50
)

// mReconcilesOf is the reconciles per set of one controller (its queue).
func mReconcilesOf(controller string) string {
	return "reconciles per set, queue " + controller
}

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
	if len(lat.Ready) > 0 && len(lat.Handoff) > 0 {
		b.record(batonQ, name, "put → ready in the queue, p50", load.Percentile(lat.Ready, 50), "ms")
		b.record(batonQ, name, "ready in the queue → reconcile start, p50", load.Percentile(lat.Handoff, 50), "ms")
	}
	b.record(ref, wEtcdWatch(p.rate), mP50, load.Percentile(lat.Watch, 50), "ms")
	b.record(ref, wEtcdWatch(p.rate), mP99, load.Percentile(lat.Watch, 99), "ms")
	b.record(ref, wEtcdPut(p.rate), mP50, load.Percentile(lat.Put, 50), "ms")
	b.record(ref, wEtcdPut(p.rate), mP99, load.Percentile(lat.Put, 99), "ms")

	name = wColdStart(p.sets)
	done = b.step(name)
	fmt.Fprintln(b.log)
	cold, err := pipeline.ColdStart(ctx, b.cfg.dir, bins, pipeline.ColdConfig{Sets: p.sets, Concurrency: p.concurrency, Timeout: p.coldStartDeadline, Profile: p.profile},
		func(msg string) { fmt.Fprintf(b.log, "batonbench:   %s\n", msg) })
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	done()
	b.record(batonQ, name, "time", cold.Converge.Seconds(), "s")
	b.record(batonQ, name, "etcd write requests", float64(cold.Requests), "requests")
	b.record(batonQ, name, "keys written", float64(cold.KeyWrites), "keys")
	b.record(batonQ, name, "reconciles", cold.Reconciles, "reconciles")
	b.record(batonQ, name, mReconcilesPer, cold.PerSet(cold.Reconciles), "reconciles/set")
	for _, c := range []string{"replicasets", "pods"} {
		b.record(batonQ, name, mReconcilesOf(c), cold.PerSet(cold.ReconcilesBy[c]), "reconciles/set")
	}
	b.record(batonQ, name, "reconciles ending in an error", cold.Failed, "reconciles")
	for _, c := range []string{"replicasets", "pods"} {
		if d, ok := cold.ReconcileMean[c]; ok {
			b.record(batonQ, name, "reconcile time, mean, queue "+c, ms(d), "ms")
		}
	}
	if cold.ReadWaits > 0 {
		b.record(batonQ, name, "observer: cache read wait for min_revision, mean", ms(cold.ReadWaitMean), "ms")
		b.record(batonQ, name, "observer: cache reads with a min_revision", cold.ReadWaits, "reads")
	}
	if cold.ReadsKnown {
		b.record(batonQ, name, "etcd reads (Range requests, every client)", cold.Reads, "requests")
		b.record(batonQ, name, mReadsPer, cold.ReadsPerReconcile(), "reads/reconcile")
	}
	b.record(batonQ, name, mVsEtcdAlone, cold.Ratio(), "x")
	b.record(ref, wEtcdAlone(p.sets, cold.Writers), "time", cold.Alone.Seconds(), "s")
	return b.keepProfiles(cold)
}

// keepProfiles writes the cold start's profiles to profileDir, each as
// PROCESS.pprof and their top functions to top.txt, and keeps them for the
// report.
func (b *bench) keepProfiles(cold pipeline.ColdResult) error {
	p := b.cfg.pipe
	for _, err := range cold.ProfileErrs {
		fmt.Fprintf(b.log, "batonbench: profile: %v\n", err)
	}
	if !p.profile || len(cold.Profiles) == 0 {
		return nil
	}
	for _, r := range cold.Profiles {
		path, err := r.Write(p.profileDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(b.log, "batonbench: wrote %s (%s)\n", path, r.Summary())
	}
	var top strings.Builder
	fmt.Fprintf(&top, "CPU profiles of the cold start of %s ReplicaSets, from the first create to convergence\n(children: until their last one-second chunk ended). Flat and cumulative shares of each process's CPU.\n\n",
		report.Format(float64(p.sets), "sets"))
	if err := profile.WriteTop(&top, cold.Profiles, profileTopN); err != nil {
		return err
	}
	path := filepath.Join(p.profileDir, "top.txt")
	if err := os.WriteFile(path, []byte(top.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(b.log, "batonbench: wrote", path)
	b.profiles = cold.Profiles
	return nil
}

// pipelineTargets are workload 7's targets: the latency against etcd's
// own put → watch, the cold start's time against etcd alone doing its
// writes, and its reconciles per set.
func (b *bench) pipelineTargets() []report.Target {
	p := b.cfg.pipe
	if !p.enabled && !p.only {
		return nil
	}
	var ts targetList
	lat, ok1 := b.set.Get(batonQ, wPipeLatency(p.rate), mP50)
	watch, ok2 := b.set.Get(ref, wEtcdWatch(p.rate), mP50)
	ts.add(report.Target{Name: "etcd put → reconcile start p50", Measured: lat, Limit: watch + pipeLatencySlack, Unit: "ms",
		Basis: fmt.Sprintf("etcd put → watch event p50 + %g ms, the same puts", pipeLatencySlack)}, ok1, ok2)
	cold, ok1 := b.set.Get(batonQ, wColdStart(p.sets), "time")
	alone, ok2 := b.set.Get(ref, wEtcdAlone(p.sets, 2*p.concurrency), "time")
	ts.add(report.Target{Name: fmt.Sprintf("%s (%s ReplicaSets)", tColdVsAlone, report.Format(float64(p.sets), "sets")), Measured: cold, Limit: coldAloneFactor * alone, Unit: "s",
		Basis: fmt.Sprintf("%g × etcd alone replaying the same write requests", coldAloneFactor)}, ok1, ok2 && alone > 0)
	per, ok1 := b.set.Get(batonQ, wColdStart(p.sets), mReconcilesPer)
	ts.add(report.Target{Name: tColdReconciles, Measured: per, Limit: coldReconcileMax, Unit: "reconciles/set",
		Basis: "absolute"}, ok1)
	return ts
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
		"Slack": pipeLatencySlack, "Factor": coldAloneFactor, "MaxRec": coldReconcileMax,
		"Profiles": profileList(b.profiles, mPipeTopN), "TopN": mPipeTopN,
	}); err != nil {
		return "(workload 7's section failed to render: " + err.Error() + ")\n\n"
	}
	return out.String()
}

// profileList is the report's list of profiles: each process's CPU and
// its top n functions by flat CPU.
func profileList(rs []profile.Result, n int) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "- **%s**", r.Summary())
		for i, f := range r.Top(n) {
			sep := ", "
			if i == 0 {
				sep = ": "
			}
			fmt.Fprintf(&b, "%s`%s` %.1f%% / %.1f%%", sep, f.Name, profile.Share(f.Flat, r.CPU), profile.Share(f.Cum, r.CPU))
		}
		b.WriteString("\n")
	}
	return b.String()
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
worker's Lease); and, per put, split at the moment its key became ready in
the queue (the lease's ` + "`pending_since`" + `, which the probe reads from
` + "`reconcile.Request.PendingSince`" + `; one machine, one clock): **put → ready in
the queue** (etcd's commit, the watch event, the observer's cache and
outbox, the Add reaching the queue's memory) and **ready in the queue →
reconcile start** (the lease, its push on the work stream, the worker's
dispatch), each a p50.

The target: the pipeline's p50 ≤ the watch's p50 + {{.Slack}} ms.

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
` + "`baton_worker_reconcile_total`" + ` at convergence (every result: success, error,
requeue), **reconciles per set** that over the sets, pods' reconciles
included, and split by queue (each controller leases from the queue of its
name: ` + "`replicasets`" + `, ` + "`pods`" + `); **reconciles ending in an error** are those
counted with the results error, terminal or panic (each is tried again).
**etcd reads (Range requests, every client)** is the Range requests etcd's
gRPC server handled from the first create to convergence, linearizable or
serializable alike (` + "`grpc_server_handled_total{grpc_service=\"etcdserverpb.KV\",grpc_method=\"Range\"}`" + `
of the embedded etcd, read before the first create and at convergence).
etcd does not label requests by client, so it holds: the worker's reads of
etcd (a reconcile reads its objects, its children and their owners from the
observer's cache; it reads etcd when a compare-and-swap loses, and to
confirm an owner is gone before deleting its children), and the observer's liveness
probe (one count-only Range every 500 ms, about 2 a second); the bench
reads nothing from etcd in that time (it follows the sets through a watch),
and the observer follows etcd through watches. **etcd reads per reconcile**
is that over the reconciles: about 1 is one read per reconcile.
**reconcile time, mean** is ` + "`baton_worker_reconcile_duration_seconds`" + ` over
each queue's reconciles, and **observer: cache read wait for min_revision,
mean** is ` + "`baton_observer_read_wait_seconds`" + `: how long the observer held a
Get or List until its cache reached the read's min_revision, over **cache
reads with a min_revision**. The difference between the two is the rest of
a reconcile: its etcd writes and the round trips themselves.

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
theirs) cost beyond etcd's own writes.

The cold start's targets: its time ≤ {{.Factor}} × etcd alone's, and ≤ {{.MaxRec}}
reconciles per set, pods' included.

{{if .Profiles}}**Profiles.** This run took CPU profiles of every process during the
cold start (` + "`-profile`" + `): ` + "`baton-queue`" + `, ` + "`baton-observer`" + ` and ` + "`baton-worker`" + ` through
their ` + "`--enable-pprof`" + ` (` + "`/debug/pprof/profile`" + ` in back-to-back one-second
chunks from the first create until the chunk in flight at convergence
ended, merged), and the bench process, which runs etcd (and the creates and
the convergence watch), through ` + "`runtime/pprof`" + ` from the first create to
convergence. Profiling costs each process a little CPU, so this run's cold
start figures carry it. The files are ` + "`bench/out/profiles/PROCESS.pprof`" + `
(` + "`go tool pprof -top bench/out/profiles/baton-worker.pprof`" + `), and
` + "`bench/out/profiles/top.txt`" + ` lists each process's top 30 functions. The
top {{.TopN}} of each by flat CPU (share of that process's CPU, flat / cumulative):

{{.Profiles}}
{{else}}` + "`-profile`" + ` takes CPU profiles of every process during the cold start
(the queue, the observer and the worker through their ` + "`--enable-pprof`" + `, the
bench process, which runs etcd, through ` + "`runtime/pprof`" + `) into
` + "`bench/out/profiles/`" + `, and lists each process's top functions here.

{{end}}` + "`-pipeline=false`" + ` skips this workload; ` + "`-pipeline-only`" + ` (or ` + "`-only pipeline`" + `)
runs it alone, and ` + "`-sets N`" + ` changes the cold start's size.

`))
