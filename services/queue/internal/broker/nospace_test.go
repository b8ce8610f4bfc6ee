package broker

import (
	"fmt"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// fullFS is the real file system with a disk that can run out of space: once
// full, a write stores what still fits of it and fails with ENOSPC, as
// write(2) does. (The store's own tests use a simulated disk that also loses
// power; this one keeps the real files, so a restart reads what was written.)
type fullFS struct {
	store.OS
	mu   sync.Mutex
	free int64 // bytes writes may still add; < 0 is unlimited
}

func (f *fullFS) setFree(n int64) { f.mu.Lock(); f.free = n; f.mu.Unlock() }

func (f *fullFS) Create(name string) (store.File, error) {
	file, err := f.OS.Create(name)
	return &fullFile{File: file, fs: f}, err
}

func (f *fullFS) OpenAppend(name string) (store.File, error) {
	file, err := f.OS.OpenAppend(name)
	return &fullFile{File: file, fs: f}, err
}

type fullFile struct {
	store.File
	fs *fullFS
}

func (w *fullFile) Write(p []byte) (int, error) {
	w.fs.mu.Lock()
	n := len(p)
	if w.fs.free >= 0 {
		n = int(min(int64(n), w.fs.free))
		w.fs.free -= int64(n)
	}
	w.fs.mu.Unlock()
	m, err := w.File.Write(p[:n])
	if err == nil && m < len(p) {
		err = syscall.ENOSPC
	}
	return m, err
}

// TestFullDiskRefusalsLeaveNoTrace: with the disk full, an Add, an Ack and
// a Forget are refused with ErrNoSpace and change nothing, in memory or on
// disk, now, after space returns and after a restart; a retried Ack then
// finds its lease as it was (not LEASE_LOST). A lease that expires while the
// disk is full stays leased until its expiry can be written.
func TestFullDiskRefusalsLeaveNoTrace(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	fs := &fullFS{free: -1}
	cfg := Config{Queue: workqueue.DefaultConfig()}
	b, err := Open(cfg, store.Options{Dir: dir, FS: fs}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if b != nil {
			b.Close()
		}
	}()
	if _, _, err := b.Add(ctx, "q", []string{"k1", "k2", "k3", "k4"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	g, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute})
	if err != nil || len(g) != 1 || g[0].Key != "k1" {
		t.Fatalf("lease k1: %v %v", g, err)
	}
	short, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 1, Duration: 50 * time.Millisecond})
	if err != nil || len(short) != 1 || short[0].Key != "k2" {
		t.Fatalf("lease k2: %v %v", short, err)
	}
	stats := func() workqueue.Stats {
		st, err := b.Stats(t.Context(), "q", ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := st[0].Stats
		s.OldestPending, s.LongestLease, s.UnfinishedWork, s.LeasedBy = 0, 0, 0, nil
		return s
	}
	view := func(k string) string {
		v := b.inspect("q", k)
		return fmt.Sprintf("%v attempts=%d dirty=%v worker=%q error=%q", v.State, v.Attempts, v.Dirty, v.Worker, v.LastError)
	}
	keys := []string{"k1", "k2", "k3", "k4", "new1", "new2"}
	snapshot := func() map[string]string {
		m := map[string]string{}
		for _, k := range keys {
			m[k] = view(k)
		}
		return m
	}
	before, beforeStats := snapshot(), stats()

	fs.setFree(10) // the next frame gets 10 bytes in, then ENOSPC
	if _, _, err := b.Add(ctx, "q", []string{"new1", "new2", "k3"}, AddOptions{Priority: workqueue.High}); err != store.ErrNoSpace {
		t.Fatalf("Add on a full disk = %v, want ErrNoSpace", err)
	}
	if _, err := b.Ack(ctx, "q", nil, []AckItem{{Key: "k1", Token: g[0].Token}}); err != store.ErrNoSpace {
		t.Fatalf("Ack on a full disk = %v, want ErrNoSpace", err)
	}
	if _, err := b.Ack(ctx, "q", nil, []AckItem{{Key: "k1", Token: g[0].Token, Outcome: workqueue.Outcome{Failed: true, Error: "boom"}}}); err != store.ErrNoSpace {
		t.Fatalf("failure Ack on a full disk = %v, want ErrNoSpace", err)
	}
	if _, err := b.Forget(ctx, "q", []string{"k4"}); err != store.ErrNoSpace {
		t.Fatalf("Forget on a full disk = %v, want ErrNoSpace", err)
	}
	if _, _, err := b.Add(ctx, "fresh", []string{"x"}, AddOptions{}); err != store.ErrNoSpace {
		t.Fatalf("Add to a new queue on a full disk = %v, want ErrNoSpace", err)
	}
	if _, err := b.Stats(t.Context(), "fresh", ReadOptions{}); err == nil {
		t.Error("a queue whose first Add was refused exists")
	}
	if err := b.Ready(); err != store.ErrNoSpace {
		t.Errorf("Ready() on a full disk = %v, want ErrNoSpace", err)
	}
	// k2's lease lapses now, but its expiry cannot be written: it stays as
	// it was until it can (a lease that lapsed is not yet another's).
	time.Sleep(time.Until(time.Unix(0, short[0].ExpiresAt)) + 50*time.Millisecond)
	if got := snapshot(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("refused calls changed the queue:\n before %v\n after  %v", before, got)
	}
	if got := stats(); !reflect.DeepEqual(got, beforeStats) {
		t.Fatalf("refused calls changed the counters:\n before %+v\n after  %+v", beforeStats, got)
	}
	if g, _ := b.Lease(ctx, "q", LeaseOptions{Worker: "w2", Max: 10, Duration: time.Minute}); len(g) != 2 || g[0].Key != "k3" || g[1].Key != "k4" {
		t.Fatalf("lease on a full disk handed out %v, want k3 and k4 (new1 and new2 were refused)", g)
	} else if _, err := b.Ack(ctx, "q", nil, []AckItem{{Key: "k3", Token: g[0].Token, Outcome: workqueue.Outcome{RequeueAfter: time.Hour}}}); err != store.ErrNoSpace {
		t.Fatalf("requeue Ack on a full disk = %v, want ErrNoSpace", err)
	}

	fs.setFree(-1)
	res, err := b.Ack(ctx, "q", nil, []AckItem{{Key: "k1", Token: g[0].Token}})
	if err != nil || !res[0] {
		t.Fatalf("the retried Ack once space is back: accepted=%v err=%v, want accepted", res, err)
	}
	waitFor(t, "k2's lease to lapse once its expiry can be written", func() bool {
		v := b.inspect("q", "k2")
		return v.State == workqueue.Pending && v.Attempts == 1 && v.LastError == workqueue.LeaseExpired
	})
	if err := b.Ready(); err != nil {
		t.Errorf("Ready() with space back = %v", err)
	}
	want := map[string]string{"k1": view("k1"), "k2": view("k2"), "k3": view("k3"), "k4": view("k4"), "new1": view("new1"), "new2": view("new2")}
	if want["new1"] != "absent attempts=0 dirty=false worker=\"\" error=\"\"" || want["k1"] != want["new1"] {
		t.Fatalf("after space returned: new1 %s, k1 %s; want both absent", want["new1"], want["k1"])
	}

	// A restart reads the same: nothing of the refused calls was logged.
	b.j.Close()
	b, err = Open(cfg, store.Options{Dir: dir}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k2", "new1", "new2"} { // k3 and k4 were leased
		if got := view(k); got != want[k] {
			t.Errorf("%s after a restart: %s, want %s", k, got, want[k])
		}
	}
	if _, err := b.Stats(t.Context(), "fresh", ReadOptions{}); err == nil {
		t.Error("a queue whose first Add was refused exists after a restart")
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
