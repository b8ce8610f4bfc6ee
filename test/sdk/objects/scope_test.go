package objects_test

import (
	"context"
	"sync"
	"testing"

	"github.com/batonrun/baton/sdk/objects"
)

// askedCache answers from etcd and records the min_revision of each read:
// what the Client asked the observer's cache to wait for.
type askedCache struct {
	st   *objects.Client // reads etcd
	mu   sync.Mutex
	last int64
}

func (c *askedCache) Get(ctx context.Context, key string, minRev int64) (objects.Raw, error) {
	c.mu.Lock()
	c.last = minRev
	c.mu.Unlock()
	return c.st.GetDirect(context.Background(), key)
}

func (c *askedCache) List(ctx context.Context, prefix string, owner objects.OwnedBy, minRev int64) ([]objects.Raw, error) {
	c.mu.Lock()
	c.last = minRev
	c.mu.Unlock()
	return c.st.ListDirect(context.Background(), prefix, owner)
}

func (c *askedCache) asked() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// TestScopeWaitsForItsKeysWritesOnly: a reconcile's cache reads (under
// Scope) wait for the lease's min_revision, its own writes and those of
// earlier reconciles of its key, not for what reconciles of other keys
// wrote since; a read without a scope waits for every write of the Client.
func TestScopeWaitsForItsKeysWritesOnly(t *testing.T) {
	direct, cli := newClient(t)
	cache := &askedCache{st: direct}
	st := objects.NewClientWithCache(cli, cache)
	ctx := t.Context()
	create := func(ctx context.Context, name string) int64 {
		t.Helper()
		rev, err := st.Create(ctx, objects.Key("pods", "ns", name), &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: name, Namespace: "ns"}})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	read := func(ctx context.Context) int64 {
		t.Helper()
		if _, err := st.Get(ctx, objects.Key("pods", "ns", "a1")); err != nil {
			t.Fatal(err)
		}
		return cache.asked()
	}

	a := st.Scope(ctx, "ns/a", 0)
	revA := create(a, "a1")
	if got := read(a); got != revA {
		t.Fatalf("a read after its own write waited for %d, want %d", got, revA)
	}
	revB := create(st.Scope(ctx, "ns/b", 0), "b1")
	if revB <= revA {
		t.Fatalf("revisions %d, %d", revA, revB)
	}
	if got := read(st.Scope(ctx, "ns/a", 0)); got != revA {
		t.Errorf("a later reconcile of a waited for %d, want its key's last write %d (not b's %d)", got, revA, revB)
	}
	if got := read(st.Scope(ctx, "ns/c", 0)); got != 0 {
		t.Errorf("a reconcile of a key never written waited for %d, want 0", got)
	}
	if got := read(st.Scope(ctx, "ns/c", revB+5)); got != revB+5 {
		t.Errorf("a reconcile with a lease's min_revision waited for %d, want %d", got, revB+5)
	}
	if got := read(ctx); got != revB {
		t.Errorf("a read without a scope waited for %d, want the Client's newest write %d", got, revB)
	}
}
