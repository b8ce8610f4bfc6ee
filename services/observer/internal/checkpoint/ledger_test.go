package checkpoint

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/batonrun/baton/services/observer/internal/cache"
)

func TestLedger(t *testing.T) {
	const p = "/registry/pods/"
	c := cache.New([]string{p, "/registry/replicasets/"})
	in := NewLedger(c, p)
	put := func(name string, since int64) { in.Put(&cache.Object{Key: p + name}, since) }
	check := func(step string, wantKeys []string, wantUnrecorded int64) {
		t.Helper()
		if got := in.Unrecorded(); got != wantUnrecorded {
			t.Errorf("%s: Unrecorded = %d, want %d", step, got, wantUnrecorded)
		}
		if wantKeys == nil {
			return
		}
		var want []string
		for _, k := range wantKeys {
			want = append(want, p+k)
		}
		if got := in.KnownKeys(); !slices.Equal(got, want) {
			t.Errorf("%s: KnownKeys = %q, want %q", step, got, want)
		}
	}
	// Another prefix's objects are not this informer's.
	c.Put(&cache.Object{Key: "/registry/replicasets/a/rs"})

	// The first list: every key new, since revision 1.
	put("a/1", 1)
	put("a/2", 1)
	put("a/3", 1)
	in.Listed(10)
	check("before any record", nil, 1)
	check("snapshot", []string{"a/1", "a/2", "a/3"}, 1) // held until stored
	in.Recorded(10, true)
	check("stored at 10", nil, 0)
	if in.Floor() != 10 {
		t.Errorf("Floor = %d, want 10", in.Floor())
	}

	// A delete keeps the key known until a checkpoint passes it; the stored
	// record is still valid (nothing new).
	in.Delete(p+"a/2", 12)
	check("deleted at 12", []string{"a/1", "a/2", "a/3"}, 0)
	in.Recorded(11, false)
	check("checkpoint 11", []string{"a/1", "a/2", "a/3"}, 0)
	in.Recorded(12, false)
	check("checkpoint 12", []string{"a/1", "a/3"}, 0)

	// An addition makes the record stale from its revision on; one made
	// after a snapshot stays fresh after that snapshot is stored.
	put("b/1", 15)
	check("added at 15", nil, 15)
	check("snapshot with b/1", []string{"a/1", "a/3", "b/1"}, 15)
	put("b/2", 17)
	check("added at 17 after the snapshot", nil, 15)
	in.Recorded(16, true)
	check("stored at 16", nil, 17)

	// A key deleted and created again is still known: nothing new.
	in.Delete(p+"a/1", 18)
	put("a/1", 19)
	check("recreated", []string{"a/1", "a/3", "b/1", "b/2"}, 17)
	// A snapshot whose write failed: still held.
	in.KnownKeys()
	check("snapshot not stored", nil, 17)
	put("c/1", 20)
	check("one more", nil, 17)
	in.KnownKeys()
	in.Recorded(21, true)
	check("stored at 21", nil, 0)
}

// KnownKeys costs what its own prefix holds: a prefix of one key in a cache
// of 100,000 others allocates for one key, not for the whole cache (with a
// thousand such prefixes, a record took gigabytes).
func TestKnownKeysAllocatesForItsPrefix(t *testing.T) {
	c := cache.New([]string{"/registry/pods/", "/registry/greetings/"})
	for i := range 100000 {
		c.Put(&cache.Object{Key: fmt.Sprintf("/registry/pods/ns/p%06d", i)})
	}
	l := NewLedger(c, "/registry/greetings/")
	l.Put(&cache.Object{Key: "/registry/greetings/ns/g"}, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const calls = 10
	for range calls {
		if keys := l.KnownKeys(); len(keys) != 1 {
			t.Fatalf("KnownKeys = %q, want the one greeting", keys)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 4<<10 {
		t.Errorf("KnownKeys of one key allocated %d bytes a call, want at most 4 KiB", per)
	}
}

// Changed says whether the stored record still holds exactly the prefix's
// keys: until a snapshot of a change is stored, it is true.
func TestLedgerChanged(t *testing.T) {
	const p = "/registry/pods/"
	c := cache.New([]string{p})
	l := NewLedger(c, p)
	if l.Changed() {
		t.Error("an empty ledger changed")
	}
	l.Put(&cache.Object{Key: p + "a/1"}, 1)
	if !l.Changed() {
		t.Error("an addition is no change")
	}
	l.KnownKeys()
	l.Recorded(5, false) // the snapshot was not stored
	if !l.Changed() {
		t.Error("unchanged after a record that kept the old keys")
	}
	l.KnownKeys()
	l.Recorded(6, true)
	if l.Changed() {
		t.Error("changed after its keys were stored")
	}
	l.Put(&cache.Object{Key: p + "a/1", ModRevision: 7}, 7) // a new value, the same key
	if l.Changed() {
		t.Error("a new value of a known key changed the keys")
	}
	l.Delete(p+"a/1", 8)
	if !l.Changed() {
		t.Error("a delete is no change")
	}
}
