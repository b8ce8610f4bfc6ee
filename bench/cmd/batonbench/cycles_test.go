package main

import (
	"strings"
	"testing"

	"github.com/batonrun/baton/bench/internal/report"
)

// TestInterleave: the plaintext and mTLS cycles alternate, the order
// flipped every round, so neither gets the machine's quieter stretches.
func TestInterleave(t *testing.T) {
	for rounds, want := range map[int]string{0: "", 1: "PT", 2: "PTTP", 3: "PTTPPT"} {
		if got := strings.Join(interleave(rounds, "P", "T"), ""); got != want {
			t.Errorf("interleave(%d) = %q, want %q", rounds, got, want)
		}
	}
}

// TestCycleTLSTarget: the mTLS cycle is judged against the plaintext cycle
// of the same run and shape at 0.8×, on the best figure of each, and is
// n/a while either is missing.
func TestCycleTLSTarget(t *testing.T) {
	find := func(b *bench) report.Target {
		t.Helper()
		for _, tg := range b.targets() {
			if tg.Name == tCycleTLS {
				return tg
			}
		}
		t.Fatalf("no %q target", tCycleTLS)
		return report.Target{}
	}
	b := &bench{}
	if tg := find(b); tg.Verdict() != "n/a" {
		t.Fatalf("with no cycle measured: %s", tg.Verdict())
	}
	b.record(batonQ, wCycle, mRate, 500_000, "keys/s")
	if tg := find(b); tg.Verdict() != "n/a" {
		t.Fatalf("with the plaintext cycle only: %s", tg.Verdict())
	}
	b.record(batonQ, wCycleTLS, mRate, 390_000, "keys/s")
	if tg := find(b); tg.Verdict() != "MISS" || tg.Limit != 400_000 || tg.Line() != tCycleTLS+": 390,000 keys/s, 0.780× plaintext (target ≥0.8×): MISS" {
		t.Fatalf("0.78×: %s, %+v", tg.Line(), tg)
	}
	// A later, better mTLS run and a worse plaintext one: each figure is the
	// best of its runs.
	b.record(batonQ, wCycleTLS, mRate, 430_000, "keys/s")
	b.record(batonQ, wCycle, mRate, 450_000, "keys/s")
	tg := find(b)
	if tg.Verdict() != "PASS" || tg.Reference != 500_000 || tg.Measured != 430_000 {
		t.Fatalf("0.86×: %s, %+v", tg.Line(), tg)
	}

	var doc strings.Builder
	if err := writeDoc(&doc, docData{Rounds: 2, Records: b.set.Records, Targets: b.targets()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| " + tCycleTLS + " | 430,000 keys/s | ≥ 400,000 keys/s (0.8 × the plaintext cycle",
		"- " + tCycleTLS + ": 430,000 keys/s, 0.860× plaintext (target ≥0.8×): PASS\n",
		"| baton | " + wCycleTLS + " | rate | 430,000 | keys/s |",
		"ran\n2 time(s) over plaintext and as many over mTLS, alternating",
	} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("doc lacks %q", want)
		}
	}
}
