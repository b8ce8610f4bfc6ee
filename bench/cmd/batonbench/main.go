// Command batonbench is `make bench`: it starts the real baton-queue binary
// on loopback with a temporary data directory and measures durable Adds,
// collapsed Adds, the Add→Lease→Ack cycle (over plaintext and, alternating
// with it, mutual TLS), single-Add latency, restart time
// with a million unfinished keys and heap per pending key; in the same run it
// measures the references the targets are ratios of (one fdatasync, an empty
// gRPC call, gRPC carrying 1000-key messages, client-go's workqueue heap per
// key); and, unless -pipeline=false, workload 7 through
// baton-observer, baton-queue and a worker beside etcd's own figures
// (pipeline.go). It prints one table with every target's PASS or MISS, writes the
// records as JSON to BENCH_OUT (or -out) and, with -doc, regenerates
// docs/benchmarks.md; the plot of the cycle rates is drawn from that JSON
// (batonbench plot redraws it from a saved file). -only and -contenders run
// some of the workloads and contenders (for working on them; the other
// targets show n/a), and -profile takes CPU profiles of every process during
// workload 7's cold start.
//
//	batonbench -bin bin/baton-queue [-quick] [-out file.json] [-doc docs/benchmarks.md] [-plot file.png]
//	batonbench -bin bin/baton-queue -only cycle,pipeline -contenders "baton,baton (work stream),nats" [-profile]
//	batonbench plot -in file.json -out file.png
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/batonrun/baton/bench/internal/report"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the run's shape; -quick shrinks every figure for a smoke run.
type config struct {
	bin, dir, out, doc string
	rev                string // what the binary was built from, for the report
	quick              bool
	rounds             int           // of the paired workloads; the best figure of each is kept
	dur                time.Duration // each timed workload
	bigKeys            int           // restart and heap
	cycleKeys          int
	batchKeys          int // durable batch-1000 Adds, per caller count
	collapse           int // workload 2's announcements
	changes            int // workload 3's change-while-leased events
	plot               string
	side               bool       // run the side-by-side contenders
	replicated         bool       // run the three-member contenders (replicated.go)
	replicatedOnly     bool       // run them alone, with the one-member cycle they are ratios of
	pipe               pipeConfig // workload 7 (pipeline.go)
	// only is the groups of workloads that run (-only, or what the other
	// flags leave); contenders, if not nil, the side-by-side and
	// replicated contenders that run (-contenders).
	only       map[string]bool
	contenders map[string]bool
}

// The groups of workloads -only selects.
const (
	gQueue      = "queue"      // baton's own workloads and the references they are ratios of
	gCycle      = "cycle"      // workload 1 against the side-by-side contenders
	gSide       = "side"       // workloads 2–6 against them
	gReplicated = "replicated" // the three-member contenders' cycles and the failover
	gPipeline   = "pipeline"   // workload 7
)

var groups = []string{gQueue, gCycle, gSide, gReplicated, gPipeline}

// runs reports whether the group g runs.
func (c config) runs(g string) bool { return c.only[g] }

// chosen is the contenders of names that run, in their order.
func (c config) chosen(names []string) []string {
	if c.contenders == nil {
		return names
	}
	var out []string
	for _, n := range names {
		if c.contenders[n] {
			out = append(out, n)
		}
	}
	return out
}

// selectWorkloads settles only and contenders from the flags: -only names
// the groups outright; without it -peers=false, -replicated=false and
// -pipeline=false take theirs out, and -replicated-only and -pipeline-only
// keep theirs alone (the replicated contenders with one-member baton's
// cycles, which their targets are ratios of). side, replicated and
// pipe.enabled then say whether those parts run.
func (c *config) selectWorkloads(only, contenders string) error {
	c.only = map[string]bool{}
	switch {
	case only != "":
		for g := range strings.SplitSeq(only, ",") {
			g = strings.TrimSpace(g)
			if !slices.Contains(groups, g) {
				return fmt.Errorf("-only: unknown group %q (known: %s)", g, strings.Join(groups, ", "))
			}
			c.only[g] = true
		}
	case c.pipe.only:
		c.only[gPipeline] = true
	case c.replicatedOnly:
		c.only[gCycle], c.only[gReplicated] = true, true
		if contenders == "" {
			contenders = strings.Join(append([]string{batonQ}, replicatedContenders...), ",")
		}
	default:
		for _, g := range groups {
			c.only[g] = true
		}
		if !c.side {
			c.only[gCycle], c.only[gSide] = false, false
		}
		if !c.replicated {
			c.only[gReplicated] = false
		}
		if !c.pipe.enabled {
			c.only[gPipeline] = false
		}
	}
	if contenders != "" {
		known := append(append([]string{}, sideContenders...), replicatedContenders...)
		c.contenders = map[string]bool{}
		for n := range strings.SplitSeq(contenders, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(known, n) {
				return fmt.Errorf("-contenders: unknown contender %q (known: %s)", n, strings.Join(known, ", "))
			}
			c.contenders[n] = true
		}
	}
	c.side = c.runs(gCycle) || c.runs(gSide)
	c.replicated = c.runs(gReplicated)
	c.pipe.enabled, c.pipe.only = c.runs(gPipeline), false
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == plotCmd {
		return runPlot(args[1:], stderr)
	}
	var c config
	fs := flag.NewFlagSet("batonbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.bin, "bin", "bin/baton-queue", "the baton-queue binary to measure")
	fs.StringVar(&c.dir, "dir", "", "directory for the queue's data (default: the system temp dir); put it on the disk you mean to measure")
	fs.StringVar(&c.out, "out", os.Getenv("BENCH_OUT"), "write the records as JSON to this file (default $BENCH_OUT)")
	fs.StringVar(&c.doc, "doc", "", "regenerate this Markdown report, e.g. docs/benchmarks.md")
	fs.StringVar(&c.rev, "rev", "", "what the binary was built from (scripts/bench.sh gives the commit's subject and date), shown in the report as Markdown")
	fs.BoolVar(&c.quick, "quick", false, "smoke run: short workloads, 100,000 keys instead of 1,000,000, one round")
	fs.StringVar(&c.plot, "plot", "", "draw the cycle throughput per contender as a PNG here, e.g. docs/benchmarks-cycle.png")
	fs.BoolVar(&c.side, "peers", true, "also run the side-by-side contenders: client-go, NATS JetStream, a queue on etcd")
	fs.BoolVar(&c.replicated, "replicated", true, "also run the replicated contenders (three members each: baton-r3, nats-r3) and the failover workload")
	fs.BoolVar(&c.replicatedOnly, "replicated-only", false, "run the replicated contenders alone, with one-member baton's cycles (for working on them; the other targets show n/a)")
	pipelineFlags(fs, &c.pipe)
	var only, contenders string
	fs.StringVar(&only, "only", "", "run only these groups of workloads, comma-separated: "+strings.Join(groups, ", ")+" (the others' targets show n/a)")
	fs.StringVar(&contenders, "contenders", "", `run only these side-by-side and replicated contenders, comma-separated, e.g. "baton,baton (work stream),nats,nats (sync always)"`)
	fs.IntVar(&c.rounds, "rounds", 0, "rounds of the paired reference/baton workloads, keeping each figure's best (default 2, 1 with -quick)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		// Running the benchmarks anyway would take minutes to answer a typo.
		fmt.Fprintf(stderr, "batonbench: unknown argument %q\nusage: batonbench [flags]  |  batonbench %s -in FILE.json -out FILE.png\n", fs.Arg(0), plotCmd)
		return 2
	}
	if err := c.selectWorkloads(only, contenders); err != nil {
		fmt.Fprintln(stderr, "batonbench:", err)
		return 2
	}
	c.dur, c.bigKeys, c.cycleKeys, c.batchKeys = 3*time.Second, 1_000_000, 1_000_000, 2_000_000
	c.collapse, c.changes = 1_000_000, 10_000
	if c.quick {
		c.dur, c.bigKeys, c.cycleKeys, c.batchKeys = 500*time.Millisecond, 100_000, 100_000, 200_000
		c.collapse, c.changes = 100_000, 1_000
	}
	if c.rounds <= 0 {
		c.rounds = 2
		if c.quick {
			c.rounds = 1
		}
	}
	bin, err := filepath.Abs(c.bin)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "batonbench: %v (run `make build` first, or pass -bin)\n", err)
		return 2
	}
	c.bin = bin
	if c.dir == "" {
		c.dir = os.TempDir()
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "batonbench:", err)
		return 1
	}
	c.pipe.profileDir = filepath.Join(c.dir, "profiles") // beside the run's own directory, which is removed
	dir, err := os.MkdirTemp(c.dir, "batonbench-")
	if err != nil {
		fmt.Fprintln(stderr, "batonbench:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	c.dir = dir

	mach := describeMachine() // before the run loads the machine itself
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	b := &bench{cfg: c, log: stderr}
	if err := b.all(ctx); err != nil {
		fmt.Fprintln(stderr, "batonbench:", err)
		return 1
	}
	targets := b.targets()
	took := time.Since(started)

	fmt.Fprintln(stdout)
	_ = report.WriteTable(stdout, b.set.Records)
	fmt.Fprintln(stdout)
	_ = report.WriteTargets(stdout, targets)
	_ = report.WriteRelative(stdout, targets)
	fmt.Fprintf(stdout, "\n(%s run in %v)\n", map[bool]string{true: "quick", false: "full"}[c.quick], took.Round(time.Second))

	js, err := report.JSON(b.set.Records, targets)
	if err != nil {
		fmt.Fprintln(stderr, "batonbench: JSON:", err)
		return 1
	}
	if c.out != "" {
		if err := os.WriteFile(c.out, js, 0o644); err != nil {
			fmt.Fprintln(stderr, "batonbench: write JSON:", err)
			return 1
		}
		fmt.Fprintln(stderr, "batonbench: wrote", c.out)
	}
	// A pipeline-only run has no cycle figures to draw.
	if c.plot != "" && c.runs(gCycle) {
		if err := plotFromJSON(c.plot, js); err != nil {
			fmt.Fprintln(stderr, "batonbench: plot:", err)
			return 1
		}
		fmt.Fprintln(stderr, "batonbench: wrote", c.plot)
	}
	if c.doc != "" {
		var doc strings.Builder
		if err := writeDoc(&doc, docData{Machine: mach, Quick: c.quick, Rounds: c.rounds, Rev: c.rev, Took: took, Records: b.set.Records, Targets: targets, Started: started, Side: c.side, Replicated: c.replicated, Kills: b.failoverKills(), Plot: c.plot, Dur: c.dur, Pipeline: b.pipelineDoc()}); err != nil {
			fmt.Fprintln(stderr, "batonbench: render doc:", err)
			return 1
		}
		if err := os.WriteFile(c.doc, []byte(doc.String()), 0o644); err != nil {
			fmt.Fprintln(stderr, "batonbench: write doc:", err)
			return 1
		}
		fmt.Fprintln(stderr, "batonbench: wrote", c.doc)
	}
	return 0
}
