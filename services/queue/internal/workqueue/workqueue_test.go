package workqueue

import (
	"testing"
	"time"
	"unsafe"

	"github.com/batonrun/baton/services/queue/internal/record"
)

type seqTokens struct{ n uint64 }

func (s *seqTokens) Next() uint64 { s.n++; return s.n }

const sec = int64(time.Second)

// fixture is a queue with a fixed jitter of 1 and a log of stored records.
type fixture struct {
	q    *Queue
	cfg  Config
	recs []record.Record
}

func newFixture(maxAttempts uint32) *fixture {
	f := &fixture{cfg: Config{BackoffBase: time.Second, BackoffMax: 100 * time.Second, MaxAttempts: maxAttempts, AgingBound: 10 * time.Second, Jitter: func() float64 { return 1 }}}
	f.q = New("q", &f.cfg, &seqTokens{}, func(r *record.Record) { f.recs = append(f.recs, *r) })
	return f
}

func (f *fixture) lease(t *testing.T, now int64) Grant {
	t.Helper()
	g := f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Duration: 30 * time.Second}, now)
	if len(g) != 1 {
		t.Fatalf("lease: got %d grants, want 1", len(g))
	}
	return g[0]
}

// setup brings key "k" into a state at time 100s, with its lease token.
func (f *fixture) setup(t *testing.T, state string) uint64 {
	t.Helper()
	now := 100 * sec
	switch state {
	case "absent":
		return 0
	case "pending":
		f.q.Add("k", AddOptions{}, now)
	case "delayed":
		f.q.Add("k", AddOptions{Delay: 50 * time.Second}, now)
	case "leased", "leased+dirty":
		f.q.Add("k", AddOptions{}, now)
		tok := f.lease(t, now).Token
		if state == "leased+dirty" {
			f.q.Add("k", AddOptions{}, now)
		}
		f.recs = nil
		return tok
	case "parked":
		f.cfg.MaxAttempts = 1
		f.q.Add("k", AddOptions{}, now)
		tok := f.lease(t, now).Token
		f.q.Ack("k", tok, nil, Outcome{Failed: true, Error: "e"}, now)
	}
	f.recs = nil
	return 0
}

func TestTransitions(t *testing.T) {
	now := 100 * sec
	type want struct {
		state     State
		dirty     bool
		attempts  uint32
		notBefore int64
		stored    string // "put", "delete" or "" (nothing written)
		ok        bool   // result of the event (queued / accepted)
	}
	tests := []struct {
		from  string
		event string
		want  want
	}{
		// Add
		{"absent", "add", want{state: Pending, stored: "put", ok: true}},
		{"pending", "add", want{state: Pending, ok: false}},
		{"delayed", "add", want{state: Pending, stored: "put", ok: true}},
		{"leased", "add", want{state: Leased, dirty: true, ok: true}},
		{"leased+dirty", "add", want{state: Leased, dirty: true, ok: false}},
		{"parked", "add", want{state: Pending, stored: "put", ok: true}},
		// Add with delay 10s
		{"absent", "add10", want{state: Delayed, notBefore: now + 10*sec, stored: "put", ok: true}},
		{"pending", "add10", want{state: Pending, ok: false}},
		{"delayed", "add10", want{state: Delayed, notBefore: now + 10*sec, stored: "put", ok: true}},
		{"delayed", "add90", want{state: Delayed, notBefore: now + 50*sec, ok: false}},
		{"leased", "add10", want{state: Leased, dirty: true, ok: true}},
		{"leased+dirty", "add10", want{state: Leased, dirty: true, ok: false}},
		// Lease
		{"pending", "lease", want{state: Leased, ok: true}},
		{"delayed", "lease", want{state: Delayed, notBefore: now + 50*sec}},
		// Ack success
		{"leased", "success", want{state: Absent, stored: "delete", ok: true}},
		{"leased+dirty", "success", want{state: Pending, stored: "put", ok: true}},
		// Ack failure
		{"leased", "failure", want{state: Delayed, attempts: 1, notBefore: now + sec, stored: "put", ok: true}},
		{"leased+dirty", "failure", want{state: Pending, attempts: 1, stored: "put", ok: true}},
		// Ack terminal
		{"leased", "terminal", want{state: Parked, attempts: 1, stored: "put", ok: true}},
		{"leased+dirty", "terminal", want{state: Pending, attempts: 1, stored: "put", ok: true}},
		// Ack requeue_after 7s
		{"leased", "requeue", want{state: Delayed, notBefore: now + 7*sec, stored: "put", ok: true}},
		{"leased+dirty", "requeue", want{state: Pending, stored: "put", ok: true}},
		// Ack with a wrong token: LEASE_LOST, nothing changes
		{"leased", "badtoken", want{state: Leased}},
		{"pending", "badtoken", want{state: Pending}},
		// Lease expiry
		{"leased", "expire", want{state: Pending, attempts: 1, stored: "put", ok: true}},
		{"leased+dirty", "expire", want{state: Pending, attempts: 1, stored: "put", ok: true}},
		// Forget
		{"pending", "forget", want{state: Absent, stored: "delete", ok: true}},
		{"delayed", "forget", want{state: Absent, stored: "delete", ok: true}},
		{"leased", "forget", want{state: Absent, stored: "delete", ok: true}},
		{"leased+dirty", "forget", want{state: Absent, stored: "delete", ok: true}},
		{"parked", "forget", want{state: Absent, stored: "delete", ok: true}},
		{"absent", "forget", want{state: Absent}},
	}
	for _, tt := range tests {
		t.Run(tt.from+"/"+tt.event, func(t *testing.T) {
			f := newFixture(0)
			tok := f.setup(t, tt.from)
			var ok bool
			switch tt.event {
			case "add":
				ok = f.q.Add("k", AddOptions{}, now)
			case "add10":
				ok = f.q.Add("k", AddOptions{Delay: 10 * time.Second}, now)
			case "add90":
				ok = f.q.Add("k", AddOptions{Delay: 90 * time.Second}, now)
			case "lease":
				ok = len(f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Duration: time.Minute}, now)) == 1
			case "success":
				_, ok = f.q.Ack("k", tok, nil, Outcome{}, now)
			case "failure":
				_, ok = f.q.Ack("k", tok, nil, Outcome{Failed: true, Error: "boom"}, now)
			case "terminal":
				_, ok = f.q.Ack("k", tok, nil, Outcome{Terminal: true, Error: "bad spec"}, now)
			case "requeue":
				_, ok = f.q.Ack("k", tok, nil, Outcome{RequeueAfter: 7 * time.Second}, now)
			case "badtoken":
				_, ok = f.q.Ack("k", tok+1000, nil, Outcome{}, now)
			case "expire":
				ok = f.q.Advance(now+31*sec) == 1
			case "forget":
				ok = f.q.Forget("k")
			}
			v := f.q.Inspect("k")
			got := want{state: v.State, dirty: v.Dirty, attempts: v.Attempts, notBefore: v.NotBefore, ok: ok}
			switch {
			case len(f.recs) > 1:
				t.Fatalf("stored %d records, want at most 1: %+v", len(f.recs), f.recs)
			case len(f.recs) == 1 && f.recs[0].Kind == record.KindPut:
				got.stored = "put"
			case len(f.recs) == 1:
				got.stored = "delete"
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			s := f.q.Stats(now)
			if n := s.Pending + s.Delayed + s.Leased + s.Parked; n != f.q.Len() {
				t.Fatalf("state counts %d != %d keys", n, f.q.Len())
			}
		})
	}
}

func TestFailureRecordsErrorAndBackoff(t *testing.T) {
	f := newFixture(0)
	now := 100 * sec
	f.q.Add("k", AddOptions{}, now)
	for n := 1; n <= 4; n++ {
		g := f.lease(t, now)
		f.q.Ack("k", g.Token, nil, Outcome{Failed: true, Error: "boom"}, now)
		v := f.q.Inspect("k")
		wantWait := sec << (n - 1)
		if v.State != Delayed || v.NotBefore != now+wantWait || v.LastError != "boom" || v.Attempts != uint32(n) {
			t.Fatalf("failure %d: got %+v, want delayed %ds", n, v, wantWait/sec)
		}
		if got := f.recs[len(f.recs)-1]; got.Attempts != uint32(n) || got.LastError != "boom" || got.NotBefore != now+wantWait {
			t.Fatalf("stored %+v", got)
		}
		now = v.NotBefore
		if f.q.Advance(now) != 1 {
			t.Fatalf("not ready at not_before")
		}
	}
	// Success resets attempts.
	g := f.lease(t, now)
	if g.Attempt != 4 {
		t.Fatalf("attempt = %d, want 4", g.Attempt)
	}
	f.q.Add("k", AddOptions{}, now)
	f.q.Ack("k", g.Token, nil, Outcome{}, now)
	if v := f.q.Inspect("k"); v.Attempts != 0 || v.State != Pending {
		t.Fatalf("after success: %+v", v)
	}
}

func TestBackoffCapAndJitter(t *testing.T) {
	c := Config{BackoffBase: 5 * time.Millisecond, BackoffMax: 1000 * time.Second}
	for n := uint32(1); n < 100; n++ {
		d := c.Backoff(n)
		base := 5 * time.Millisecond * time.Duration(1<<min(n-1, 40))
		if n > 20 {
			base = 1000 * time.Second
		}
		base = min(base, 1000*time.Second)
		if d < base*8/10 || d > base*12/10 {
			t.Fatalf("backoff(%d) = %v, want within 20%% of %v", n, d, base)
		}
	}
}

func TestParkingAndRevival(t *testing.T) {
	f := newFixture(3)
	now := 100 * sec
	f.q.Add("k", AddOptions{}, now)
	g := f.lease(t, now)
	f.q.Ack("k", g.Token, nil, Outcome{Failed: true, Error: "1"}, now)
	now += 2 * sec
	f.q.Advance(now)
	f.lease(t, now)
	now += 31 * sec
	f.q.Advance(now) // expiry counts as an attempt: 2
	g = f.lease(t, now)
	f.q.Ack("k", g.Token, nil, Outcome{Failed: true, Error: "3"}, now)
	v := f.q.Inspect("k")
	if v.State != Parked || v.Attempts != 3 || v.LastError != "3" {
		t.Fatalf("got %+v, want parked after 3 attempts", v)
	}
	if len(f.q.Lease(nil, LeaseRequest{Max: 10, Worker: "w", Duration: time.Minute}, now+1000*sec)) != 0 {
		t.Fatal("a parked key was leased")
	}
	if !f.q.Add("k", AddOptions{}, now) {
		t.Fatal("Add of a parked key was collapsed")
	}
	if v := f.q.Inspect("k"); v.State != Pending || v.Attempts != 0 {
		t.Fatalf("revived: %+v", v)
	}
}

func TestDirtyFailureAtLimitIsNotParked(t *testing.T) {
	f := newFixture(1)
	now := 100 * sec
	f.q.Add("k", AddOptions{}, now)
	g := f.lease(t, now)
	f.q.Add("k", AddOptions{}, now)
	f.q.Ack("k", g.Token, nil, Outcome{Failed: true, Error: "e"}, now)
	if v := f.q.Inspect("k"); v.State != Pending {
		t.Fatalf("got %v, want pending (dirty keys are not parked)", v.State)
	}
}

func TestPriorityAndAging(t *testing.T) {
	f := newFixture(0)
	now := 100 * sec
	f.q.Add("low", AddOptions{Priority: Low}, now)
	f.q.Add("normal", AddOptions{}, now+1)
	f.q.Add("high", AddOptions{Priority: High}, now+2)
	f.q.Add("normal2", AddOptions{}, now+3)
	var order []string
	for _, g := range f.q.Lease(nil, LeaseRequest{Max: 10, Worker: "w", Duration: time.Minute}, now+4) {
		order = append(order, g.Key)
	}
	if got, want := order, []string{"high", "normal", "normal2", "low"}; !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}

	// A LOW key older than the aging bound beats fresh NORMAL keys.
	f = newFixture(0)
	f.q.Add("old-low", AddOptions{Priority: Low}, now)
	f.q.Add("fresh", AddOptions{}, now+11*sec)
	if g := f.lease(t, now+11*sec); g.Key != "old-low" {
		t.Fatalf("got %s, want old-low served by aging", g.Key)
	}

	// A raise moves a waiting key up, is collapsed, and is stored.
	f = newFixture(0)
	f.q.Add("a", AddOptions{}, now)
	f.q.Add("b", AddOptions{Priority: Low}, now)
	f.recs = nil
	if f.q.Add("b", AddOptions{Priority: High}, now) {
		t.Fatal("a raise was counted as queued")
	}
	if len(f.recs) != 1 || f.recs[0].Priority != uint8(High) {
		t.Fatalf("raise stored %+v", f.recs)
	}
	if g := f.lease(t, now); g.Key != "b" {
		t.Fatalf("got %s, want the raised key", g.Key)
	}
	if g := f.lease(t, now); g.Key != "a" {
		t.Fatalf("got %s, want a", g.Key)
	}
	if g := f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Duration: time.Minute}, now); len(g) != 0 {
		t.Fatalf("stale ring slot leased again: %+v", g)
	}
}

// The zero AddOptions announces a key ready now at Normal priority, as
// does a priority that is none of the three: the broker's callers and
// the log rely on every key holding one of them.
func TestAddOptionsZero(t *testing.T) {
	f := newFixture(0)
	now := 100 * sec
	for _, c := range []struct {
		key string
		o   AddOptions
	}{{"zero", AddOptions{}}, {"unknown", AddOptions{Priority: High + 1}}} {
		if !f.q.Add(c.key, c.o, now) {
			t.Fatalf("%s: collapsed, want queued", c.key)
		}
		if v := f.q.Inspect(c.key); v.State != Pending || v.Priority != Normal || v.NotBefore != 0 {
			t.Fatalf("%s: got %+v, want pending now at Normal", c.key, v)
		}
		if r := f.recs[len(f.recs)-1]; r.Key != c.key || r.Priority != uint8(Normal) {
			t.Fatalf("%s: stored %+v, want Normal", c.key, r)
		}
	}
}

func TestExtend(t *testing.T) {
	f := newFixture(0)
	now := 100 * sec
	f.q.Add("k", AddOptions{}, now)
	g := f.lease(t, now)
	exp, ok := f.q.Extend("k", g.Token, nil, time.Minute, now+20*sec)
	if !ok || exp != now+80*sec {
		t.Fatalf("extend = %d, %v", exp, ok)
	}
	if f.q.Advance(now+79*sec) != 0 || f.q.Inspect("k").State != Leased {
		t.Fatal("extended lease expired early")
	}
	if _, ok := f.q.Extend("k", g.Token+1, nil, time.Minute, now); ok {
		t.Fatal("extend with a wrong token accepted")
	}
	f.q.Advance(now + 81*sec)
	if _, ok := f.q.Extend("k", g.Token, nil, time.Minute, now+81*sec); ok {
		t.Fatal("extend of a lapsed lease accepted")
	}
	if _, ok := f.q.Ack("k", g.Token, nil, Outcome{}, now+81*sec); ok {
		t.Fatal("ack of a lapsed lease accepted")
	}
}

func TestListPages(t *testing.T) {
	f := newFixture(0)
	for _, k := range []string{"d", "b", "a", "c", "e"} {
		f.q.Add(k, AddOptions{}, sec)
	}
	f.lease(t, sec) // "d" is leased (oldest)
	var got []string
	after := ""
	for {
		page, more := f.q.List(0, after, 2)
		for _, v := range page {
			got = append(got, v.Key)
		}
		if !more {
			break
		}
		after = page[len(page)-1].Key
	}
	if !equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("pages %v", got)
	}
	leased, _ := f.q.List(Leased, "", 10)
	if len(leased) != 1 || leased[0].Key != "d" || leased[0].Worker != "w" {
		t.Fatalf("leased %+v", leased)
	}
}

func TestItemSize(t *testing.T) {
	if s := unsafe.Sizeof(item{}); s != 48 {
		t.Fatalf("item is %d bytes, want 48 (it is most of the per-key memory cost)", s)
	}
	// Every leased key has one: past 64 bytes it takes the 80-byte size
	// class, which BenchmarkLeaseAck shows (the reason a holder is a
	// pointer).
	if s := unsafe.Sizeof(itemExt{}); s > 64 {
		t.Fatalf("itemExt is %d bytes, want at most 64", s)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHolderBindsTheLease: a lease taken by holder "a" is refused to "b"
// and to a caller without a holder, for Ack and Extend alike, exactly as a
// wrong token is, and nothing changes (state, expiry, records, counters);
// "a" then acks it, also through another pointer to the same name (another
// connection of the same certificate). A lease taken without a holder
// answers to its token from anyone, as before holders existed.
func TestHolderBindsTheLease(t *testing.T) {
	name := func(s string) *string { return &s }
	a, b := name("a"), name("b")
	f := newFixture(0)
	now := 100 * sec
	f.q.Add("k", AddOptions{}, now)
	g := f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Holder: a, Duration: 30 * time.Second}, now)
	if len(g) != 1 {
		t.Fatalf("lease: %v", g)
	}
	f.recs = nil
	before, stats := f.q.Inspect("k"), f.q.Stats(now)
	for _, h := range []*string{b, nil} {
		if _, ok := f.q.Extend("k", g[0].Token, h, time.Hour, now+sec); ok {
			t.Errorf("Extend by %v of a lease held by \"a\" accepted", h)
		}
		for _, o := range []Outcome{{}, {Failed: true, Error: "e"}, {Terminal: true, Error: "e"}, {RequeueAfter: time.Second}} {
			if _, ok := f.q.Ack("k", g[0].Token, h, o, now+sec); ok {
				t.Errorf("Ack %+v by %v of a lease held by \"a\" accepted", o, h)
			}
		}
	}
	if v, st := f.q.Inspect("k"), f.q.Stats(now); v != before || st.Counters != stats.Counters || st.Leased != 1 || len(f.recs) != 0 {
		t.Fatalf("refused calls changed the lease: %+v, %+v, records %v; was %+v, %+v", v, st, f.recs, before, stats)
	}
	if exp, ok := f.q.Extend("k", g[0].Token, a, time.Minute, now+2*sec); !ok || exp != now+62*sec {
		t.Fatalf("Extend by the holder = %d, %v", exp, ok)
	}
	if _, ok := f.q.Ack("k", g[0].Token, name("a"), Outcome{}, now+3*sec); !ok {
		t.Fatal("Ack by the holder's name through another pointer refused")
	}
	if v := f.q.Inspect("k"); v.State != Absent {
		t.Fatalf("acked key is %v", v.State)
	}

	// Unbound: anyone with the token, as before.
	f.q.Add("u", AddOptions{}, now)
	g = f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Duration: 30 * time.Second}, now)
	if _, ok := f.q.Extend("u", g[0].Token, b, time.Minute, now); !ok {
		t.Fatal("Extend by \"b\" of an unbound lease refused")
	}
	if _, ok := f.q.Ack("u", g[0].Token, a, Outcome{}, now); !ok {
		t.Fatal("Ack by \"a\" of an unbound lease refused")
	}

	// The binding ends with the lease: a key leased by "a", expired and
	// leased again by "b" is "b"'s.
	f.q.Add("x", AddOptions{}, now)
	ga := f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Holder: a, Duration: time.Second}, now)
	f.q.Advance(now + 2*sec)
	gb := f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Holder: b, Duration: time.Minute}, now+2*sec)
	if len(ga) != 1 || len(gb) != 1 || gb[0].Key != "x" {
		t.Fatalf("leases %v, %v", ga, gb)
	}
	if _, ok := f.q.Ack("x", gb[0].Token, a, Outcome{}, now+2*sec); ok {
		t.Fatal("Ack by the lease's previous holder accepted")
	}
	if _, ok := f.q.Ack("x", gb[0].Token, b, Outcome{}, now+2*sec); !ok {
		t.Fatal("Ack by the new holder refused")
	}
}

// TestHolderCheckAllocatesNothing: Ack and Extend by the holder, through
// its pointer or another to the same name, and the refusal of another
// holder, cost no allocation.
func TestHolderCheckAllocatesNothing(t *testing.T) {
	f := newFixture(0)
	f.q.SetSink(nil)
	f.q.Add("k", AddOptions{}, sec)
	mine, same, other := "worker-1", string([]byte("worker-1")), "worker-2"
	g := f.q.Lease(nil, LeaseRequest{Max: 1, Worker: "w", Holder: &mine, Duration: time.Minute}, sec)
	if n := testing.AllocsPerRun(100, func() {
		f.q.Extend("k", g[0].Token, &mine, time.Minute, sec)
		f.q.Extend("k", g[0].Token, &same, time.Minute, sec)
		f.q.Ack("k", g[0].Token, &other, Outcome{}, sec)
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
