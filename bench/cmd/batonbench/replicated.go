package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/bench/internal/peers"
	"github.com/batonrun/baton/bench/internal/report"
	queueclient "github.com/batonrun/baton/client/queue"
)

// The replicated contenders: three members each, three processes each.
const (
	batonR3 = "baton-r3"
	// batonR3Stream is baton-r3 through the work stream, as batonStream
	// is baton: workload 1's cycle shapes only.
	batonR3Stream = "baton-r3 (work stream)"
	natsR3        = "nats-r3"
	natsR3Sync    = "nats-r3 (sync always)"

	wFailover = "failover"
)

// replicatedContenders in the order they run.
var replicatedContenders = []string{batonR3, batonR3Stream, natsR3, natsR3Sync}

// replicas is the members per replicated contender.
const replicas = 3

// openReplicated starts a fresh three-member contender. Baton's client
// dials the leader first (a deployment's list names any member first; a
// follower forwards each call, one hop more), and retries UNAVAILABLE
// within the call on the next member, as users' clients do; nats' client
// is connected to every server and reconnects.
func (b *bench) openReplicated(ctx context.Context, name string, leaseFor time.Duration) (peers.Queue, peers.FailoverSpec, func(), error) {
	dir, err := os.MkdirTemp(b.cfg.dir, dirName(name)+"-")
	if err != nil {
		return nil, peers.FailoverSpec{}, nil, err
	}
	switch name {
	case batonR3, batonR3Stream:
		c, err := baton.StartCluster(ctx, b.cfg.bin, dir, replicas)
		if err != nil {
			os.RemoveAll(dir)
			return nil, peers.FailoverSpec{}, nil, err
		}
		lead, err := c.Leader(ctx)
		if err == nil {
			var cl *queueclient.Client
			if cl, err = c.Dial(lead, queueclient.WithBackoff(queueclient.Backoff{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond})); err == nil {
				spec := peers.FailoverSpec{
					KillLeader: func(ctx context.Context) (func(context.Context) error, error) {
						i, err := c.Leader(ctx)
						if err != nil {
							return nil, err
						}
						if err := c.Members[i].Kill(); err != nil {
							return nil, err
						}
						return func(ctx context.Context) error { return c.Restart(ctx, i) }, nil
					},
					Settled: func(ctx context.Context) error { _, err := c.Leader(ctx); return err },
				}
				if name == batonR3Stream {
					q := &peers.BatonStream{Client: cl, Name: "r3", LeaseFor: leaseFor}
					return q, spec, func() { q.Close(); cl.Close(); c.Close(); os.RemoveAll(dir) }, nil
				}
				return peers.Baton{Client: cl, Name: "r3", LeaseFor: leaseFor}, spec, func() { cl.Close(); c.Close(); os.RemoveAll(dir) }, nil
			}
		}
		c.Close()
		os.RemoveAll(dir)
		return nil, peers.FailoverSpec{}, nil, err
	case natsR3, natsR3Sync:
		command, err := serveCommand()
		if err != nil {
			os.RemoveAll(dir)
			return nil, peers.FailoverSpec{}, nil, err
		}
		kind := peers.KindNATS
		if name == natsR3Sync {
			kind = peers.KindNATSSync
		}
		c, err := peers.StartNATSCluster(ctx, command, kind, dir, replicas, leaseFor)
		if err != nil {
			os.RemoveAll(dir)
			return nil, peers.FailoverSpec{}, nil, err
		}
		spec := peers.FailoverSpec{KillLeader: c.KillLeader, Settled: c.Settled}
		return c.Queue, spec, func() { c.Close(); os.RemoveAll(dir) }, nil
	}
	os.RemoveAll(dir)
	return nil, peers.FailoverSpec{}, nil, fmt.Errorf("unknown contender %q", name)
}

// replicated is the replicated queue's workloads: workload 1's
// cycle shapes against each three-member contender (baton-r3 also through
// the work stream), then the failover workload against baton-r3 and
// nats-r3.
func (b *bench) replicated(ctx context.Context) error {
	for _, name := range b.cfg.chosen(replicatedContenders) {
		for _, sh := range cycleShapes {
			if err := func() error {
				q, _, closeQ, err := b.openReplicated(ctx, name, time.Minute)
				if err != nil {
					return err
				}
				defer closeQ()
				return b.sideCycle(ctx, name, q, sh, isBaton(name))
			}(); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	for _, name := range b.cfg.chosen([]string{batonR3, natsR3}) {
		if err := b.failover(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// failoverKills is how often the failover workload kills the leader.
func (b *bench) failoverKills() int {
	if b.cfg.quick {
		return 3
	}
	return 20
}

// failover is the failover workload (peers.Failover): the leader SIGKILLed
// under load, again and again; the time from each kill to the first Add a
// survivor acknowledges, and the acknowledged keys lost over all kills.
func (b *bench) failover(ctx context.Context, name string) error {
	q, spec, closeQ, err := b.openReplicated(ctx, name, crashLease)
	if err != nil {
		return err
	}
	defer closeQ()
	spec.Kills, spec.Between, spec.Quiet = b.failoverKills(), 500*time.Millisecond, crashLease+3*time.Second
	done := b.step(fmt.Sprintf("%s: %s, %d kills of the leader", name, wFailover, spec.Kills))
	r, err := peers.Failover(ctx, q, spec)
	if err != nil {
		return fmt.Errorf("%s: %w", wFailover, err)
	}
	done()
	fmt.Fprintf(b.log, "batonbench: %s failover: %+v\n", name, r)
	b.record(name, wFailover, "p50", peers.Quantile(r.Takeover, 0.5).Seconds(), "s")
	b.record(name, wFailover, "p99", peers.Quantile(r.Takeover, 0.99).Seconds(), "s")
	b.record(name, wFailover, "kills", float64(len(r.Takeover)), "count")
	b.record(name, wFailover, "keys added (answered OK)", float64(r.Added), "keys")
	b.record(name, wFailover, "uncertain (a call failed)", float64(r.Unsure), "keys")
	b.record(name, wFailover, mLost, float64(r.Lost), "keys")
	if r.Left >= 0 {
		b.record(name, wFailover, "kept but not delivered in the drain", float64(r.Left), "keys")
	}
	return nil
}

// replicatedTargets judges the replicated queue's targets.
func (b *bench) replicatedTargets() []report.Target {
	var ts targetList
	add := ts.add
	r3, ok := b.bestCycle(batonR3, 1000)
	one, ok1 := b.bestCycle(batonQ, 1000)
	add(report.Target{Name: "baton-r3 cycle, batch 1000 (best of 1 and 64 callers) vs one member", Measured: r3, Limit: 0.5 * one, Unit: "keys/s", AtLeast: true,
		Basis: "0.5 × " + batonQ}, ok, ok1)
	for _, p := range []struct {
		name   string
		factor float64
	}{{natsR3, 1}, {natsR3Sync, 10}} {
		pc, ok2 := b.bestCycle(p.name, 1000)
		add(report.Target{Name: "baton-r3 cycle, batch 1000 (best of 1 and 64 callers) vs " + p.name, Measured: r3, Limit: p.factor * pc, Unit: "keys/s", AtLeast: true,
			Basis: fmt.Sprintf("%g × %s", p.factor, p.name)}, ok, ok2 && pc > 0)
	}
	p99, ok1 := b.set.Get(batonR3, wFailover, "p99")
	add(report.Target{Name: "baton-r3 failover p99 (kill → first acknowledged Add)", Measured: p99, Limit: 2, Unit: "s", Basis: "absolute, 1 s election timeout"}, ok1)
	l, ok1 := b.set.Get(batonR3, wFailover, mLost)
	add(report.Target{Name: "acknowledged keys lost over the failovers", Measured: l, Limit: 0, Unit: "keys", Basis: "none"}, ok1)
	return ts
}
