package peers

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestFailoverCountsLostAndTimesTakeover: each kill of the fake leader
// drops every other pending key that was never leased (a leased key whose
// Ack failed is uncertain, not lost, so none of those is dropped), and the
// survivors "take over" 30 ms later. Failover must count exactly the
// dropped keys as lost, and time each takeover from the kill.
func TestFailoverCountsLostAndTimesTakeover(t *testing.T) {
	q := &droppy{crashy: newCrashy(), everLeased: map[string]bool{}}
	const down = 30 * time.Millisecond
	restarts := 0
	spec := FailoverSpec{
		Kills: 3,
		KillLeader: func(context.Context) (func(context.Context) error, error) {
			q.kill()
			time.AfterFunc(down, func() { _ = q.restart(context.Background()) })
			return func(context.Context) error { restarts++; return nil }, nil
		},
		Settled: func(context.Context) error { return nil },
		Between: 50 * time.Millisecond,
		Quiet:   100 * time.Millisecond,
	}
	r, err := Failover(t.Context(), q, spec)
	if err != nil {
		t.Fatal(err)
	}
	if r.Added == 0 || r.Acked == 0 || q.dropped == 0 {
		t.Fatalf("the load did too little to test: %+v, %d dropped", r, q.dropped)
	}
	if r.Lost != q.dropped {
		t.Errorf("%d lost, want the %d keys the kills dropped (%+v)", r.Lost, q.dropped, r)
	}
	if len(r.Takeover) != 3 || restarts != 3 {
		t.Fatalf("%d takeovers timed and %d restarts, want 3 each", len(r.Takeover), restarts)
	}
	for i, d := range r.Takeover {
		if d < down || d > down+time.Second {
			t.Errorf("takeover %d took %v; the queue was down %v", i+1, d, down)
		}
	}
	if r.Left != 0 {
		t.Errorf("left %d after the drain", r.Left)
	}
}

// droppy is crashy with slower Leases (the failover's workers, more than
// the crash workload's and in smaller leases, would otherwise keep up
// with its adders) and a kill that drops only keys never leased.
type droppy struct {
	*crashy
	everLeased map[string]bool // under crashy.mu
}

func (d *droppy) Lease(ctx context.Context, worker string, max int, wait time.Duration) ([]Leased, error) {
	time.Sleep(20 * time.Millisecond)
	ls, err := d.crashy.Lease(ctx, worker, max, wait)
	d.mu.Lock()
	for _, l := range ls {
		d.everLeased[l.Key] = true
	}
	d.mu.Unlock()
	return ls, err
}

func (d *droppy) Unfinished(context.Context) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int64(len(d.pending) + len(d.leased)), nil
}

// kill takes the fake down: every other never-leased pending key is
// dropped; leased keys are pending again, as a new leader offers them.
func (d *droppy) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = true
	var kept []string
	fresh := 0
	for _, k := range d.pending {
		if !d.everLeased[k] {
			fresh++
			if fresh%2 == 0 {
				d.dropped++
				continue
			}
		}
		kept = append(kept, k)
	}
	for k := range d.leased {
		kept = append(kept, k)
	}
	clear(d.leased)
	d.pending = kept
}

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{ms(5), 0.99, 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.99, 4 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 0.99, 20 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 0.5, 10 * time.Millisecond},
	} {
		if got := Quantile(c.in, c.q); got != c.want {
			t.Errorf("Quantile(%v, %v) = %v, want %v", c.in, c.q, got, c.want)
		}
	}
}

// TestNATSClusterFailover: three clustered NATS servers, children of this
// test binary, hold an R3 stream through two kills of its leader. (Whether
// JetStream loses keys is the benchmark's finding; this checks the
// plumbing: the cluster forms, the leader is found and killed, the client
// moves, the killed server comes back and the cluster settles.)
func TestNATSClusterFailover(t *testing.T) {
	t.Setenv("PEERS_TEST_SERVE", "1")
	c, err := StartNATSCluster(t.Context(), []string{os.Args[0]}, KindNATS, t.TempDir(), 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r, err := Failover(t.Context(), c.Queue, FailoverSpec{Kills: 2, KillLeader: c.KillLeader, Settled: c.Settled, Between: 200 * time.Millisecond, Quiet: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if len(r.Takeover) != 2 || r.Added == 0 || r.Left != 0 {
		t.Fatalf("%+v: want two takeovers, keys added, none left", r)
	}
}
