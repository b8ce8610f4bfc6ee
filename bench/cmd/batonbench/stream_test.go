package main

import (
	"strings"
	"testing"

	"github.com/batonrun/baton/bench/internal/report"
)

// TestStreamCycleTargets: the single-key cycle through the work stream is
// judged at 1× nats with sync always from 1 caller and 1× nats default
// from 64, each on the peer's figure of the same shape in the same run; n/a
// while a figure is missing or the peer moved no key; the unary baton
// figures do not count.
func TestStreamCycleTargets(t *testing.T) {
	one, many := tStreamCycle(1, natsSync), tStreamCycle(64, natsDefault)
	b := &bench{cfg: config{side: true}}
	find := func(name string) report.Target {
		t.Helper()
		for _, tg := range b.targets() {
			if tg.Name == name {
				return tg
			}
		}
		t.Fatalf("no target %q", name)
		return report.Target{}
	}
	for _, n := range []string{one, many} {
		if v := find(n).Verdict(); v != "n/a" {
			t.Errorf("%q with nothing measured: %s", n, v)
		}
	}
	cyc := func(c string, callers int, rate float64) {
		b.record(c, wSideCycle(1, callers), mRate, rate, "keys/s")
	}
	cyc(batonQ, 1, 5_000) // unary: not what the target judges
	cyc(natsSync, 1, 1_500)
	cyc(natsDefault, 64, 15_000)
	if v := find(one).Verdict(); v != "n/a" {
		t.Errorf("%q with only the unary baton figure: %s", one, v)
	}
	cyc(batonStream, 1, 1_800)
	cyc(batonStream, 64, 12_000)
	cyc(natsDefault, 1, 100_000) // another shape: not the 1-caller target's reference
	tg := find(one)
	if tg.Verdict() != "PASS" || tg.Limit != 1_500 || tg.Reference != 1_500 {
		t.Errorf("1 caller, 1,800 against 1,500: %s, %+v", tg.Line(), tg)
	}
	if want := one + ": 1,800 keys/s, 1.20× nats (sync always) (target ≥1×): PASS"; tg.Line() != want {
		t.Errorf("line %q, want %q", tg.Line(), want)
	}
	tg = find(many)
	if tg.Verdict() != "MISS" || tg.Limit != 15_000 {
		t.Errorf("64 callers, 12,000 against 15,000: %s, %+v", tg.Line(), tg)
	}
	// A later, better stream run: the best figure counts.
	cyc(batonStream, 64, 16_000)
	if tg := find(many); tg.Verdict() != "PASS" {
		t.Errorf("64 callers, 16,000 against 15,000: %s", tg.Line())
	}

	// nats moved no key: nothing to be a multiple of.
	zero := &bench{cfg: config{side: true}}
	zero.record(batonStream, wSideCycle(1, 1), mRate, 1_000, "keys/s")
	zero.record(natsSync, wSideCycle(1, 1), mRate, 0, "keys/s")
	for _, tg := range zero.sideTargets() {
		if tg.Name == one && tg.Verdict() != "n/a" {
			t.Errorf("against a peer that moved no key: %s", tg.Verdict())
		}
	}

	var doc strings.Builder
	if err := writeDoc(&doc, docData{Side: true, Records: b.set.Records, Targets: b.targets()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| " + one + " | 1,800 keys/s | ≥ 1,500 keys/s (1 × nats (sync always), the same shape) | 1.20 | **PASS** |",
		"- " + many + ": 16,000 keys/s, 1.07× nats (target ≥1×): PASS\n",
		"| baton (work stream) | " + wSideCycle(1, 64) + " | rate | 16,000 | keys/s |",
		"**baton (work stream)**",
	} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("doc lacks %q", want)
		}
	}
}

// TestSelectWorkloads: -only names the groups that run, -contenders the
// contenders; without them the older flags keep their meaning.
func TestSelectWorkloads(t *testing.T) {
	// The flags' defaults: -peers, -replicated and -pipeline on.
	flags := func() config { return config{side: true, replicated: true, pipe: pipeConfig{enabled: true}} }
	sel := func(c config, only, contenders string) config {
		t.Helper()
		if err := c.selectWorkloads(only, contenders); err != nil {
			t.Fatal(err)
		}
		return c
	}
	all := sel(flags(), "", "")
	for _, g := range groups {
		if !all.runs(g) {
			t.Errorf("by default %s does not run", g)
		}
	}
	if all.chosen(sideContenders) == nil || len(all.chosen(sideContenders)) != len(sideContenders) {
		t.Errorf("by default the contenders are %v", all.chosen(sideContenders))
	}

	c := sel(flags(), "cycle", "baton,baton (work stream), nats (sync always)")
	if !c.runs(gCycle) || c.runs(gQueue) || c.runs(gSide) || c.runs(gReplicated) || c.runs(gPipeline) || !c.side || c.replicated || c.pipe.enabled {
		t.Errorf("-only cycle: %+v", c.only)
	}
	if got := strings.Join(c.chosen(sideContenders), ","); got != "baton,baton (work stream),nats (sync always)" {
		t.Errorf("-contenders: %s", got)
	}

	ro := flags()
	ro.replicatedOnly = true
	r := sel(ro, "", "")
	if !r.runs(gCycle) || !r.runs(gReplicated) || r.runs(gSide) || r.runs(gQueue) || r.runs(gPipeline) {
		t.Errorf("-replicated-only: %+v", r.only)
	}
	if got := strings.Join(r.chosen(sideContenders), ","); got != batonQ {
		t.Errorf("-replicated-only runs the side-by-side contenders %s, want baton's cycles alone", got)
	}
	if got := r.chosen(replicatedContenders); len(got) != len(replicatedContenders) {
		t.Errorf("-replicated-only runs the replicated contenders %v", got)
	}

	po := flags()
	po.pipe.only = true
	p := sel(po, "", "")
	if !p.runs(gPipeline) || p.runs(gQueue) || p.side || p.replicated || !p.pipe.enabled {
		t.Errorf("-pipeline-only: %+v", p.only)
	}

	noPeers := flags()
	noPeers.side = false
	if err := noPeers.selectWorkloads("", ""); err != nil || noPeers.side || noPeers.runs(gCycle) || !noPeers.runs(gQueue) || !noPeers.replicated {
		t.Errorf("-peers=false: %+v, %v", noPeers.only, err)
	}

	for _, bad := range [][2]string{{"cycles", ""}, {"", "nats-sync"}} {
		var c config
		if err := c.selectWorkloads(bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "known:") {
			t.Errorf("-only %q -contenders %q: %v", bad[0], bad[1], err)
		}
	}
}
