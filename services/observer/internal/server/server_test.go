package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/object"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeObserver records the server's calls; reads may run at once.
type fakeObserver struct {
	mu     sync.Mutex
	nudges int
	waits  []time.Duration
}

func (f *fakeObserver) Nudge() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nudges++
}

func (f *fakeObserver) ReadWaited(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, d)
}

func (f *fakeObserver) Status(string) *observerv1.StatusResponse { return &observerv1.StatusResponse{} }

func TestWaitError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("boom"), codes.Internal},
	} {
		if got := status.Code(waitError(tc.err, 10, 5)); got != tc.want {
			t.Errorf("waitError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestTokenRoundTrip(t *testing.T) {
	for _, key := range []string{"/registry/pods/a/b", "", "ünïcode/\x00"} {
		got, err := decodeToken(encodeToken(key))
		if err != nil || got != key {
			t.Errorf("decodeToken(encodeToken(%q)) = %q, %v", key, got, err)
		}
	}
	for _, bad := range []string{"???", "aGVsbG8", "k"} {
		if _, err := decodeToken(bad); err == nil {
			t.Errorf("decodeToken(%q) succeeded", bad)
		}
	}
}

func FuzzDecodeToken(f *testing.F) {
	f.Add("")
	f.Add(encodeToken("/registry/pods/a/b"))
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, tok string) {
		key, err := decodeToken(tok)
		if err != nil {
			return
		}
		if again, err := decodeToken(encodeToken(key)); err != nil || again != key {
			t.Errorf("key %q from token %q does not round-trip: %q, %v", key, tok, again, err)
		}
	})
}

func TestHandlers(t *testing.T) {
	c := cache.New([]string{"/registry/pods/"})
	c.Put(&cache.Object{Key: "/registry/pods/ns/a", Value: []byte("a"), ModRevision: 3, Namespace: "ns",
		Meta: object.Meta{Owners: []object.OwnerRef{{Kind: "ReplicaSet", Name: "rs", UID: "u"}}}})
	c.SetRevision("/registry/pods/", 3)
	obs := &fakeObserver{}
	s := New(c, obs)
	ctx := context.Background()

	got, err := s.Get(ctx, &observerv1.GetRequest{Key: "/registry/pods/ns/a", MinRevision: 3})
	if err != nil || string(got.GetObject()) != "a" || got.GetModRevision() != 3 || got.GetRevision() != 3 {
		t.Fatalf("Get = %v, %v", got, err)
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := s.Get(short, &observerv1.GetRequest{Key: "/registry/pods/ns/a", MinRevision: 4}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Get at a future revision = %v, want DeadlineExceeded", err)
	}
	if obs.nudges == 0 {
		t.Error("a min_revision wait did not nudge the watches")
	}
	// The read at revision 3 waited (for nothing) and was observed; the
	// one that gave up was not.
	if len(obs.waits) != 1 {
		t.Errorf("waits observed = %v, want the one read that reached its min_revision", obs.waits)
	}
	list, err := s.List(ctx, &observerv1.ListRequest{OwnerKind: "ReplicaSet", OwnerName: "rs", OwnerNamespace: "ns"})
	if err != nil || len(list.GetItems()) != 1 || list.GetNextPageToken() != "" {
		t.Fatalf("List by owner = %v, %v", list, err)
	}
	for _, req := range []*observerv1.ListRequest{
		{OwnerName: "rs"},
		{OwnerKind: "ReplicaSet"},
		{OwnerNamespace: "ns"},
		{PageSize: MaxPageSize + 1},
		{PageToken: "nope"},
		{MinRevision: -1},
	} {
		if _, err := s.List(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("List(%v) = %v, want InvalidArgument", req, err)
		}
	}
}

// TestReadsWhilePrefixesGo: a List over several prefixes that waits for a
// revision returns once those still watched reach it, without one removed
// while it waited; a Get whose prefix is removed while it waits is
// refused as under no watched prefix, not answered NOT_FOUND.
func TestReadsWhilePrefixesGo(t *testing.T) {
	c := cache.New([]string{"/registry/pods/", "/registry/foos/"})
	c.Put(&cache.Object{Key: "/registry/pods/ns/a", Value: []byte("a"), ModRevision: 3, Namespace: "ns",
		Meta: object.Meta{Owners: []object.OwnerRef{{Kind: "Foo", Name: "f", UID: "u"}}}})
	c.SetRevision("/registry/pods/", 3)
	c.SetRevision("/registry/foos/", 3)
	s := New(c, &fakeObserver{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	listed := make(chan error, 1)
	var items int
	go func() {
		resp, err := s.List(ctx, &observerv1.ListRequest{Prefix: "/registry/", OwnerKind: "Foo", OwnerName: "f", MinRevision: 5})
		items = len(resp.GetItems())
		listed <- err
	}()
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, &observerv1.GetRequest{Key: "/registry/foos/ns/f", MinRevision: 5})
		got <- err
	}()
	c.SetRevision("/registry/pods/", 5)
	select {
	case err := <-listed:
		t.Fatalf("List returned %v with /registry/foos/ behind", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.RemovePrefix("/registry/foos/")
	if err := <-listed; err != nil || items != 1 {
		t.Errorf("List = %d items, %v; want the pod", items, err)
	}
	if err := <-got; status.Code(err) != codes.InvalidArgument {
		t.Errorf("Get under a prefix removed while it waited = %v, want InvalidArgument", err)
	}
}
