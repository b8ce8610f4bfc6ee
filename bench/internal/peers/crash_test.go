package peers

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

// TestMain lets the tests re-execute their own binary as the server child
// of a Proc, as the bench binary does with its serve subcommand.
func TestMain(m *testing.M) {
	if os.Getenv("PEERS_TEST_SERVE") == "1" {
		os.Exit(ServeMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

var errDown = errors.New("server down")

// crashy is an in-memory queue whose kill loses what a careless server
// would: every other pending key (its Add was answered OK), the leases
// (their keys become pending again, as volatile leases do) and the last
// ten acks (their keys come back). Calls fail while it is down.
type crashy struct {
	mu              sync.Mutex
	down            bool
	pending         []string
	leased          map[string]bool
	acked           []string
	dropped, undone int
}

func newCrashy() *crashy { return &crashy{leased: map[string]bool{}} }

func (c *crashy) Add(_ context.Context, keys []string) error {
	time.Sleep(time.Millisecond) // a write's cost
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return errDown
	}
	c.pending = append(c.pending, keys...)
	return nil
}

func (c *crashy) Lease(_ context.Context, _ string, max int, _ time.Duration) ([]Leased, error) {
	// Slower than Add (1000 keys a millisecond each): the workers fall
	// behind, so that the kill finds keys pending.
	time.Sleep(2 * time.Millisecond)
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return nil, errDown
	}
	n := min(max, len(c.pending))
	out := make([]Leased, n)
	for i, k := range c.pending[:n] {
		out[i] = Leased{Key: k}
		c.leased[k] = true
	}
	c.pending = c.pending[n:]
	c.mu.Unlock()
	return out, nil
}

func (c *crashy) Ack(_ context.Context, _ string, ls []Leased) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return errDown
	}
	for _, l := range ls {
		delete(c.leased, l.Key)
		c.acked = append(c.acked, l.Key)
	}
	return nil
}

func (c *crashy) Close() error { return nil }

func (c *crashy) kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = true
	var kept []string
	for i, k := range c.pending {
		if i%2 == 1 {
			c.dropped++
			continue
		}
		kept = append(kept, k)
	}
	for k := range c.leased {
		kept = append(kept, k)
	}
	clear(c.leased)
	c.undone = min(10, len(c.acked))
	kept = append(kept, c.acked[len(c.acked)-c.undone:]...)
	c.pending = kept
	return nil
}

func (c *crashy) restart(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = false
	return nil
}

// counting adds a count of unfinished keys to crashy.
type counting struct{ *crashy }

func (c counting) Unfinished(context.Context) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.pending) + len(c.leased)), nil
}

func TestCrashCountsLostAndAcksUndone(t *testing.T) {
	for _, counts := range []bool{false, true} {
		c := newCrashy()
		var q Queue = c
		if counts {
			q = counting{c}
		}
		r, err := Crash(t.Context(), q, CrashSpec{Run: 50 * time.Millisecond, Kill: c.kill, Restart: c.restart, Quiet: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.Added == 0 || r.Acked == 0 || c.dropped == 0 || c.undone != 10 {
			t.Fatalf("counts %v: the cycle did too little to test: %+v, %d dropped", counts, r, c.dropped)
		}
		if r.Lost != c.dropped || r.Again != c.undone {
			t.Errorf("counts %v: %d lost and %d acked keys delivered again, want %d and %d (%+v)", counts, r.Lost, r.Again, c.dropped, c.undone, r)
		}
		if want := map[bool]int64{false: -1, true: 0}[counts]; r.Left != want {
			t.Errorf("counts %v: left %d, want %d", counts, r.Left, want)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS("Name:\tx\nVmPeak:\t  9 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n")
	if err != nil || got != 12345<<10 {
		t.Fatalf("%d, %v; want %d", got, err, 12345<<10)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := parseVmRSS(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// startRemote runs kind in a child: this test binary, re-executed.
func startRemote(t *testing.T, kind string, leaseFor time.Duration) *Remote {
	t.Setenv("PEERS_TEST_SERVE", "1")
	r, err := StartRemote(t.Context(), []string{os.Args[0]}, kind, t.TempDir(), leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// A NATS server SIGKILLed mid-cycle comes back on the same store and is
// drained; then it restarts with unfinished keys, and its child reports its
// heap and RSS. (Whether it lost keys is the benchmark's finding, not this
// test's: it checks the plumbing.)
func TestRemoteNATSCrashAndRestart(t *testing.T) {
	r := startRemote(t, KindNATS, time.Second)
	ctx := t.Context()
	c, err := Crash(ctx, r.Queue, r.CrashSpec(300*time.Millisecond, 3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", c)
	if c.Added < 2*crashBatch || c.Acked == 0 || c.Drained == 0 || c.Left != 0 {
		t.Fatalf("%+v: want keys added, acked and drained, none left", c)
	}
	checkRestartAndMemory(t, r)
}

func TestRemoteEtcdRestart(t *testing.T) {
	checkRestartAndMemory(t, startRemote(t, KindEtcd, time.Second))
}

func checkRestartAndMemory(t *testing.T, r *Remote) {
	ctx := t.Context()
	if err := r.Queue.Add(ctx, keys("big/", 0, 500)); err != nil {
		t.Fatal(err)
	}
	took, err := r.Restart(ctx, 500)
	if err != nil || took <= 0 {
		t.Fatalf("restart: %v, %v", took, err)
	}
	ls, err := r.Queue.Lease(ctx, "w", 1000, time.Second)
	if err != nil || len(ls) != 500 {
		t.Fatalf("after the restart: %d keys leased, %v; want 500", len(ls), err)
	}
	if err := r.Queue.Ack(ctx, "w", ls); err != nil {
		t.Fatal(err)
	}
	h, err := r.Proc.Heap(ctx)
	if err != nil || h == 0 {
		t.Fatalf("heap %d, %v", h, err)
	}
	rss, err := r.Proc.RSS()
	if err != nil || rss < h/2 {
		t.Fatalf("RSS %d (heap %d), %v", rss, h, err)
	}
}
