package checkpoint

import (
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
