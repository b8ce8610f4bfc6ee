package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// fakeQueue records Adds and fails them while down.
type fakeQueue struct {
	mu      sync.Mutex
	down    bool
	calls   int
	got     map[string]queuev1.Priority // key → highest priority seen
	block   chan struct{}               // if set, Add waits on it
	entered chan struct{}               // if set, Add signals here before waiting

	inFlight map[string]bool  // keys of the Adds in progress
	twice    []string         // keys sent while an Add carrying them was in flight
	revs     map[string]int64 // key → the revision of the Add that delivered it
}

func (f *fakeQueue) Add(ctx context.Context, queue string, keys []string, o queueclient.AddOptions) (queueclient.AddResult, error) {
	f.mu.Lock()
	if f.inFlight == nil {
		f.inFlight = map[string]bool{}
	}
	for _, k := range keys {
		if f.inFlight[k] {
			f.twice = append(f.twice, k)
		}
		f.inFlight[k] = true
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		for _, k := range keys {
			delete(f.inFlight, k)
		}
		f.mu.Unlock()
	}()
	if f.block != nil {
		if f.entered != nil {
			f.entered <- struct{}{}
		}
		select {
		case <-f.block:
		case <-ctx.Done():
			return queueclient.AddResult{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return queueclient.AddResult{}, errors.New("queue down")
	}
	if f.revs == nil {
		f.revs = map[string]int64{}
	}
	for _, k := range keys {
		if p, ok := f.got[k]; !ok || rank(o.Priority) > rank(p) {
			f.got[k] = o.Priority
		}
		f.revs[k] = o.Revision
	}
	return queueclient.AddResult{Queued: len(keys)}, nil
}

func (f *fakeQueue) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }

func (f *fakeQueue) received() map[string]queuev1.Priority {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]queuev1.Priority{}
	for k, v := range f.got {
		out[k] = v
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCoalescesWhileQueueDown(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}, down: true}
	s := NewSet([]string{"pods"}, q, Options{RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()

	start := time.Now()
	for i := range 10000 {
		prio := queuev1.Priority_PRIORITY_LOW
		if i%7 == 0 {
			prio = queuev1.Priority_PRIORITY_NORMAL
		}
		if err := s.Put("pods", []string{fmt.Sprintf("ns/k%d", i%100)}, prio, time.Now(), int64(i+1)); err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > 100 {
			t.Fatalf("outbox holds %d keys, want at most 100", n)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("10,000 Puts took %v with the queue down: Put must not wait on delivery", d)
	}
	waitFor(t, "a failed Add", func() bool { return s.Box("pods").LastError() != "" })
	q.setDown(false)
	waitFor(t, "the outbox to drain", func() bool { return s.Len() == 0 })
	got := q.received()
	if len(got) != 100 {
		t.Fatalf("queue received %d keys, want 100", len(got))
	}
	for k, p := range got {
		if p != queuev1.Priority_PRIORITY_NORMAL {
			t.Errorf("key %s delivered at %v, want NORMAL (the highest announced)", k, p)
		}
	}
	if s.Box("pods").LastError() != "" {
		t.Error("LastError kept after a successful Add")
	}
	cancel()
	<-done
	if err := s.Put("nope", []string{"x"}, 0, time.Now(), 0); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("Put to an unknown queue = %v, want ErrUnknownQueue", err)
	}
}

// A key announced again while an Add carrying it is in flight must be sent
// again: the first Add may have been leased and worked before the change.
func TestReannouncedDuringFlightIsSentAgain(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}, block: make(chan struct{}), entered: make(chan struct{}, 10)}
	s := NewSet([]string{"pods"}, q, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()

	_ = s.Put("pods", []string{"ns/a"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 1)
	<-q.entered // the drainer is inside Add with ns/a: announce it again
	_ = s.Put("pods", []string{"ns/a"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 1)
	q.block <- struct{}{} // first Add completes
	if got := s.Len(); got != 1 {
		t.Fatalf("after the first Add, outbox holds %d keys, want 1 (ns/a again)", got)
	}
	select {
	case <-q.entered: // the key is sent again
	case <-time.After(10 * time.Second):
		t.Fatal("ns/a, announced during the first Add, was not sent again")
	}
	q.block <- struct{}{}
	waitFor(t, "the outbox to drain", func() bool { return s.Len() == 0 })
	if got := s.MinPendingRevision(); got != 0 {
		t.Errorf("MinPendingRevision after delivery = %d, want 0", got)
	}
	q.mu.Lock()
	calls := q.calls
	q.mu.Unlock()
	if calls != 2 {
		t.Errorf("%d Adds, want 2", calls)
	}
	close(q.block)
	cancel()
	<-done
}

func TestFlushOnStop(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}}
	s := NewSet([]string{"a", "b"}, q, Options{})
	_ = s.Put("a", []string{"x"}, 0, time.Now(), 0)
	_ = s.Put("b", []string{"y"}, 0, time.Now(), 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // stopped before it ran: the flush still delivers
	s.Run(ctx)
	if got := q.received(); len(got) != 2 {
		t.Errorf("flushed %v, want x and y", got)
	}
}

func TestDropsKeysTheQueueRefuses(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}}
	s := NewSet([]string{"pods"}, q, Options{})
	long := string(make([]byte, limits.MaxKeyBytes+1))
	_ = s.Put("pods", []string{"", long, "bad\xff", "ns/ok"}, 0, time.Now(), 1)
	if got, want := s.Len(), 1; got != want {
		t.Errorf("outbox holds %d keys, want %d", got, want)
	}
	if got := s.Box("pods").Dropped(); got != 3 {
		t.Errorf("Dropped = %d, want 3", got)
	}
}

// Keys observed while an Add is in flight go out in another Add at once, up
// to InFlight of them, but a key is never in two Adds at a time.
func TestAddsInFlightAtOnce(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}, block: make(chan struct{}), entered: make(chan struct{}, 10)}
	s := NewSet([]string{"pods"}, q, Options{InFlight: 2})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	entered := func(what string) {
		t.Helper()
		select {
		case <-q.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("no Add for %s", what)
		}
	}
	_ = s.Put("pods", []string{"ns/a"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 1)
	entered("ns/a")
	_ = s.Put("pods", []string{"ns/b"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 2)
	entered("ns/b, while ns/a's Add is in flight")
	// Both slots are busy, and ns/a is in flight: announcing it again, and
	// a new key, must not start a third Add.
	_ = s.Put("pods", []string{"ns/a", "ns/c"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 3)
	select {
	case <-q.entered:
		t.Fatal("a third Add started with InFlight 2")
	case <-time.After(100 * time.Millisecond):
	}
	q.block <- struct{}{} // one of the two Adds ends
	entered("ns/c (with ns/a again if its Add was the one that ended)")
	close(q.block)
	waitFor(t, "the outbox to drain", func() bool { return s.Len() == 0 })
	q.mu.Lock()
	calls, twice := q.calls, q.twice
	q.mu.Unlock()
	if calls != 3 && calls != 4 { // a, b, then {a, c}, or {c} and a again
		t.Errorf("%d Adds, want 3 or 4", calls)
	}
	if len(twice) > 0 {
		t.Errorf("keys sent while an Add carrying them was in flight: %q", twice)
	}
	if got := len(q.received()); got != 3 {
		t.Errorf("queue received %d keys, want 3", got)
	}
	cancel()
	<-done
}

// A queue added while the set runs gets an outbox and a drainer.
func TestEnsureWhileRunning(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}}
	s := NewSet([]string{"pods"}, q, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if err := s.Put("greetings", []string{"ns/g"}, queuev1.Priority_PRIORITY_LOW, time.Now(), 0); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("Put before Ensure = %v, want ErrUnknownQueue", err)
	}
	s.Ensure([]string{"pods", "greetings"})
	s.Ensure([]string{"greetings"}) // again: the same outbox
	if got := fmt.Sprint(s.Queues()); got != "[greetings pods]" {
		t.Errorf("Queues = %s", got)
	}
	box := s.Box("greetings")
	if err := s.Put("greetings", []string{"ns/g"}, queuev1.Priority_PRIORITY_LOW, time.Now(), 7); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the added queue's outbox to be drained", func() bool { return box.Delivered() == 1 })
	if s.Box("greetings") != box || s.MinPendingRevision() != 0 {
		t.Errorf("a second Ensure replaced the outbox, or a delivered key is still pending")
	}
}

// TestAddsCarryTheRevision: every Add carries the highest revision
// announced to its queue so far, which covers each key in it (a worker
// reads the cache at it), including keys announced at an older one.
func TestAddsCarryTheRevision(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}, down: true}
	s := NewSet([]string{"pods", "jobs"}, q, Options{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go s.Run(ctx)
	for _, p := range []struct {
		queue, key string
		rev        int64
	}{{"pods", "ns/a", 7}, {"pods", "ns/b", 3}, {"jobs", "ns/j", 2}} {
		if err := s.Put(p.queue, []string{p.key}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), p.rev); err != nil {
			t.Fatal(err)
		}
	}
	q.setDown(false)
	waitFor(t, "the outboxes to drain", func() bool { return s.Len() == 0 })
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.revs["ns/a"] != 7 || q.revs["ns/b"] != 7 || q.revs["ns/j"] != 2 {
		t.Fatalf("revisions delivered %v, want pods' keys at 7 (the queue's highest), jobs' at 2", q.revs)
	}
}

// An outbox whose queue is in no rule goes once it holds no key, and its
// drainer ends; one that still holds keys stays until they are delivered,
// then goes by itself.
func TestRetain(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}, down: true}
	s := NewSet([]string{"pods", "greetings", "widgets"}, q, Options{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if err := s.Put("greetings", []string{"ns/g"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 5); err != nil {
		t.Fatal(err)
	}
	widgets := s.Box("widgets")
	s.Retain([]string{"pods"})
	if got := fmt.Sprint(s.Queues()); got != "[greetings pods]" {
		t.Fatalf("Queues after Retain = %s, want the one holding a key kept", got)
	}
	if err := widgets.quitErr(); err != nil {
		t.Error(err)
	}
	if s.MinPendingRevision() != 5 {
		t.Errorf("MinPendingRevision = %d, want 5 (the kept outbox's key)", s.MinPendingRevision())
	}
	greetings := s.Box("greetings")
	q.setDown(false)
	waitFor(t, "the outbox to go once its key is delivered", func() bool { return fmt.Sprint(s.Queues()) == "[pods]" })
	if q.received()["ns/g"] == 0 {
		t.Error("the kept outbox went without delivering its key")
	}
	if err := greetings.quitErr(); err != nil {
		t.Error(err)
	}

	// A retired outbox takes no key (Put, which found it before it went,
	// makes a new one); the queue back in a rule gets a new outbox.
	old := s.Box("pods")
	s.Retain(nil)
	if old.put([]string{"ns/p"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 9) {
		t.Error("a retired outbox took a key")
	}
	if err := s.Put("pods", []string{"ns/p"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 9); !errors.Is(err, ErrUnknownQueue) {
		t.Errorf("Put to a queue in no rule = %v, want ErrUnknownQueue", err)
	}
	s.Ensure([]string{"pods"})
	if s.Box("pods") == old {
		t.Error("the retired outbox came back")
	}
	if err := s.Put("pods", []string{"ns/p"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 9); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new outbox to deliver", func() bool { return q.received()["ns/p"] != 0 })
}

// quitErr says whether a retired box's drainer was told to end.
func (b *Box) quitErr() error {
	select {
	case <-b.quit:
		return nil
	default:
		return errors.New("the retired outbox's drainer was not told to end")
	}
}

// An outbox whose queue left the rules while it held keys and came back
// before they were delivered stays.
func TestRetainThenEnsure(t *testing.T) {
	q := &fakeQueue{got: map[string]queuev1.Priority{}, down: true}
	s := NewSet([]string{"jobs"}, q, Options{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := s.Put("jobs", []string{"ns/j"}, queuev1.Priority_PRIORITY_NORMAL, time.Now(), 3); err != nil {
		t.Fatal(err)
	}
	box := s.Box("jobs")
	s.Retain(nil)
	s.Ensure([]string{"jobs"})
	q.setDown(false)
	waitFor(t, "the key to be delivered", func() bool { return box.Delivered() == 1 })
	time.Sleep(20 * time.Millisecond) // a drainer that would retire it has had its turn
	if s.Box("jobs") != box {
		t.Error("the outbox of a queue taken back into the rules went")
	}
}
