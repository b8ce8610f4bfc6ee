package cache

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonrun/baton/services/observer/internal/object"
)

func pod(ns, name, ownerKind, ownerName, ownerUID string, rev int64) *Object {
	m := object.Meta{Kind: "Pod", Namespace: ns, Name: name}
	if ownerKind != "" {
		m.Owners = []object.OwnerRef{{Kind: ownerKind, Name: ownerName, UID: ownerUID}}
	}
	return &Object{Key: "/registry/pods/" + ns + "/" + name, Value: []byte(name), ModRevision: rev, Meta: m, Namespace: ns}
}

func keys(objs []*Object) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func TestOwnerIndex(t *testing.T) {
	c := New([]string{"/registry/pods/"})
	c.Put(pod("a", "web-1", "ReplicaSet", "web", "u-web-a", 1))
	c.Put(pod("a", "web-2", "ReplicaSet", "web", "u-web-a", 2))
	c.Put(pod("b", "web-1", "ReplicaSet", "web", "u-web-b", 3))
	c.Put(pod("a", "job-1", "Job", "job", "u-job", 4))
	c.Put(pod("a", "lone", "", "", "", 5))
	// Adoption: web-2 moves to another owner; the old index entry goes.
	c.Put(pod("a", "web-2", "ReplicaSet", "other", "u-other", 6))
	c.Delete("/registry/pods/a/job-1")

	for _, tc := range []struct {
		name   string
		prefix string
		owner  Owner
		want   []string
	}{
		{"by uid", "", Owner{UID: "u-web-a"}, []string{"/registry/pods/a/web-1"}},
		{"by kind and name, any namespace", "/registry/pods/", Owner{Kind: "ReplicaSet", Name: "web"}, []string{"/registry/pods/a/web-1", "/registry/pods/b/web-1"}},
		{"by kind, name and namespace", "", Owner{Kind: "ReplicaSet", Name: "web", Namespace: "b"}, []string{"/registry/pods/b/web-1"}},
		{"prefix narrows", "/registry/pods/b/", Owner{Kind: "ReplicaSet", Name: "web"}, []string{"/registry/pods/b/web-1"}},
		{"adopted", "", Owner{Kind: "ReplicaSet", Name: "other"}, []string{"/registry/pods/a/web-2"}},
		{"deleted child", "", Owner{UID: "u-job"}, []string{}},
		{"kind must match", "", Owner{Kind: "Job", Name: "web"}, []string{}},
		{"no owner filter", "/registry/pods/a/", Owner{}, []string{"/registry/pods/a/lone", "/registry/pods/a/web-1", "/registry/pods/a/web-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more := c.List(tc.prefix, tc.owner, "", 100)
			if fmt.Sprint(keys(got)) != fmt.Sprint(tc.want) || more {
				t.Errorf("List = %v (more %v), want %v", keys(got), more, tc.want)
			}
		})
	}
}

func TestListPages(t *testing.T) {
	c := New([]string{"/registry/pods/"})
	var want []string
	for i := range 25 {
		o := pod("ns", fmt.Sprintf("p%02d", i), "ReplicaSet", "rs", "u", int64(i+1))
		c.Put(o)
		want = append(want, o.Key)
	}
	for _, owner := range []Owner{{}, {UID: "u"}} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("too many pages")
			}
			items, more := c.List("/registry/pods/", owner, after, 10)
			got = append(got, keys(items)...)
			if !more {
				break
			}
			after = items[len(items)-1].Key
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("owner %+v: pages gave %v, want %v", owner, got, want)
		}
	}
}

func TestWait(t *testing.T) {
	c := New([]string{"/a/", "/b/"})
	nudged := make(chan struct{}, 100)
	nudge := func() { nudged <- struct{}{} }

	// Times out with the context's error.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx, 5, nudge, "/a/"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
	if len(nudged) == 0 {
		t.Error("Wait did not nudge")
	}

	// Answers once the revision is reached.
	done := make(chan error, 1)
	go func() { done <- c.Wait(t.Context(), 5, nudge, "/a/", "/b/") }()
	c.SetRevision("/a/", 7)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before /b/ reached 5", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.SetRevision("/b/", 5)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the revision was reached")
	}
	c.SetRevision("/a/", 3) // never backwards
	if got := c.Revision("/a/"); got != 7 {
		t.Errorf("Revision(/a/) = %d, want 7", got)
	}
	if got := c.Revision(); got != 5 {
		t.Errorf("Revision() = %d, want 5 (the lowest)", got)
	}
}

// TestWaitIgnoresARemovedPrefix: a read waiting on several prefixes (a
// List of /registry/) returns once those still kept reach its revision:
// one removed while it waits (its declaration went) holds it no longer,
// and one removed before holds it not at all.
func TestWaitIgnoresARemovedPrefix(t *testing.T) {
	c := New([]string{"/a/", "/b/"})
	done := make(chan error, 1)
	go func() { done <- c.Wait(t.Context(), 5, nil, "/a/", "/b/") }()
	c.SetRevision("/a/", 5)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v with /b/ behind", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.RemovePrefix("/b/")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still waits for a prefix no longer kept")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Wait(ctx, 9, nil, "/b/"); err != nil {
		t.Errorf("Wait on a prefix no longer kept = %v, want at once", err)
	}
	if got := c.Revision("/a/", "/b/"); got != 5 {
		t.Errorf("Revision(/a/, /b/) = %d, want /a/'s 5", got)
	}
}

func TestAddAndRemovePrefix(t *testing.T) {
	c := New([]string{"/registry/pods/"})
	c.AddPrefix("/registry/greetings/")
	if got := c.Prefixes(); fmt.Sprint(got) != "[/registry/greetings/ /registry/pods/]" {
		t.Fatalf("Prefixes = %v", got)
	}
	c.Put(pod("a", "p", "Greeting", "g", "u-g", 1))
	c.Put(&Object{Key: "/registry/greetings/a/g", ModRevision: 2})
	c.Put(&Object{Key: "/registry/greetings/b/h", ModRevision: 3})
	c.SetRevision("/registry/greetings/", 3)
	c.AddPrefix("/registry/greetings/") // again: nothing changes
	if got := c.Revision("/registry/greetings/"); got != 3 {
		t.Errorf("revision after a second AddPrefix = %d, want 3", got)
	}
	if n := c.RemovePrefix("/registry/greetings/"); n != 2 {
		t.Errorf("RemovePrefix removed %d objects, want 2", n)
	}
	if _, ok := c.PrefixOf("/registry/greetings/a/g"); ok {
		t.Error("a removed prefix is still watched")
	}
	if _, ok := c.Get("/registry/greetings/a/g"); ok || c.Len() != 1 {
		t.Errorf("the removed prefix's objects are still cached (%d objects)", c.Len())
	}
	if items, _ := c.List("", Owner{Kind: "Greeting", Name: "g"}, "", 10); len(items) != 1 {
		t.Errorf("the other prefix's owner index lost its entry: %d items", len(items))
	}
}
