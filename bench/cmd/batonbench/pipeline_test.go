package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/bench/internal/pipeline"
	"github.com/batonrun/baton/bench/internal/profile"
	"github.com/batonrun/baton/bench/internal/report"
	gpprof "github.com/google/pprof/profile"
)

// TestPipelineTargetAndDoc: workload 7's targets, each n/a until its
// figures are measured: the put → reconcile start p50 within etcd's put →
// watch p50 + 0.5 ms; the cold start within 2 × etcd alone replaying its
// writes; at most 6 reconciles per set.
func TestPipelineTargetAndDoc(t *testing.T) {
	b := &bench{cfg: config{pipe: pipeConfig{enabled: true, rate: 1000, sets: 10_000, concurrency: 64, probeConcurrency: 16}}}
	b.cfg.pipe.dur = 10e9
	verdicts := func() map[string]report.Target {
		out := map[string]report.Target{}
		for _, tg := range b.pipelineTargets() {
			out[tg.Name] = tg
		}
		return out
	}
	const tLat, tCold = "etcd put → reconcile start p50", tColdVsAlone + " (10,000 ReplicaSets)"
	ts := verdicts()
	if len(ts) != 3 {
		t.Fatalf("targets %v", ts)
	}
	for name, tg := range ts {
		if !tg.Missing {
			t.Errorf("before any figure %q is %s", name, tg.Verdict())
		}
	}
	b.record(batonQ, wPipeLatency(1000), mP50, 1.4, "ms")
	b.record(ref, wEtcdWatch(1000), mP50, 1.0, "ms")
	if tg := verdicts()[tLat]; tg.Missing || tg.Limit != 1.5 || !tg.Pass() {
		t.Fatalf("p50 1.4 ms against a watch p50 of 1.0 ms: %+v", tg)
	}
	b.record(batonQ, wPipeLatency(1000), mP50, 1.6, "ms") // a later, worse figure: the best is kept
	if tg := verdicts()[tLat]; !tg.Pass() {
		t.Fatalf("the best figure must be kept: %+v", tg)
	}
	b.record(ref, wEtcdWatch(1000), mP50, 0.8, "ms") // 1.4 > 0.8 + 0.5
	if tg := verdicts()[tLat]; tg.Verdict() != "MISS" {
		t.Fatalf("p50 1.4 ms against a watch p50 of 0.8 ms: %+v", tg)
	}

	b.record(batonQ, wColdStart(10_000), "time", 30, "s")
	if tg := verdicts()[tCold]; !tg.Missing {
		t.Fatalf("cold start without etcd alone: %+v", tg)
	}
	b.record(ref, wEtcdAlone(10_000, 128), "time", 14, "s")
	if tg := verdicts()[tCold]; tg.Verdict() != "MISS" || tg.Limit != 28 {
		t.Fatalf("30 s against etcd alone's 14 s: %+v", tg)
	}
	// Later figures: each keeps its lowest time, 27 s against 2 × 14 s.
	b.record(ref, wEtcdAlone(10_000, 128), "time", 16, "s")
	b.record(batonQ, wColdStart(10_000), "time", 27, "s")
	if tg := verdicts()[tCold]; tg.Verdict() != "PASS" || tg.Limit != 28 || tg.Measured != 27 {
		t.Fatalf("27 s against etcd alone's 14 s: %+v", tg)
	}
	b.record(batonQ, wColdStart(10_000), mReconcilesPer, 7.8, "reconciles/set")
	if tg := verdicts()[tColdReconciles]; tg.Verdict() != "MISS" || tg.Limit != 6 {
		t.Fatalf("7.8 reconciles per set: %+v", tg)
	}
	b2 := &bench{cfg: b.cfg}
	b2.record(batonQ, wColdStart(10_000), mReconcilesPer, 5.5, "reconciles/set")
	for _, tg := range b2.pipelineTargets() {
		if tg.Name == tColdReconciles && tg.Verdict() != "PASS" {
			t.Fatalf("5.5 reconciles per set: %+v", tg)
		}
	}

	doc := b.pipelineDoc()
	for _, want := range []string{"## Pipeline (workload 7)", "10,000 distinct small objects", "1,000 a second for 10s",
		"10,000 ReplicaSets", "30,000 pods", "--concurrency 64", "from 128 concurrent writers",
		"the watch's p50 + 0.5 ms", "its time ≤ 2 × etcd alone's, and ≤ 6\nreconciles per set", "**etcd reads per reconcile**",
		"`-profile` takes CPU profiles"} {
		if !strings.Contains(doc, want) {
			t.Errorf("pipeline section lacks %q:\n%s", want, doc)
		}
	}

	b.cfg.pipe.enabled = false
	if ts, doc := b.pipelineTargets(), b.pipelineDoc(); ts != nil || doc != "" {
		t.Fatalf("-pipeline=false still judges %v or documents %q", ts, doc)
	}
}

// TestColdStartRecordsAndProfiles: the cold start's figures per set and
// per reconcile, by queue; its profiles are written to profileDir with a
// top.txt, and listed in the report.
func TestColdStartRecordsAndProfiles(t *testing.T) {
	dir := t.TempDir()
	b := &bench{cfg: config{pipe: pipeConfig{enabled: true, rate: 1000, sets: 100, concurrency: 64, profile: true, profileDir: dir}}, log: &strings.Builder{}}
	fn := &gpprof.Function{ID: 1, Name: "encoding/json.Unmarshal"}
	loc := &gpprof.Location{ID: 1, Line: []gpprof.Line{{Function: fn}}}
	p := &gpprof.Profile{
		SampleType: []*gpprof.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample:     []*gpprof.Sample{{Location: []*gpprof.Location{loc}, Value: []int64{1, int64(time.Second)}}},
		Location:   []*gpprof.Location{loc}, Function: []*gpprof.Function{fn},
	}
	cold := pipeline.ColdResult{Sets: 100, Reconciles: 650, ReconcilesBy: map[string]float64{"replicasets": 250, "pods": 400}, Reads: 700, ReadsKnown: true,
		Profiles: []profile.Result{{Name: "baton-worker", Profile: p, CPU: time.Second, Wall: 2 * time.Second}}}
	if err := b.keepProfiles(cold); err != nil {
		t.Fatal(err)
	}
	if got := cold.PerSet(cold.ReconcilesBy["pods"]); got != 4 {
		t.Errorf("pods per set %v", got)
	}
	if got := cold.ReadsPerReconcile(); got < 1.07 || got > 1.08 {
		t.Errorf("reads per reconcile %v", got)
	}
	doc := b.pipelineDoc()
	if want := "- **baton-worker: 1.0 s of CPU over 2.0 s (0.50 cores)**: `encoding/json.Unmarshal` 100.0% / 100.0%\n"; !strings.Contains(doc, want) {
		t.Errorf("doc lacks %q:\n%s", want, doc)
	}
	for _, f := range []string{"baton-worker.pprof", "top.txt"} {
		if _, err := readFile(dir, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestPipelineNeedsBinaries(t *testing.T) {
	var p pipeConfig
	err := p.settle(true, t.TempDir()+"/baton-queue")
	if err == nil || !strings.Contains(err.Error(), "-pipeline=false") {
		t.Fatalf("missing baton-observer: %v", err)
	}
	if p.sets != 500 || p.dur.Seconds() != 2 {
		t.Fatalf("quick defaults: %+v", p)
	}
}

func readFile(dir, name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
