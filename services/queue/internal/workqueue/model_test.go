package workqueue

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// model is the reference: docs/design.md's table written as plainly as possible,
// with linear scans instead of rings and heaps. The model-based test runs
// random event sequences against both and compares them after every step.
type model struct {
	cfg   *Config
	items map[string]*mItem
	seq   [3]uint64 // FIFO order per priority rank
	tok   uint64
}

type mItem struct {
	state        State
	dirty        bool
	attempts     uint32
	lastErr      string
	prio         Priority
	pendingSince int64
	deadline     int64
	leasedAt     int64
	token        uint64
	worker       string
	holder       string // who may ack or extend the lease; "" for anyone
	order        uint64
	announced    uint32
}

func (m *model) pend(it *mItem, since int64) {
	it.state, it.pendingSince, it.deadline = Pending, since, 0
	m.seq[it.prio.rank()]++
	it.order = m.seq[it.prio.rank()]
}

func (m *model) add(key string, delay time.Duration, p Priority, now int64) bool {
	it := m.items[key]
	if it == nil {
		it = &mItem{prio: p, announced: 1}
		m.items[key] = it
		if delay > 0 {
			it.state, it.deadline = Delayed, now+int64(delay)
		} else {
			m.pend(it, now)
		}
		return true
	}
	it.announced++
	raised := p.rank() > it.prio.rank()
	if raised {
		it.prio = p
		if it.state == Pending {
			m.seq[p.rank()]++
			it.order = m.seq[p.rank()]
		}
	}
	switch it.state {
	case Delayed:
		at := now + int64(delay)
		if at < it.deadline {
			if delay > 0 {
				it.deadline = at
			} else {
				m.pend(it, now)
			}
			return true
		}
	case Leased:
		if !it.dirty {
			it.dirty = true
			return true
		}
	case Parked:
		it.attempts = 0
		if delay > 0 {
			it.state, it.deadline = Delayed, now+int64(delay)
		} else {
			m.pend(it, now)
		}
		return true
	}
	return false
}

func (m *model) lease(max int, holder string, d time.Duration, now int64) []Grant {
	var out []Grant
	for len(out) < max {
		var heads [3]string
		for k, it := range m.items {
			if it.state != Pending {
				continue
			}
			r := it.prio.rank()
			if heads[r] == "" || it.order < m.items[heads[r]].order {
				heads[r] = k
			}
		}
		best, bestRank := "", -1
		for r, k := range heads {
			if k == "" {
				continue
			}
			it := m.items[k]
			eff := r
			if it.pendingSince < now-int64(m.cfg.AgingBound) {
				eff = 2
			}
			if eff > bestRank || (eff == bestRank && it.pendingSince < m.items[best].pendingSince) {
				best, bestRank = k, eff
			}
		}
		if best == "" {
			break
		}
		it := m.items[best]
		m.tok++
		it.state, it.token, it.worker, it.holder, it.deadline, it.announced, it.leasedAt = Leased, m.tok, "w", holder, now+int64(d), 0, now
		out = append(out, Grant{Key: best, Token: it.token, Attempt: it.attempts, ExpiresAt: it.deadline, PendingSince: it.pendingSince})
	}
	return out
}

func (m *model) fail(it *mItem, now int64, backoff bool) {
	it.attempts++
	it.token, it.worker, it.holder = 0, "", ""
	switch {
	case it.dirty:
		it.dirty = false
		m.pend(it, now)
	case m.cfg.MaxAttempts > 0 && it.attempts >= m.cfg.MaxAttempts:
		it.state, it.deadline = Parked, 0
	case backoff:
		it.state, it.deadline = Delayed, now+int64(m.cfg.Backoff(it.attempts))
	default:
		m.pend(it, now)
	}
}

// holds reports whether holder may act on key's lease under token: the
// token is live and the lease is bound to no one or to holder.
func (m *model) holds(key string, token uint64, holder string) bool {
	it := m.items[key]
	return it != nil && it.state == Leased && it.token == token && (it.holder == "" || it.holder == holder)
}

func (m *model) ack(key string, token uint64, holder string, o Outcome, now int64) bool {
	if !m.holds(key, token, holder) {
		return false
	}
	it := m.items[key]
	switch {
	case o.Terminal:
		it.lastErr = o.Error
		it.attempts++
		it.token, it.worker, it.holder = 0, "", ""
		if it.dirty {
			it.dirty = false
			m.pend(it, now)
		} else {
			it.state, it.deadline = Parked, 0
		}
		return true
	case o.Failed:
		it.lastErr = o.Error
		m.fail(it, now, true)
		return true
	case it.dirty:
		it.dirty, it.attempts = false, 0
		m.pend(it, now)
	case o.RequeueAfter > 0:
		it.attempts = 0
		it.state, it.deadline = Delayed, now+int64(o.RequeueAfter)
	default:
		delete(m.items, key)
		return true
	}
	it.token, it.worker, it.holder = 0, "", ""
	return true
}

// release ends a lease as a lapse does (a work stream that ended).
func (m *model) release(key string, token uint64, holder string, now int64) bool {
	if !m.holds(key, token, holder) {
		return false
	}
	it := m.items[key]
	it.lastErr = StreamEnded
	m.fail(it, now, false)
	return true
}

func (m *model) advance(now int64) {
	var due []string
	for k, it := range m.items {
		if (it.state == Delayed || it.state == Leased) && it.deadline <= now {
			due = append(due, k)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := m.items[due[i]], m.items[due[j]]
		return a.deadline < b.deadline || (a.deadline == b.deadline && due[i] < due[j])
	})
	for _, k := range due {
		it := m.items[k]
		if it.state == Delayed {
			m.pend(it, it.deadline)
		} else {
			it.lastErr = LeaseExpired
			m.fail(it, now, false)
		}
	}
}

// restart keeps only what is stored: leases and dirty marks are lost, a
// delayed key whose time has come is pending since then, and pending keys
// line up by pending_since.
func (m *model) restart(now int64) {
	var ps []string
	for k, it := range m.items {
		it.announced, it.dirty, it.token, it.worker, it.holder = 0, false, 0, "", ""
		if it.state == Leased {
			it.state, it.deadline = Pending, 0
		}
		if it.state == Delayed && it.deadline <= now {
			it.state, it.pendingSince, it.deadline = Pending, it.deadline, 0
		}
		if it.state == Pending {
			ps = append(ps, k)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		a, b := m.items[ps[i]], m.items[ps[j]]
		return a.pendingSince < b.pendingSince || (a.pendingSince == b.pendingSince && ps[i] < ps[j])
	})
	m.seq = [3]uint64{}
	for _, k := range ps {
		it := m.items[k]
		m.seq[it.prio.rank()]++
		it.order = m.seq[it.prio.rank()]
	}
}

func (m *model) view(key string) View {
	it := m.items[key]
	if it == nil {
		return View{Key: key, State: Absent}
	}
	v := View{Key: key, State: it.state, Dirty: it.dirty, Attempts: it.attempts, LastError: it.lastErr, Announcements: it.announced, Priority: it.prio}
	switch it.state {
	case Pending:
		v.PendingSince = it.pendingSince
	case Delayed:
		v.NotBefore = it.deadline
	case Leased:
		v.PendingSince, v.Worker, v.LeasedAt, v.LeaseExpiresAt = it.pendingSince, it.worker, it.leasedAt, it.deadline
	}
	return v
}

// TestModel drives the queue and the model with thousands of random event
// sequences (Add with delay and priority, Lease by one of two holders or by
// none, every Ack outcome, Extend and Release, each by the lease's holder
// or another, Forget, lease expiry by a fake clock, and restart from the stored
// records) and requires the same answers and the same state after each step.
// It also replays the records the queue stored after every step and requires
// them to describe exactly the queue's stored state.
func TestModel(t *testing.T) {
	seqs, steps := 3000, 120
	if testing.Short() {
		seqs = 300
	}
	// Seeds 0 to seqs-1 in `make test`; BATON_FRESH_SEEDS=1 (make
	// test-fresh-seeds) starts them at a fresh base, logged.
	base := uint64(0)
	if os.Getenv("BATON_FRESH_SEEDS") == "1" {
		base = rand.Uint64() >> 16
		t.Logf("seeds from %d", base)
	}
	for s := range seqs {
		runModel(t, base+uint64(s), steps)
		if t.Failed() {
			return
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	cfg := Config{BackoffBase: time.Second, BackoffMax: 20 * time.Second, MaxAttempts: uint32(rng.IntN(4)), AgingBound: 10 * time.Second, Jitter: func() float64 { return 1 }}
	keys := []string{"a", "b", "c", "d", "e"}
	m := &model{cfg: &cfg, items: map[string]*mItem{}}
	disk := map[string]record.Record{}
	// Records reach the disk when their transaction commits; a refused
	// write (one in eight operations) rolls the queue back and the model
	// does not take the step at all.
	var unwritten []record.Record
	sink := func(r *record.Record) { unwritten = append(unwritten, *r) }
	write := func() {
		for _, r := range unwritten {
			if r.Kind == record.KindDelete {
				delete(disk, r.Key)
			} else {
				disk[r.Key] = r
			}
		}
		unwritten = unwritten[:0]
	}
	tokens := &seqTokens{}
	q := New("q", &cfg, tokens, sink)
	// txn runs op in a transaction that fails one time in eight, and
	// reports whether it was kept.
	txn := func(op func()) bool {
		q.Begin()
		op()
		if rng.IntN(8) == 0 {
			q.Rollback()
			unwritten = unwritten[:0]
			return false
		}
		q.Commit()
		write()
		return true
	}
	now := int64(1000 * sec)
	// Grants handed out, valid or not, with the holder each was leased to.
	type grant struct {
		Grant
		holder *string
	}
	var live []grant
	// The queue takes a holder as a pointer to its name (nil for none), the
	// model as the name ("" for none). A fresh pointer for each call, so
	// that holders compare by name, not by pointer, except where by passes
	// the lease's own.
	holders := []string{"", "a", "b"}
	ptr := func(h string) *string {
		if h == "" {
			return nil
		}
		return &h
	}
	name := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	// by picks who acks or extends g: mostly its own holder, by the very
	// pointer it leased with or another to the same name, so that most acks
	// land, otherwise anyone (a stranger's ack of a bound lease must be
	// refused and change nothing).
	by := func(g grant) *string {
		switch rng.IntN(3) {
		case 0:
			return ptr(holders[rng.IntN(len(holders))])
		case 1:
			return ptr(name(g.holder))
		}
		return g.holder
	}
	var counted Counters // Adds, Collapsed, Leases, Acks since the last restart
	var trace []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d after %v: %s", seed, trace, fmt.Sprintf(format, args...))
	}
	for step := 0; step < steps; step++ {
		now += int64(rng.IntN(4000)) * int64(time.Millisecond)
		if txn(func() { q.Advance(now) }) {
			m.advance(now)
		} else {
			trace = append(trace, "advance refused")
		}
		key := keys[rng.IntN(len(keys))]
		var ev string
		switch op := rng.IntN(100); {
		case op < 30:
			var d time.Duration
			if rng.IntN(3) == 0 {
				d = time.Duration(rng.IntN(8000)) * time.Millisecond
			}
			p := Priority(1 + rng.IntN(3))
			// One Add of up to four keys, repeats allowed, as the broker
			// sends a request's keys in one transaction.
			batch := []string{key}
			for rng.IntN(3) == 0 && len(batch) < 4 {
				batch = append(batch, keys[rng.IntN(len(keys))])
			}
			ev = fmt.Sprintf("add(%v,%v,%d)", batch, d, p)
			got := make([]bool, len(batch))
			if !txn(func() {
				for i, k := range batch {
					got[i] = q.Add(k, AddOptions{Delay: d, Priority: p}, now)
				}
			}) {
				ev += " refused"
				break
			}
			for i, k := range batch {
				if want := m.add(k, d, p, now); got[i] != want {
					fail("%s: key %s queued %v, want %v", ev, k, got[i], want)
				}
				counted.Adds++
				if !got[i] {
					counted.Collapsed++
				}
			}
		case op < 50:
			n := 1 + rng.IntN(3)
			d := time.Duration(1+rng.IntN(6)) * time.Second
			h := ptr(holders[rng.IntN(len(holders))])
			ev = fmt.Sprintf("lease(%d,%q,%v)", n, name(h), d)
			got, want := q.Lease(nil, LeaseRequest{Max: n, Worker: "w", Holder: h, Duration: d}, now), m.lease(n, name(h), d, now)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				fail("%s: %v, want %v", ev, got, want)
			}
			for _, g := range got {
				live = append(live, grant{g, h})
			}
			counted.Leases += uint64(len(got))
		case op < 75 && len(live) > 0:
			i := rng.IntN(len(live))
			g := live[i]
			var o Outcome
			switch rng.IntN(4) {
			case 0:
				o = Outcome{Failed: true, Error: fmt.Sprint("err", step)}
			case 3:
				o = Outcome{Terminal: true, Error: fmt.Sprint("fatal", step)}
			case 1:
				o = Outcome{RequeueAfter: time.Duration(1+rng.IntN(5000)) * time.Millisecond}
			}
			h := by(g)
			ev = fmt.Sprintf("ack(%s,%d,%q,%+v)", g.Key, g.Token, name(h), o)
			var got bool
			if !txn(func() { _, got = q.Ack(g.Key, g.Token, h, o, now) }) {
				ev += " refused"
				break
			}
			if want := m.ack(g.Key, g.Token, name(h), o, now); got != want {
				fail("%s: %v, want %v", ev, got, want)
			}
			if got {
				counted.Acks++
			}
		case op < 82 && len(live) > 0:
			g := live[rng.IntN(len(live))]
			d := time.Duration(1+rng.IntN(6)) * time.Second
			h := by(g)
			ev = fmt.Sprintf("extend(%s,%d,%q,%v)", g.Key, g.Token, name(h), d)
			got, gotOK := q.Extend(g.Key, g.Token, h, d, now)
			wantOK := m.holds(g.Key, g.Token, name(h))
			if wantOK {
				m.items[g.Key].deadline = now + int64(d)
			}
			if gotOK != wantOK || (gotOK && got != now+int64(d)) {
				fail("%s: %d %v, want ok=%v", ev, got, gotOK, wantOK)
			}
		case op < 85 && len(live) > 0:
			g := live[rng.IntN(len(live))]
			h := by(g)
			ev = fmt.Sprintf("release(%s,%d,%q)", g.Key, g.Token, name(h))
			var got bool
			if !txn(func() { got = q.Release(g.Key, g.Token, h, now) }) {
				ev += " refused"
				break
			}
			if want := m.release(g.Key, g.Token, name(h), now); got != want {
				fail("%s: %v, want %v", ev, got, want)
			}
			if got {
				counted.Releases++
			}
		case op < 88:
			ev = fmt.Sprintf("forget(%s)", key)
			var got bool
			if !txn(func() { got = q.Forget(key) }) {
				ev += " refused"
				break
			}
			_, want := m.items[key]
			delete(m.items, key)
			if got != want {
				fail("%s: %v, want %v", ev, got, want)
			}
		case op < 93:
			ev = "restart"
			// Restore with the sink attached, as the broker does: replay
			// must write nothing.
			q = New("q", &cfg, tokens, func(r *record.Record) { fail("restore wrote %+v", *r) })
			for _, r := range disk {
				q.Restore(&r)
			}
			q.Settle(now)
			q.SetSink(sink)
			m.restart(now)
			counted = Counters{}
		default:
			ev = "tick"
		}
		trace = append(trace, ev)
		for _, k := range keys {
			got, want := q.Inspect(k), m.view(k)
			if got != want {
				fail("key %s: %+v, want %+v", k, got, want)
			}
			if got.State == Absent {
				if _, ok := disk[k]; ok {
					fail("key %s absent but stored", k)
				}
				continue
			}
			// A delayed key that became ready needs no write: stored as
			// delayed with a past not_before, it restores as pending since
			// then.
			// (Unless the step that would have made it pending was refused.)
			onDisk := disk[k]
			wantRec := stored("q", q.items.get(k))
			if onDisk != wantRec && onDisk.State == record.StateDelayed && onDisk.NotBefore <= now {
				onDisk.State, onDisk.PendingSince, onDisk.NotBefore = record.StatePending, onDisk.NotBefore, 0
			}
			if want := wantRec; onDisk != want {
				fail("key %s stored %+v, want %+v", k, disk[k], want)
			}
		}
		st := q.Stats(now)
		var c [6]int
		for _, it := range m.items {
			c[it.state]++
			if it.dirty {
				c[0]++
			}
		}
		if c := st.Counters; c.Adds != counted.Adds || c.Collapsed != counted.Collapsed || c.Leases != counted.Leases || c.Acks != counted.Acks || c.Releases != counted.Releases {
			fail("counters %+v, want %+v", c, counted)
		}
		if st.Pending != c[Pending] || st.Delayed != c[Delayed] || st.Leased != c[Leased] || st.Parked != c[Parked] || st.Dirty != c[0] {
			fail("stats %+v, model counts %v", st, c)
		}
		// List of each state (and of all), from the second key on, in
		// pages of two: the model's views in key order.
		for _, state := range []State{0, Pending, Delayed, Leased, Parked} {
			var want []View
			for _, k := range keys[1:] {
				if v := m.view(k); v.State != Absent && (state == 0 || v.State == state) {
					want = append(want, v)
				}
			}
			var got []View
			for after := keys[0]; ; {
				page, more := q.List(state, after, 2)
				got = append(got, page...)
				if !more {
					break
				}
				after = page[len(page)-1].Key
			}
			if !slices.Equal(got, want) {
				fail("List(%v): %+v, want %+v", state, got, want)
			}
		}
	}
}
