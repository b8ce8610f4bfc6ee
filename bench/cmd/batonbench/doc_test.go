package main

import (
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/bench/internal/report"
)

func TestWriteDoc(t *testing.T) {
	var set report.Set
	set.Add(batonQ, wCycle, mRate, 123456, "keys/s")
	d := docData{
		Machine: machine{CPUs: 2, CPU: "test cpu", Memory: "1.0 GiB", Go: "go1.26", Kernel: "linux 6", Load: "1.00 2.00 3.00"},
		Quick:   true, Started: time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC), Took: 9 * time.Second,
		Records: set.Records,
		Targets: []report.Target{
			{Name: "cycle", Measured: 123456, Limit: 300000, Unit: "keys/s", AtLeast: true, Basis: "absolute"},
			{Name: "heap", Measured: 1, Limit: 2, Unit: "B/key", Missing: true},
		},
	}
	var b strings.Builder
	if err := writeDoc(&b, d); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{
		"Run on **2026-11-29 21:00 UTC**", "a smoke run", "noisy", "| CPUs (`nproc`) | 2 × test cpu |",
		"| load average (1, 5, 15 min) at the start | 1.00 2.00 3.00 |",
		"| baton | " + wCycle + " | rate | 123,456 | keys/s |",
		"| cycle | 123,456 keys/s | ≥ 300,000 keys/s (absolute) | 0.412 | **MISS** |",
		"Not met in this run: cycle; heap (not measured).",
		"## What each number means",
		"## The machine, measured once", "| append 64 B + fdatasync | 4,530/s",
		"## What the runs have shown",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
}

func TestRunNeedsBinary(t *testing.T) {
	var out, errs strings.Builder
	if code := run([]string{"-bin", t.TempDir() + "/missing"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "make build") {
		t.Fatalf("exit %d, stderr %q", code, errs.String())
	}
}

// TestRunRefusesStrayArguments: `batonbench healthcheck` once started the
// benchmarks (minutes of work); a word batonbench does not know is a usage
// error.
func TestRunRefusesStrayArguments(t *testing.T) {
	for _, args := range [][]string{{"healthcheck"}, {"-quick", "extra"}} {
		var out, errs strings.Builder
		if code := run(args, &out, &errs); code != 2 || !strings.Contains(errs.String(), "unknown argument") || !strings.Contains(errs.String(), "usage:") {
			t.Errorf("batonbench %v: exit %d, stderr %q; want 2 and a usage line", args, code, errs.String())
		}
	}
}
