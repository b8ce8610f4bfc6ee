package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// deployment is a Deployment of n pods, as a test applies it.
func deployment(n int) map[string]any {
	return map[string]any{"kind": "Deployment", "metadata": map[string]any{}, "spec": map[string]any{"replicas": n, "template": template("nginx", 0, 0)}}
}

// names lists the names of the objects of resource in default.
func (w *world) names(resource string) []string {
	w.t.Helper()
	raws, err := w.st.ListDirect(w.t.Context(), objects.Prefix(resource, "default"), objects.OwnedBy{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, r := range raws {
		out = append(out, strings.TrimPrefix(r.Key, objects.Prefix(resource, "default")))
	}
	return out
}

// meta returns the metadata of resource/name in default, if it is there.
func (w *world) meta(resource, name string) (objects.ObjectMeta, bool) {
	w.t.Helper()
	raw, err := w.st.GetDirect(w.t.Context(), objects.Key(resource, "default", name))
	if errors.Is(err, objects.ErrNotFound) {
		return objects.ObjectMeta{}, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	m, err := decodeMeta(raw)
	if err != nil {
		w.t.Fatal(err)
	}
	return m, true
}

// deletions returns the revision at which each key under /registry/ was
// removed after rev, from etcd's history.
func (w *world) deletions(rev int64) map[string]int64 {
	w.t.Helper()
	end := w.rev()
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	out := map[string]int64{}
	for resp := range w.cli.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			w.t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				out[string(ev.Kv.Key)] = ev.Kv.ModRevision
			}
		}
		if resp.Header.Revision >= end {
			return out
		}
	}
	w.t.Fatal("the watch of the history ended early")
	return nil
}

// TestCollectorPropagation deletes a Deployment of three pods with each
// propagation and checks what is left: with background and foreground
// nothing (in the foreground the Deployment goes last, and each
// ReplicaSet after its pods), with orphan the ReplicaSet and its pods,
// owned by nobody but each other, while the Deployment goes.
func TestCollectorPropagation(t *testing.T) {
	for _, prop := range []objects.Propagation{objects.Background, objects.Foreground, objects.Orphan} {
		t.Run(string(prop), func(t *testing.T) {
			w := newWorld(t)
			w.apply("deployments", "default", "web", deployment(3))
			w.converge(nil)
			rss := w.names("replicasets")
			if len(rss) != 1 || len(w.names("pods")) != 3 {
				t.Fatalf("before: replicasets %v, pods %v", rss, w.names("pods"))
			}
			start := w.rev()
			d, err := w.st.DeleteWith(t.Context(), objects.Key("deployments", "default", "web"), objects.DeleteOptions{Propagation: prop})
			if err != nil {
				t.Fatal(err)
			}
			want := objects.Marked
			if prop == objects.Background {
				want = objects.Removed
			}
			if d != want {
				t.Fatalf("delete: %v, want %v", d, want)
			}
			if m, ok := w.meta("deployments", "web"); prop != objects.Background && (!ok || !m.IsDeleting() || !m.HasFinalizer(map[objects.Propagation]string{objects.Foreground: objects.FinalizerForeground, objects.Orphan: objects.FinalizerOrphan}[prop])) {
				t.Fatalf("the deployment deleted in the %s: %+v (there: %v)", prop, m, ok)
			}
			w.converge(nil)
			if _, ok := w.meta("deployments", "web"); ok {
				t.Fatal("the deployment is still there")
			}
			switch prop {
			case objects.Orphan:
				if got := w.names("replicasets"); !slices.Equal(got, rss) {
					t.Fatalf("orphaned replicasets %v, want %v", got, rss)
				}
				m, _ := w.meta("replicasets", rss[0])
				if len(m.OwnerReferences) != 0 {
					t.Errorf("the orphaned replicaset still names owners: %+v", m.OwnerReferences)
				}
				if n := len(w.pods("ReplicaSet", rss[0])); n != 3 {
					t.Errorf("the orphaned replicaset has %d pods, want 3", n)
				}
			default:
				if rs, pods := w.names("replicasets"), w.names("pods"); len(rs)+len(pods) != 0 {
					t.Fatalf("left: replicasets %v, pods %v", rs, pods)
				}
			}
			if prop != objects.Foreground {
				return
			}
			gone := w.deletions(start)
			dep := gone[objects.Key("deployments", "default", "web")]
			rs := gone[objects.Key("replicasets", "default", rss[0])]
			for k, at := range gone {
				switch {
				case strings.HasPrefix(k, "/registry/pods/") && at > rs:
					t.Errorf("pod %s went at revision %d, after its replicaset (%d)", k, at, rs)
				case strings.HasPrefix(k, "/registry/replicasets/") && at > dep:
					t.Errorf("replicaset %s went at revision %d, after its deployment (%d)", k, at, dep)
				}
			}
		})
	}
}

// TestCollectorForegroundWaitsForBlockingDependents: an owner deleted in
// the foreground waits for a dependent held up by a finalizer of someone
// else's, and goes once that finalizer is taken off; a dependent whose
// reference says blockOwnerDeletion: false is not waited for, and goes
// after its owner.
func TestCollectorForegroundWaitsForBlockingDependents(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	w.apply("replicasets", "default", "web", map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{},
		"spec": map[string]any{"replicas": 0, "template": template("nginx", 0, 0)}})
	owner, _ := w.meta("replicasets", "web")
	no := false
	held := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "held", Namespace: "default",
		OwnerReferences: []objects.OwnerReference{owner.Ref(objects.KindReplicaSet)}, Finalizers: []string{"example.com/flush"}}}
	free := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "free", Namespace: "default",
		OwnerReferences: []objects.OwnerReference{{Kind: objects.KindReplicaSet, Name: "web", UID: owner.UID, BlockOwnerDeletion: &no}}}}
	for _, p := range []*objects.Pod{held, free} {
		if _, err := w.st.Create(ctx, objects.Key("pods", "default", p.Metadata.Name), p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.st.DeleteWith(ctx, objects.Key("replicasets", "default", "web"), objects.DeleteOptions{Propagation: objects.Foreground}); err != nil {
		t.Fatal(err)
	}
	w.converge(nil)
	if m, ok := w.meta("replicasets", "web"); !ok || !m.HasFinalizer(objects.FinalizerForeground) {
		t.Fatalf("the replicaset did not wait for its held pod: %+v (there: %v)", m, ok)
	}
	if m, ok := w.meta("pods", "held"); !ok || !m.IsDeleting() {
		t.Fatalf("the held pod: %+v (there: %v), want it being deleted", m, ok)
	}
	if err := w.st.RemoveFinalizer(ctx, objects.Key("pods", "default", "held"), "", "example.com/flush"); err != nil {
		t.Fatal(err)
	}
	w.converge(nil)
	if got := w.names("replicasets"); len(got) != 0 {
		t.Fatalf("replicasets %v after the held pod went", got)
	}
	if got := w.names("pods"); len(got) != 0 {
		t.Fatalf("pods %v left: the one that did not block goes after its owner", got)
	}
}

// TestCollectorKeepsAnObjectWithALiveOwner: an object with two owners
// stays when one goes (the gone one's controller does not delete it
// either), and the reference to the gone one is taken out.
func TestCollectorKeepsAnObjectWithALiveOwner(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		w.apply("replicasets", "default", n, map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{},
			"spec": map[string]any{"replicas": 1, "template": template("nginx", 0, 0)}})
	}
	a, _ := w.meta("replicasets", "a")
	b, _ := w.meta("replicasets", "b")
	shared := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "shared", Namespace: "default",
		OwnerReferences: []objects.OwnerReference{a.Ref(objects.KindReplicaSet), b.Ref(objects.KindReplicaSet)}}}
	if _, err := w.st.Create(ctx, objects.Key("pods", "default", "shared"), shared); err != nil {
		t.Fatal(err)
	}
	w.converge(nil)
	if got := w.names("pods"); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("pods %v, want the shared one alone (each set has its one)", got)
	}
	w.del(objects.Key("replicasets", "default", "a"))
	w.converge(nil)
	m, ok := w.meta("pods", "shared")
	if !ok {
		t.Fatal("the pod went with one of its two owners")
	}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != b.UID {
		t.Errorf("owner references %+v, want only set b's", m.OwnerReferences)
	}
	w.del(objects.Key("replicasets", "default", "b"))
	w.converge(nil)
	if _, ok := w.meta("pods", "shared"); ok {
		t.Error("the pod outlived both its owners")
	}
}

// TestCollectorRemovesAFinalizedObject: an object being deleted whose last
// finalizer was taken off by a write that did not remove it is removed.
func TestCollectorRemovesAFinalizedObject(t *testing.T) {
	w := newWorld(t)
	w.put(objects.Key("pods", "default", "done"), map[string]any{"kind": "Pod", "metadata": map[string]any{
		"name": "done", "namespace": "default", "uid": objects.NewUID(), "deletionTimestamp": "2026-01-01T00:00:00Z"}})
	w.converge(nil)
	if _, ok := w.meta("pods", "done"); ok {
		t.Fatal("a pod being deleted with no finalizer left is still there")
	}
}

// TestCollectorDeclaredKind: a kind known only from a declaration in etcd
// (a Foo owning a Deployment) is learned while the collector runs (Learn
// starts its controller with add). Until then a Deployment that names a Foo
// as owner is left alone, whether or not the Foo lives; once it is known,
// a Deployment whose Foo is gone is collected at once, and deleting a live
// Foo takes its Deployment, ReplicaSet and pods with it.
func TestCollectorDeclaredKind(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	foo := kinds.Kind{Kind: "Foo", Resource: "foos", Aliases: []string{"foo"}}

	// A Deployment of a Foo that never was, before Foo is declared.
	w.put(objects.Key("deployments", "default", "stray"), map[string]any{"kind": "Deployment", "metadata": map[string]any{
		"name": "stray", "namespace": "default", "uid": objects.NewUID(),
		"ownerReferences": []any{map[string]any{"kind": "Foo", "name": "ghost", "uid": objects.NewUID()}}},
		"spec": map[string]any{"replicas": 0, "template": template("nginx", 0, 0)}})
	_, err := w.gc.Reconciler(kinds.MustBuiltin(kinds.Deployment)).Reconcile(ctx, reconcile.Request{Queue: "garbagecollector-deployments", Key: "default/stray"})
	if !errors.Is(err, errUnknownKind) {
		t.Fatalf("judging a reference to an undeclared kind: %v, want errUnknownKind", err)
	}
	if _, ok := w.meta("deployments", "stray"); !ok {
		t.Fatal("a deployment whose owner's kind is unknown was deleted")
	}

	var mu sync.Mutex
	var added []string
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.gc.Learn(lctx, w.cli, func(k kinds.Kind) error {
			mu.Lock()
			defer mu.Unlock()
			added = append(added, k.Kind)
			return nil
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Learn: %v", err)
		}
	}()
	b, err := (kinds.Declaration{Queue: "foos", For: foo, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Deployment)}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.cli.Put(ctx, kinds.DeclarationPrefix+"foos", string(b)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the collector learns Foo", func() bool {
		_, ok := w.gc.kind("Foo")
		return ok
	})
	// Learning Foo looked again at the stray Deployment, whose Foo is gone.
	waitUntil(t, "the stray deployment collected", func() bool {
		_, ok := w.meta("deployments", "stray")
		return !ok
	})
	mu.Lock()
	if !slices.Equal(added, []string{"Foo"}) {
		t.Errorf("Learn started controllers for %v, want only Foo's (Deployment is known)", added)
	}
	mu.Unlock()

	w.put(objects.Key("foos", "default", "app"), map[string]any{"kind": "Foo", "metadata": map[string]any{
		"name": "app", "namespace": "default", "uid": objects.NewUID()}})
	app, _ := w.meta("foos", "app")
	d := deployment(2)
	d["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"kind": "Foo", "name": "app", "uid": app.UID}}
	w.apply("deployments", "default", "app", d)
	w.converge(nil)
	if len(w.names("deployments")) != 1 || len(w.names("replicasets")) != 1 || len(w.names("pods")) != 2 {
		t.Fatalf("with a live Foo: deployments %v, replicasets %v, pods %v", w.names("deployments"), w.names("replicasets"), w.names("pods"))
	}
	w.del(objects.Key("foos", "default", "app"))
	w.converge(nil)
	if n := len(w.names("deployments")) + len(w.names("replicasets")) + len(w.names("pods")); n != 0 {
		t.Fatalf("after the Foo went: deployments %v, replicasets %v, pods %v", w.names("deployments"), w.names("replicasets"), w.names("pods"))
	}
}

// TestCollectorStaleCache: a ReplicaSet deleted and made again under its
// name (a new uid), each with its own pods. A collector whose cache lags
// on the ReplicaSets judges the set's key and every pod. Never may it
// delete the new set's pods: when its cache shows the set gone, it asks
// etcd once and deletes the old set's pods only; when it shows the old
// set, it leaves the old set's pods to a current view, which then deletes
// them.
func TestCollectorStaleCache(t *testing.T) {
	for _, lag := range []string{"shows the set gone", "shows the old set"} {
		t.Run(strings.ReplaceAll(lag, " ", "_"), func(t *testing.T) {
			w := newWorld(t)
			ctx := t.Context()
			rs := func() map[string]any {
				return map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{}, "spec": map[string]any{"replicas": 2, "template": template("nginx", 0, 0)}}
			}
			w.apply("replicasets", "default", "web", rs())
			w.converge(nil)
			old, _ := w.meta("replicasets", "web")
			withOld := w.rev()
			w.del(objects.Key("replicasets", "default", "web"))
			gone := w.rev()
			w.apply("replicasets", "default", "web", rs())
			cur, _ := w.meta("replicasets", "web")
			for i := range 2 {
				name := fmt.Sprintf("web-new%d", i)
				p := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: name, Namespace: "default",
					OwnerReferences: []objects.OwnerReference{cur.Ref(objects.KindReplicaSet)}}}
				if _, err := w.st.Create(ctx, objects.Key("pods", "default", name), p); err != nil {
					t.Fatal(err)
				}
			}
			owned := func(uid string) int { return len(w.podsOf("ReplicaSet", "web", uid)) }
			if owned(old.UID) != 2 || owned(cur.UID) != 2 {
				t.Fatalf("old set's pods %d, new set's %d, want 2 and 2", owned(old.UID), owned(cur.UID))
			}

			cache := &laggingCache{cli: w.cli, at: map[string]int64{}}
			cache.pin("replicasets", map[string]int64{"shows the set gone": gone, "shows the old set": withOld}[lag])
			st := objects.NewClientWithCache(w.cli, cache)
			gc := NewGarbageCollector(Deps{Objects: st})
			judge := func(k kinds.Kind, key string) {
				t.Helper()
				if _, err := gc.Reconciler(k).Reconcile(ctx, reconcile.Request{Queue: GarbageCollectorQueue(k), Key: key}); err != nil {
					t.Fatalf("collect %s %s: %v", k.Kind, key, err)
				}
			}
			judge(kinds.MustBuiltin(kinds.ReplicaSet), "default/web")
			if owned(cur.UID) != 2 {
				t.Fatalf("a cache that %s made the collector delete the live set's pods", lag)
			}
			if lag == "shows the set gone" {
				if owned(old.UID) != 0 {
					t.Errorf("the old set's pods: %d left, want 0", owned(old.UID))
				}
				if r := st.Reads(); r.Etcd != 1 {
					t.Errorf("etcd reads %d, want 1 (the owner looked up once)", r.Etcd)
				}
			}
			for _, p := range w.names("pods") {
				judge(kinds.MustBuiltin(kinds.Pod), "default/"+p)
			}
			if owned(cur.UID) != 2 {
				t.Fatalf("a cache that %s made the collector delete the live set's pods when it judged each", lag)
			}
			w.converge(nil)
			if owned(old.UID) != 0 || owned(cur.UID) != 2 {
				t.Errorf("current again: the old set's pods %d, the new set's %d, want 0 and 2", owned(old.UID), owned(cur.UID))
			}
		})
	}
}

// podsOf lists the pods that name ownerKind/ownerName with uid as owner.
func (w *world) podsOf(ownerKind, ownerName, uid string) []*objects.Pod {
	var out []*objects.Pod
	for _, p := range w.pods(ownerKind, ownerName) {
		if p.Metadata.OwnedBy(ownerKind, ownerName, uid) {
			out = append(out, p)
		}
	}
	return out
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: not %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGarbageCollectorQueue: every kind's queue is a DNS label, and kinds
// with long resources still get queues of their own.
func TestGarbageCollectorQueue(t *testing.T) {
	if q := GarbageCollectorQueue(kinds.MustBuiltin(kinds.Pod)); q != "garbagecollector-pods" {
		t.Errorf("pods: %q", q)
	}
	long := func(s string) kinds.Kind { return kinds.Kind{Kind: "Long", Resource: strings.Repeat("a", 55) + s} }
	a, b := GarbageCollectorQueue(long("x")), GarbageCollectorQueue(long("y"))
	if a == b || len(a) > 63 || len(b) > 63 {
		t.Errorf("long resources: %q and %q", a, b)
	}
}

// TestCollectorDependentChangedSinceRead: a ReplicaSet's pod changes its
// status after the collector's cache last saw it, then the set goes. The
// collector, judging the set's key, finds the pod through the cache and its
// conditional delete meets the newer revision. Its own queue for pods does
// not hear of status-only changes, so nothing would judge the pod again:
// it must read the pod afresh and delete it then.
func TestCollectorDependentChangedSinceRead(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	set := &objects.ReplicaSet{Kind: objects.KindReplicaSet, Metadata: objects.ObjectMeta{Name: "web", Namespace: "default", UID: objects.NewUID()}}
	if _, err := w.st.Create(ctx, objects.Key("replicasets", "default", "web"), set); err != nil {
		t.Fatal(err)
	}
	pod := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "web-0", Namespace: "default", UID: objects.NewUID(),
		OwnerReferences: []objects.OwnerReference{set.Metadata.Ref(objects.KindReplicaSet)}}}
	podKey := objects.Key("pods", "default", "web-0")
	if _, err := w.st.Create(ctx, podKey, pod); err != nil {
		t.Fatal(err)
	}
	seen := w.rev() // the cache's view of the pods
	if err := w.st.UpdateStatus(ctx, podKey, pod.Metadata.UID, objects.PodStatus{Phase: objects.PodRunning}); err != nil {
		t.Fatal(err)
	}
	w.del(objects.Key("replicasets", "default", "web"))

	cache := &laggingCache{cli: w.cli, at: map[string]int64{}}
	cache.pin("pods", seen)
	gc := NewGarbageCollector(Deps{Objects: objects.NewClientWithCache(w.cli, cache)})
	k := kinds.MustBuiltin(kinds.ReplicaSet)
	if _, err := gc.Reconciler(k).Reconcile(ctx, reconcile.Request{Queue: GarbageCollectorQueue(k), Key: "default/web"}); err != nil {
		t.Fatalf("collect the replicaset's key: %v", err)
	}
	if _, ok := w.meta("pods", "web-0"); ok {
		t.Fatal("the pod of a gone replicaset is still there: its status change since the cache saw it made the collector give up on it")
	}
}
