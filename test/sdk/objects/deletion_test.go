package objects_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/sdk/objects"
)

// stored reads the object at key from etcd: its metadata, and whether it
// is there.
func stored(t *testing.T, st *objects.Client, key string) (objects.ObjectMeta, bool) {
	t.Helper()
	raw, err := st.GetDirect(t.Context(), key)
	if errors.Is(err, objects.ErrNotFound) {
		return objects.ObjectMeta{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		Metadata objects.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw.Value, &o); err != nil {
		t.Fatal(err)
	}
	return o.Metadata, true
}

// TestDeleteProtocol: an object without finalizers is removed; one with
// finalizers, or deleted in the foreground or as an orphan, is marked with
// deletionTimestamp and its propagation's finalizer, once; a later delete
// changes nothing; and removing the last finalizer removes the object.
func TestDeleteProtocol(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	put := func(name, meta string) string {
		t.Helper()
		key := objects.Key("foos", "default", name)
		if _, err := cli.Put(ctx, key, `{"kind":"Foo","extra":{"kept":true},"metadata":{"name":"`+name+`","namespace":"default","uid":"u-`+name+`","future":1`+meta+`},"spec":{"a":1}}`); err != nil {
			t.Fatal(err)
		}
		return key
	}

	plain := put("plain", "")
	if d, err := st.DeleteWith(ctx, plain, objects.DeleteOptions{}); err != nil || d != objects.Removed {
		t.Fatalf("background delete of an object without finalizers: %v, %v", d, err)
	}
	if _, ok := stored(t, st, plain); ok {
		t.Fatal("the object is still there")
	}
	if _, err := st.DeleteWith(ctx, plain, objects.DeleteOptions{}); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("delete of a missing object: %v, want ErrNotFound", err)
	}

	for _, tc := range []struct {
		name, meta string
		prop       objects.Propagation
		want       []string
	}{
		{"held", `,"finalizers":["example.com/flush"]`, objects.Background, []string{"example.com/flush"}},
		{"foreground", "", objects.Foreground, []string{objects.FinalizerForeground}},
		{"orphan", `,"finalizers":["example.com/flush"]`, objects.Orphan, []string{"example.com/flush", objects.FinalizerOrphan}},
	} {
		key := put(tc.name, tc.meta)
		d, err := st.DeleteWith(ctx, key, objects.DeleteOptions{Propagation: tc.prop})
		if err != nil || d != objects.Marked {
			t.Fatalf("%s: delete: %v, %v; want Marked", tc.name, d, err)
		}
		m, ok := stored(t, st, key)
		if !ok || !m.IsDeleting() || !slices.Equal(m.Finalizers, tc.want) {
			t.Fatalf("%s: after the delete: %+v (there: %v), want deletionTimestamp and finalizers %v", tc.name, m, ok, tc.want)
		}
		if _, err := time.Parse(time.RFC3339, m.DeletionTimestamp); err != nil {
			t.Errorf("%s: deletionTimestamp %q is not RFC 3339: %v", tc.name, m.DeletionTimestamp, err)
		}
		raw, _ := cli.Get(ctx, key)
		if v := string(raw.Kvs[0].Value); !strings.Contains(v, `"extra":{"kept":true}`) || !strings.Contains(v, `"future":1`) || !strings.Contains(v, `"spec":{"a":1}`) {
			t.Errorf("%s: the mark lost fields it does not know: %s", tc.name, v)
		}
		rev := raw.Kvs[0].ModRevision
		// Once set, a later delete leaves it, whatever its propagation.
		for _, again := range []objects.Propagation{objects.Background, objects.Foreground, objects.Orphan} {
			if d, err := st.DeleteWith(ctx, key, objects.DeleteOptions{Propagation: again}); err != nil || d != objects.AlreadyDeleting {
				t.Errorf("%s: a second %s delete: %v, %v; want AlreadyDeleting", tc.name, again, d, err)
			}
		}
		if raw, _ := cli.Get(ctx, key); raw.Kvs[0].ModRevision != rev {
			t.Errorf("%s: a second delete wrote", tc.name)
		}
		// No finalizer may join once deletionTimestamp is set.
		if err := st.AddFinalizer(ctx, key, "", "example.com/late"); !errors.Is(err, objects.ErrDeleting) {
			t.Errorf("%s: AddFinalizer on an object being deleted: %v, want ErrDeleting", tc.name, err)
		}
		// The last one removed removes the object.
		for i, f := range tc.want {
			if err := st.RemoveFinalizer(ctx, key, "u-"+tc.name, f); err != nil {
				t.Fatal(err)
			}
			m, ok := stored(t, st, key)
			if last := i == len(tc.want)-1; ok == last {
				t.Fatalf("%s: after removing %s (last: %v) the object is there: %v (%+v)", tc.name, f, last, ok, m)
			}
		}
	}

	// A uid precondition spares another object of the same name.
	key := put("same", "")
	if _, err := st.DeleteWith(ctx, key, objects.DeleteOptions{UID: "someone-else"}); !errors.Is(err, objects.ErrPrecondition) {
		t.Errorf("delete with another uid: %v, want ErrPrecondition", err)
	}
	if _, ok := stored(t, st, key); !ok {
		t.Error("a delete with another uid removed the object")
	}
	// Delete, the plain form controllers use, follows the same protocol.
	if err := st.AddFinalizer(ctx, key, "u-same", "example.com/flush"); err != nil {
		t.Fatal(err)
	}
	if err := st.AddFinalizer(ctx, key, "u-same", "example.com/flush"); err != nil {
		t.Errorf("adding a finalizer held already: %v", err)
	}
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Fatal(err)
	}
	if m, ok := stored(t, st, key); !ok || !m.IsDeleting() || !slices.Equal(m.Finalizers, []string{"example.com/flush"}) {
		t.Errorf("Delete of an object with a finalizer: %+v (there: %v), want it marked", m, ok)
	}
	if _, err := objects.ParsePropagation("cascade"); err == nil {
		t.Error(`ParsePropagation("cascade") succeeded`)
	}
	if err := st.AddFinalizer(ctx, key, "", "has space"); err == nil {
		t.Error("a finalizer name with a space was taken")
	}
}

// TestModifyKeepsTheDeletionRules: a Modify may not touch
// deletionTimestamp nor add a finalizer to an object being deleted, and
// one that takes the last finalizer off an object being deleted removes
// it.
func TestModifyKeepsTheDeletionRules(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	key := objects.Key("pods", "default", "p")
	if _, err := cli.Put(ctx, key, `{"kind":"Pod","metadata":{"name":"p","namespace":"default","uid":"u1","finalizers":["a","b"]}}`); err != nil {
		t.Fatal(err)
	}
	if err := objects.Modify(ctx, st, key, func(p *objects.Pod) (bool, error) {
		p.Metadata.DeletionTimestamp = "2026-01-01T00:00:00Z"
		return true, nil
	}); !errors.Is(err, objects.ErrDeletionTimestamp) {
		t.Errorf("a Modify that sets deletionTimestamp: %v, want ErrDeletionTimestamp", err)
	}
	if err := objects.Modify(ctx, st, key, func(p *objects.Pod) (bool, error) {
		p.Metadata.Finalizers = append(p.Metadata.Finalizers, "c") // not deleting yet: fine
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteWith(ctx, key, objects.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := objects.Modify(ctx, st, key, func(p *objects.Pod) (bool, error) {
		p.Metadata.Finalizers = append(p.Metadata.Finalizers, "d")
		return true, nil
	}); !errors.Is(err, objects.ErrDeleting) {
		t.Errorf("a Modify that adds a finalizer to an object being deleted: %v, want ErrDeleting", err)
	}
	if err := objects.Modify(ctx, st, key, func(p *objects.Pod) (bool, error) {
		p.Metadata.DeletionTimestamp = ""
		return true, nil
	}); !errors.Is(err, objects.ErrDeletionTimestamp) {
		t.Errorf("a Modify that clears deletionTimestamp: %v, want ErrDeletionTimestamp", err)
	}
	if err := objects.Modify(ctx, st, key, func(p *objects.Pod) (bool, error) {
		p.Metadata.Finalizers = p.Metadata.Finalizers[1:]
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if m, ok := stored(t, st, key); !ok || !slices.Equal(m.Finalizers, []string{"b", "c"}) {
		t.Fatalf("after removing one finalizer of three: %+v (there: %v)", m, ok)
	}
	if err := objects.Modify(ctx, st, key, func(p *objects.Pod) (bool, error) {
		p.Metadata.Finalizers = nil
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if m, ok := stored(t, st, key); ok {
		t.Errorf("a Modify took the last finalizers off an object being deleted, and it stays: %+v", m)
	}
}

// TestListPages walks a prefix a page at a time, in key order, every
// object once, from etcd.
func TestListPages(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	var want []string
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		key := objects.Key("pods", "default", name)
		want = append(want, key)
		if _, err := cli.Put(ctx, key, `{}`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, objects.Key("podsx", "default", "z"), `{}`); err != nil {
		t.Fatal(err)
	}
	var got []string
	var sizes []int
	if err := st.ListPages(ctx, "/registry/pods/", 3, func(page []objects.Raw) error {
		sizes = append(sizes, len(page))
		for _, r := range page {
			got = append(got, r.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || !slices.Equal(sizes, []int{3, 3, 1}) {
		t.Errorf("pages %v of %v, want %v in pages of 3", sizes, got, want)
	}
	stop := errors.New("stop")
	if err := st.ListPages(ctx, "/registry/pods/", 2, func([]objects.Raw) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ListPages returned %v, want fn's error", err)
	}
}
