package watchmux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// startEtcd starts an embedded etcd whose own periodic progress
// notifications come once an hour, so that only those the tests ask for
// (and the mux's probes) move an idle watch.
func startEtcd(t *testing.T) (*etcdembed.Server, *clientv3.Client) {
	t.Helper()
	srv := etcdembed.StartForTestConfig(t, etcdembed.Config{ProgressNotifyInterval: time.Hour})
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

func put(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Put(t.Context(), key, "v")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// next returns w's next response, failing the test after 10 s.
func next(t *testing.T, w *Watch) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return r
}

// progressTo asks for progress until w has handed on everything up to
// rev, failing the test after 10 s; it returns the events seen meanwhile.
func progressTo(t *testing.T, m *Mux, w *Watch, rev int64) []*mvccpb.Event {
	t.Helper()
	var evs []*mvccpb.Event
	var reached int64
	deadline := time.Now().Add(10 * time.Second)
	for reached < rev {
		if time.Now().After(deadline) {
			t.Fatalf("no progress to %d within 10 s (at %d)", rev, reached)
		}
		m.RequestProgress()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		r, err := w.Next(ctx)
		cancel()
		switch {
		case err == nil && len(r.Events) > 0:
			evs = append(evs, r.Events...)
			reached = max(reached, r.Events[len(r.Events)-1].Kv.ModRevision)
		case err == nil:
			reached = max(reached, r.Progress)
		case !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Next: %v", err)
		}
	}
	return evs
}

// waitCreated waits until etcd has answered w's creation.
func waitCreated(t *testing.T, w *Watch) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.st.mu.Lock()
		id := w.id
		w.st.mu.Unlock()
		if id >= 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch was not created within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Many watches share one stream; each gets the events under its prefix
// and, once etcd has moved on, the progress it asks for.
func TestWatchesShareOneStream(t *testing.T) {
	_, cli := startEtcd(t)
	m := New(cli, Options{})
	defer m.Close()
	from := put(t, cli, "/other/x")
	const n = 50
	ws := make([]*Watch, n)
	for i := range ws {
		ws[i] = m.Watch(fmt.Sprintf("/p/%02d/", i), from)
		defer ws[i].Close()
	}
	revs := make([]int64, n)
	for i := range ws {
		revs[i] = put(t, cli, fmt.Sprintf("/p/%02d/k", i))
	}
	for i, w := range ws {
		r := next(t, w)
		if len(r.Events) != 1 || string(r.Events[0].Kv.Key) != fmt.Sprintf("/p/%02d/k", i) || r.Events[0].Kv.ModRevision != revs[i] {
			t.Fatalf("watch %d: %v, want the put at %d", i, r, revs[i])
		}
	}
	last := put(t, cli, "/other/y")
	for _, w := range ws {
		if evs := progressTo(t, m, w, last); len(evs) > 0 {
			t.Fatalf("events under no prefix of the watch: %v", evs)
		}
	}
	if streams, _ := m.Streams(); streams != 1 {
		t.Errorf("%d streams for %d watches, want 1", streams, n)
	}
}

// A watch made while etcd is idle, from a revision writes elsewhere have
// passed, can trust no answer to a progress request on the shared stream
// (etcd's answer may have been made before the watch existed); a probe
// tells it that nothing happened under its prefix, and a watch whose
// prefix did change gets the change itself.
func TestIdleWatchIsProbed(t *testing.T) {
	_, cli := startEtcd(t)
	m := New(cli, Options{ProbeAfter: 50 * time.Millisecond})
	defer m.Close()
	from := put(t, cli, "/other/0")
	changed := put(t, cli, "/busy/k")
	head := put(t, cli, "/other/x")
	quiet := m.Watch("/quiet/", from)
	defer quiet.Close()
	busy := m.Watch("/busy/", from)
	defer busy.Close()
	if evs := progressTo(t, m, quiet, head); len(evs) > 0 {
		t.Errorf("quiet watch got %v", evs)
	}
	evs := progressTo(t, m, busy, head)
	if len(evs) != 1 || evs[0].Kv.ModRevision != changed {
		t.Errorf("busy watch got %v, want the put at %d", evs, changed)
	}
	if _, probes := m.Streams(); probes == 0 {
		t.Error("no probe was made; etcd's answer was trusted without one")
	}
}

// Created watches trust a stream-wide progress notification only when it
// was certainly made after them: its revision is above the one in their
// creation response, or they have had a message of their own since. The
// order tested here is one etcd may send but does not reliably: the
// creation, then a notification made before it, then the events the
// watch must catch up on.
func TestStaleProgressIsNotTrusted(t *testing.T) {
	st := &stream{m: &Mux{}, byID: map[int64]*Watch{}, sendC: make(chan struct{}, 1), ctx: context.Background()}
	w := newWatch(st.m, "/p/", 5)
	if !st.add(w) {
		t.Fatal("add refused")
	}
	hdr := func(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }
	got := func() []Response {
		w.mu.Lock()
		defer w.mu.Unlock()
		out := w.queue
		w.queue = nil
		return out
	}
	st.dispatch(&pb.WatchResponse{Header: hdr(10), WatchId: 7, Created: true})
	st.dispatch(&pb.WatchResponse{Header: hdr(10), WatchId: clientv3.InvalidWatchID})
	if rs := got(); len(rs) != 0 {
		t.Fatalf("a notification at the creation's revision was handed on: %v", rs)
	}
	ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("/p/k"), ModRevision: 8}}
	st.dispatch(&pb.WatchResponse{Header: hdr(10), WatchId: 7, Events: []*mvccpb.Event{ev}})
	if rs := got(); len(rs) != 1 || len(rs[0].Events) != 1 {
		t.Fatalf("the event: %v", rs)
	}
	// Now every notification on the stream was made after the watch.
	st.dispatch(&pb.WatchResponse{Header: hdr(10), WatchId: clientv3.InvalidWatchID})
	if rs := got(); len(rs) != 1 || rs[0].Progress != 10 {
		t.Fatalf("a notification after the watch's own event: %v, want progress 10", rs)
	}

	// Another watch: a notification above its creation's revision is
	// trusted at once.
	w2 := newWatch(st.m, "/q/", 9)
	st.add(w2)
	st.dispatch(&pb.WatchResponse{Header: hdr(12), WatchId: 8, Created: true})
	st.dispatch(&pb.WatchResponse{Header: hdr(13), WatchId: clientv3.InvalidWatchID})
	w2.mu.Lock()
	q := w2.queue
	w2.mu.Unlock()
	if len(q) != 1 || q[0].Progress != 13 {
		t.Errorf("w2 got %v, want progress 13", q)
	}
	// A compaction ends the watch with rpctypes.ErrCompacted.
	st.dispatch(&pb.WatchResponse{Header: hdr(13), WatchId: 8, Canceled: true, CompactRevision: 11})
	w2.mu.Lock()
	w2.queue = nil
	w2.mu.Unlock()
	if _, err := w2.Next(t.Context()); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("after a compaction Next = %v, want ErrCompacted", err)
	}
}

// A watch from a compacted revision ends with rpctypes.ErrCompacted.
func TestCompacted(t *testing.T) {
	_, cli := startEtcd(t)
	m := New(cli, Options{})
	defer m.Close()
	old := put(t, cli, "/p/a")
	rev := put(t, cli, "/p/b")
	if _, err := cli.Compact(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	w := m.Watch("/p/", old)
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		_, err := w.Next(ctx)
		if err == nil {
			continue
		}
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("Next = %v, want ErrCompacted", err)
		}
		return
	}
}

// When etcd goes away every watch on the stream ends; watches made once it
// is back share a new stream.
func TestBreakEndsEveryWatch(t *testing.T) {
	srv, cli := startEtcd(t)
	var logs syncBuffer
	m := New(cli, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer m.Close()
	from := put(t, cli, "/p/a")
	a, b := m.Watch("/p/", from), m.Watch("/q/", from)
	defer a.Close()
	defer b.Close()
	progressTo(t, m, a, from)
	srv.Stop()
	for _, w := range []*Watch{a, b} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		for {
			_, err := w.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatal("the watch did not end when etcd stopped")
				}
				break
			}
		}
		cancel()
	}
	for _, w := range []*Watch{a, b} {
		if _, err := w.Next(t.Context()); !errors.Is(err, ErrBroken) {
			t.Errorf("after the break Next = %v, want ErrBroken", err)
		}
	}
	if n := strings.Count(logs.String(), "watch stream broke"); n != 1 {
		t.Errorf("the break was logged %d times, want once for both watches:\n%s", n, logs.String())
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	rev := put(t, cli, "/p/b")
	c := m.Watch("/p/", from)
	defer c.Close()
	evs := progressTo(t, m, c, rev)
	if len(evs) == 0 || evs[len(evs)-1].Kv.ModRevision != rev {
		t.Errorf("events after the restart: %v, want up to the put at %d", evs, rev)
	}
	if streams, _ := m.Streams(); streams != 2 {
		t.Errorf("%d streams, want 2 (one before the break, one after)", streams)
	}
}

// Closing a watch tells etcd, and Close ends the mux's goroutines.
func TestCloseLeavesNothing(t *testing.T) {
	_, cli := startEtcd(t)
	from := put(t, cli, "/p/a") // the client's connection is up
	before := muxGoroutines()
	m := New(cli, Options{})
	for i := range 100 {
		w := m.Watch(fmt.Sprintf("/p/%d/", i), from)
		waitCreated(t, w)
		w.Close()
	}
	st := m.cur
	st.mu.Lock()
	left := len(st.byID)
	st.mu.Unlock()
	if left != 0 {
		t.Errorf("%d watches left on the stream after closing them all", left)
	}
	if during := muxGoroutines(); during <= before {
		t.Fatalf("%d goroutines of the mux or its etcd watch streams with the stream open, %d before New: the count sees nothing to end", during, before)
	}
	m.Close()
	deadline := time.Now().Add(10 * time.Second)
	for muxGoroutines() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the mux or its etcd watch streams after Close, %d before New", muxGoroutines(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// muxGoroutines counts the goroutines running the mux's code, and those
// of the embedded etcd serving a watch stream: what Close must end. The
// process's total would also count the embedded etcd's other goroutines,
// which come and go on their own schedule.
func muxGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "internal/watchmux.(") || strings.Contains(g, "v3rpc.(*serverWatchStream)") {
			count++
		}
	}
	return count
}

// At most MaxPrivate private streams are open at once.
func TestPrivateIsBounded(t *testing.T) {
	_, cli := startEtcd(t)
	m := New(cli, Options{MaxPrivate: 2})
	defer m.Close()
	_, r1, err := m.Private(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := m.Private(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := m.Private(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a third private stream = %v, want to wait", err)
	}
	r1()
	r1() // twice is harmless
	_, r3, err := m.Private(t.Context())
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
}

// A watch from etcd's head says where its owner lists, hands on every
// change after it, and is up to date from the start: it needs no probe,
// even while etcd is idle.
func TestWatchFromHead(t *testing.T) {
	_, cli := startEtcd(t)
	m := New(cli, Options{ProbeAfter: 10 * time.Millisecond})
	defer m.Close()
	before := put(t, cli, "/p/a")
	w := m.Watch("/p/", 0)
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rev, err := w.Created(ctx)
	if err != nil || rev < before {
		t.Fatalf("Created = %d, %v; want at least %d", rev, err, before)
	}
	after := put(t, cli, "/p/b")
	evs := progressTo(t, m, w, after)
	if len(evs) != 1 || evs[0].Kv.ModRevision != after {
		t.Errorf("events %v, want the put at %d alone", evs, after)
	}
	time.Sleep(50 * time.Millisecond)
	for range 5 {
		m.RequestProgress()
	}
	if _, probes := m.Streams(); probes != 0 {
		t.Errorf("%d probes for a watch from the head", probes)
	}
}

// syncBuffer is a bytes.Buffer a logger may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
