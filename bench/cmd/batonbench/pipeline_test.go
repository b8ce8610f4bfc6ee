package main

import (
	"strings"
	"testing"
)

func TestPipelineTargetAndDoc(t *testing.T) {
	b := &bench{cfg: config{pipe: pipeConfig{enabled: true, rate: 1000, sets: 10_000, concurrency: 64, probeConcurrency: 16}}}
	b.cfg.pipe.dur = 10e9
	if ts := b.pipelineTargets(); len(ts) != 1 || !ts[0].Missing {
		t.Fatalf("before any figure: %+v", ts)
	}
	b.record(batonQ, wPipeLatency(1000), mP50, 1.4, "ms")
	b.record(ref, wEtcdWatch(1000), mP50, 0.5, "ms")
	ts := b.pipelineTargets()
	if len(ts) != 1 || ts[0].Missing || ts[0].Limit != 1.5 || !ts[0].Pass() {
		t.Fatalf("p50 1.4 ms against a watch p50 of 0.5 ms: %+v", ts)
	}
	b.record(batonQ, wPipeLatency(1000), mP50, 1.6, "ms") // a later, worse figure: the best is kept
	if ts := b.pipelineTargets(); !ts[0].Pass() {
		t.Fatalf("the best figure must be kept: %+v", ts)
	}
	doc := b.pipelineDoc()
	for _, want := range []string{"## Pipeline (workload 7)", "10,000 distinct small objects", "1,000 a second for 10s",
		"10,000 ReplicaSets", "30,000 pods", "--concurrency 64", "from 128 concurrent writers"} {
		if !strings.Contains(doc, want) {
			t.Errorf("pipeline section lacks %q:\n%s", want, doc)
		}
	}

	b.cfg.pipe.enabled = false
	if ts, doc := b.pipelineTargets(), b.pipelineDoc(); ts != nil || doc != "" {
		t.Fatalf("-pipeline=false still judges %v or documents %q", ts, doc)
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
