package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

func open(t testing.TB, dir string, compact int64) *Broker {
	t.Helper()
	cfg := Config{Queue: workqueue.DefaultConfig(), CompactBytes: compact}
	b, err := Open(cfg, store.Options{Dir: dir, SegmentBytes: 4096}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTripAndRecovery(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := open(t, dir, 0)
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/k%03d", i)
	}
	q, c, err := b.Add(ctx, "pods", keys, AddOptions{})
	if err != nil || q != 500 || c != 0 {
		t.Fatalf("add: %d %d %v", q, c, err)
	}
	if q, c, _ := b.Add(ctx, "pods", keys[:10], AddOptions{}); q != 0 || c != 10 {
		t.Fatalf("re-add: queued %d collapsed %d, want 0 10", q, c)
	}
	grants, err := b.Lease(ctx, "pods", LeaseOptions{Worker: "w", Max: 100, Duration: time.Minute})
	if err != nil || len(grants) != 100 {
		t.Fatalf("lease: %d %v", len(grants), err)
	}
	acks := make([]AckItem, len(grants))
	for i, g := range grants {
		acks[i] = AckItem{Key: g.Key, Token: g.Token}
		if i%2 == 1 {
			acks[i].Outcome = workqueue.Outcome{Failed: true, Error: "boom"}
		}
	}
	ok, err := b.Ack(ctx, "pods", nil, acks)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range ok {
		if !v {
			t.Fatalf("ack %d refused", i)
		}
	}
	// Lease some more and crash (no Close): leases come back pending.
	if _, err := b.Lease(ctx, "pods", LeaseOptions{Worker: "w", Max: 10, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	b.j.Close() // stop the writer; nothing unflushed remains since every call waited
	b2 := open(t, dir, 0)
	defer b2.Close()
	st, err := b2.Stats(t.Context(), "pods", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := st[0].Pending + st[0].Delayed; got != 450 {
		t.Fatalf("after restart %d keys (%+v), want 450", got, st[0])
	}
	v := b2.inspect("pods", grants[1].Key)
	if v.Attempts != 1 || v.LastError != "boom" {
		t.Fatalf("failed key after restart: %+v", v)
	}
	if res, err := b2.Ack(ctx, "pods", nil, []AckItem{{Key: grants[3].Key, Token: grants[3].Token}}); err != nil || res[0] {
		t.Fatalf("stale token from before the restart: accepted=%v err=%v", res, err)
	}
	if b2.tokens.Next()>>seqBits <= b.tokens.Next()>>seqBits {
		t.Fatal("epoch did not grow across restart")
	}
}

func TestLongPollWakes(t *testing.T) {
	b := open(t, t.TempDir(), 0)
	defer b.Close()
	done := make(chan []workqueue.Grant)
	go func() {
		g, _ := b.Lease(context.Background(), "jobs", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute, Wait: 20 * time.Second})
		done <- g
	}()
	// Keep adding until the waiter answers: no sleep decides the outcome.
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		select {
		case g := <-done:
			if len(g) != 1 {
				t.Fatalf("woke with %v", g)
			}
			return
		case <-deadline:
			t.Fatal("long-poll Lease did not wake within 10s of an Add")
		case <-time.After(50 * time.Millisecond):
			if _, _, err := b.Add(t.Context(), "jobs", []string{fmt.Sprint("k", i)}, AddOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestDelayedKeyBecomesReadyByTimer(t *testing.T) {
	b := open(t, t.TempDir(), 0)
	defer b.Close()
	if _, _, err := b.Add(t.Context(), "q", []string{"k"}, AddOptions{Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	g, err := b.Lease(t.Context(), "q", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute, Wait: 10 * time.Second})
	if err != nil || len(g) != 1 {
		t.Fatalf("lease of a delayed key: %v %v", g, err)
	}
}

func TestCompactionKeepsState(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, 1<<10)
	ctx := t.Context()
	for round := range 50 {
		keys := make([]string, 50)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%02d/k%02d", round, i)
		}
		if _, _, err := b.Add(ctx, "q", keys, AddOptions{}); err != nil {
			t.Fatal(err)
		}
		g, _ := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 25, Duration: time.Minute})
		acks := make([]AckItem, len(g))
		for i := range g {
			acks[i] = AckItem{Key: g[i].Key, Token: g[i].Token}
		}
		if _, err := b.Ack(ctx, "q", nil, acks); err != nil {
			t.Fatal(err)
		}
	}
	for b.compacting.Load() {
		time.Sleep(time.Millisecond)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.snap"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v, want exactly one after compaction", snaps)
	}
	b2 := open(t, dir, 0)
	defer b2.Close()
	st, _ := b2.Stats(t.Context(), "q", ReadOptions{})
	if n := st[0].Pending; n != 50*25 {
		t.Fatalf("%d pending after compaction and restart, want %d", n, 50*25)
	}
}

// TestSnapshotDuringWrites takes snapshots while callers keep adding and
// acking, so the stepwise walk meets table resizes and moved keys; every
// key still held after the last acknowledged change must come back.
func TestSnapshotDuringWrites(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir, 1<<40) // no automatic compaction: the test takes them
	b.walkStep = 7           // many steps, so resizes fall between them
	ctx := t.Context()
	stop := make(chan struct{})
	errs := make(chan error, 1)
	want := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				keys := make([]string, 500)
				for j := range keys {
					keys[j] = fmt.Sprintf("w%d/%d-%d", w, i, j)
				}
				// Recorded before the Add: another worker may lease and ack
				// these keys before this one is back.
				mu.Lock()
				for _, k := range keys {
					want[k] = true
				}
				mu.Unlock()
				if _, _, err := b.Add(ctx, "q", keys, AddOptions{}); err != nil {
					errs <- err
					return
				}
				g, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 100, Duration: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				acks := make([]AckItem, len(g))
				for j := range g {
					acks[j] = AckItem{Key: g[j].Key, Token: g[j].Token}
				}
				if _, err := b.Ack(ctx, "q", nil, acks); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, a := range acks {
					delete(want, a.Key)
				}
				mu.Unlock()
			}
		})
	}
	for range 5 {
		if err := b.c.Compact(b.walk); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	b.j.Close() // a crash: recovery reads the last snapshot, taken during writes, and the log after it
	b2 := open(t, dir, 0)
	defer b2.Close()
	st, _ := b2.Stats(t.Context(), "q", ReadOptions{})
	if st[0].Pending != len(want) {
		t.Fatalf("recovered %d keys, want %d", st[0].Pending, len(want))
	}
	for k := range want {
		if v := b2.inspect("q", k); v.State != workqueue.Pending {
			t.Fatalf("key %s: %v after recovery", k, v.State)
		}
	}
}

// inspect is Inspect on a broker that leads, as every single member does:
// an error is a test's bug.
func (b *Broker) inspect(queue, key string) workqueue.View {
	v, err := b.Inspect(context.Background(), queue, key, ReadOptions{})
	if err != nil {
		panic(err)
	}
	return v
}
