package main

import (
	"strings"
	"testing"
)

// TestReplicatedTargets: baton-r3's best batch-1000 cycle is judged
// against one member's (0.5×), nats-r3's (1×) and nats-r3 with sync
// always (10×), all of the same run; the failover's p99 against 2 s; and
// a single lost key fails. Each is n/a while a figure is missing.
func TestReplicatedTargets(t *testing.T) {
	b := &bench{cfg: config{replicated: true}}
	verdicts := func() map[string]string {
		out := map[string]string{}
		for _, tg := range b.replicatedTargets() {
			out[tg.Name] = tg.Verdict()
		}
		return out
	}
	for name, v := range verdicts() {
		if v != "n/a" {
			t.Errorf("with nothing measured, %q is %s", name, v)
		}
	}
	cyc := func(c string, callers int, rate float64) {
		b.record(c, wSideCycle(1000, callers), mRate, rate, "keys/s")
	}
	cyc(batonQ, 1, 200_000)
	cyc(batonQ, 64, 300_000)
	cyc(batonR3, 1, 140_000)
	cyc(batonR3, 64, 160_000) // best: 160,000 ≥ 0.5 × 300,000
	cyc(natsR3, 64, 20_000)
	cyc(natsR3Sync, 64, 17_000) // 10 × 17,000 > 160,000
	b.record(batonR3, wFailover, "p99", 1.2, "s")
	b.record(batonR3, wFailover, mLost, 0, "keys")
	want := map[string]string{
		"baton-r3 cycle, batch 1000 (best of 1 and 64 callers) vs one member":            "PASS",
		"baton-r3 cycle, batch 1000 (best of 1 and 64 callers) vs nats-r3":               "PASS",
		"baton-r3 cycle, batch 1000 (best of 1 and 64 callers) vs nats-r3 (sync always)": "MISS",
		"baton-r3 failover p99 (kill → first acknowledged Add)":                          "PASS",
		"acknowledged keys lost over the failovers":                                      "PASS",
	}
	got := verdicts()
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%q: %s, want %s", name, got[name], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	worse := &bench{cfg: config{replicated: true}}
	worse.record(batonR3, wFailover, mLost, 1, "keys")
	worse.record(batonR3, wFailover, "p99", 2.5, "s")
	for _, tg := range worse.replicatedTargets() {
		if strings.Contains(tg.Name, "failover") && tg.Verdict() != "MISS" {
			t.Errorf("%q with 1 key lost and a p99 of 2.5 s: %s, want MISS", tg.Name, tg.Verdict())
		}
	}

	var doc strings.Builder
	if err := writeDoc(&doc, docData{Records: b.set.Records, Targets: b.targets(), Replicated: true, Kills: 20}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Replicated: three members", "is SIGKILLed 20 times", "| baton-r3 | failover | p99 |"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("doc lacks %q", want)
		}
	}
}
