package checkpoint

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/services/observer/internal/cache"
)

// fakeWatch is an informer that has handed on everything up to rev.
type fakeWatch struct {
	prefix string
	rev    *atomic.Int64
}

func (w fakeWatch) Prefix() string      { return w.prefix }
func (w fakeWatch) SafeRevision() int64 { return w.rev.Load() }
func (w fakeWatch) LastChange() int64   { return w.rev.Load() }

type nothingPending struct{}

func (nothingPending) MinPendingRevision() int64 { return 0 }

// A record rewritten because one prefix changed writes that prefix (and
// the index), not every prefix, and the generations the record keeps stay
// few however many writes keep some prefixes.
func TestKeeperWritesWhatChanged(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	var rev atomic.Int64
	rev.Store(10)
	const n = 12
	var prefixes []string
	for i := range n {
		prefixes = append(prefixes, fmt.Sprintf("/registry/r%02d/", i))
	}
	c := cache.New(prefixes)
	k := NewKeeper(NewEtcd(cli), nothingPending{}, time.Nanosecond, nil)
	ledgers := make([]*Ledger, n)
	for i, p := range prefixes {
		ledgers[i] = NewLedger(c, p)
		size := 3
		if i == 0 {
			size = 3000 // one large prefix
		}
		for _, key := range randomKeys(p, size) {
			ledgers[i].Put(&cache.Object{Key: key}, 1)
		}
		ledgers[i].Listed(10)
		k.Add(fakeWatch{p, &rev}, ledgers[i], true)
	}
	write := func() uint64 {
		t.Helper()
		before := k.RecordBytes()
		k.nextRecord = time.Time{} // no rate limit here
		k.Write(ctx)
		if k.lastCheckpoint != rev.Load() {
			t.Fatalf("checkpoint %d after Write, want %d", k.lastCheckpoint, rev.Load())
		}
		return k.RecordBytes() - before
	}
	full := write()
	for round := range 3 * maxGenerations {
		i := 1 + round%(n-1)
		rev.Add(1)
		ledgers[i].Put(&cache.Object{Key: fmt.Sprintf("%sns/new-%d", prefixes[i], round)}, rev.Load())
		if part := write(); part > full/4 {
			t.Fatalf("round %d: adding a key to %s wrote %d bytes, the whole record %d", round, prefixes[i], part, full)
		}
		if g := k.store.Generations(); g > maxGenerations {
			t.Fatalf("round %d: the record keeps %d generations, want at most %d", round, g, maxGenerations)
		}
		if g := liveGenerations(t, cli); len(g) > maxGenerations {
			t.Fatalf("round %d: %d generations stored, want at most %d", round, len(g), maxGenerations)
		}
	}
	for i, p := range prefixes {
		rec, err := k.store.Read(ctx, p)
		if err != nil || rec == nil || rec.Revision != rev.Load() {
			t.Fatalf("Read %s = %+v, %v", p, rec, err)
		}
		if want := ledgers[i].KnownKeys(); !slices.Equal(rec.Keys, want) {
			t.Errorf("%s: record holds %d keys, the ledger %d", p, len(rec.Keys), len(want))
		}
	}
}

// A prefix added at run time does not hold the checkpoint back while it
// lists, nor while no stored record covers it; it joins the record when
// one may be written, at the stored checkpoint if nothing moved it. A
// prefix of the start holds it until listed.
func TestKeeperNewPrefixes(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	c := cache.New([]string{"/a/", "/b/", "/c/"})
	k := NewKeeper(NewEtcd(cli), nothingPending{}, time.Hour, nil)
	var revA, revB, revC atomic.Int64
	la := NewLedger(c, "/a/")
	la.Put(&cache.Object{Key: "/a/x"}, 1)
	la.Listed(10)
	revA.Store(10)
	k.Add(fakeWatch{"/a/", &revA}, la, true)
	stored := func() int64 {
		t.Helper()
		v, err := k.store.Checkpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	k.Write(ctx)
	if got := stored(); got != 10 {
		t.Fatalf("checkpoint %d, want 10", got)
	}

	lb := NewLedger(c, "/b/")
	k.Add(fakeWatch{"/b/", &revB}, lb, false) // not listed yet
	revA.Store(11)
	k.Write(ctx)
	if got := stored(); got != 11 {
		t.Errorf("checkpoint %d while /b/ lists, want 11", got)
	}
	lb.Put(&cache.Object{Key: "/b/x"}, 1) // its list: a key no record holds
	lb.Listed(12)
	revB.Store(12)
	revA.Store(12)
	k.Write(ctx) // records rate-limited: the checkpoint moves alone
	if got := stored(); got != 12 {
		t.Errorf("checkpoint %d with /b/ listed and not recorded, want 12", got)
	}
	if _, covered, _ := k.store.Covers(ctx); slices.Contains(covered, "/b/") {
		t.Fatalf("the record covers /b/ already: %q", covered)
	}
	k.nextRecord = time.Time{}
	k.Write(ctx) // nothing moved, but a record may be written: /b/ joins
	if at, covered, err := k.store.Covers(ctx); err != nil || at != 12 || !slices.Equal(covered, []string{"/a/", "/b/"}) {
		t.Errorf("record at %d covers %q (%v), want /a/ and /b/ at 12", at, covered, err)
	}

	k.Add(fakeWatch{"/c/", &revC}, NewLedger(c, "/c/"), true) // of the start, not listed
	revA.Store(13)
	revB.Store(13)
	k.nextRecord = time.Time{}
	k.Write(ctx)
	if got := stored(); got != 12 {
		t.Errorf("checkpoint %d while a prefix of the start lists, want 12", got)
	}
}
