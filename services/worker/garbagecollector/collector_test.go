package garbagecollector

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
)

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
			w.converge()
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
			w.converge()
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
	w.converge()
	if m, ok := w.meta("replicasets", "web"); !ok || !m.HasFinalizer(objects.FinalizerForeground) {
		t.Fatalf("the replicaset did not wait for its held pod: %+v (there: %v)", m, ok)
	}
	if m, ok := w.meta("pods", "held"); !ok || !m.IsDeleting() {
		t.Fatalf("the held pod: %+v (there: %v), want it being deleted", m, ok)
	}
	if err := w.st.RemoveFinalizer(ctx, objects.Key("pods", "default", "held"), "", "example.com/flush"); err != nil {
		t.Fatal(err)
	}
	w.converge()
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
	w.converge()
	if got := w.names("pods"); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("pods %v, want the shared one alone (each set has its one)", got)
	}
	w.del(objects.Key("replicasets", "default", "a"))
	w.converge()
	m, ok := w.meta("pods", "shared")
	if !ok {
		t.Fatal("the pod went with one of its two owners")
	}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != b.UID {
		t.Errorf("owner references %+v, want only set b's", m.OwnerReferences)
	}
	w.del(objects.Key("replicasets", "default", "b"))
	w.converge()
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
	w.converge()
	if _, ok := w.meta("pods", "done"); ok {
		t.Fatal("a pod being deleted with no finalizer left is still there")
	}
}

// TestCollectorDeclaredKind: a kind known only from a declaration the
// observer executes (a Foo owning a Deployment) is learned while the
// collector runs. Until then a Deployment that names a Foo as owner is
// left alone, whether or not the Foo lives; once it is known, a Deployment
// whose Foo is gone is collected at once, and deleting a live Foo takes
// its Deployment, ReplicaSet and pods with it.
func TestCollectorDeclaredKind(t *testing.T) {
	w := newWorld(t)
	obs := &fakeObserver{cli: w.cli}
	w.gc = w.collector(Options{Objects: w.st, Kinds: obs, Etcd: w.cli})
	foo := kinds.Kind{Kind: "Foo", Resource: "foos", Aliases: []string{"foo"}}

	// A Deployment of a Foo that never was, before Foo is declared.
	w.put(objects.Key("deployments", "default", "stray"), map[string]any{"kind": "Deployment", "metadata": map[string]any{
		"name": "stray", "namespace": "default", "uid": objects.NewUID(),
		"ownerReferences": []any{map[string]any{"kind": "Foo", "name": "ghost", "uid": objects.NewUID()}}},
		"spec": map[string]any{"replicas": 0, "template": template("nginx", 0, 0)}})
	_, err := w.judge(w.gc, kinds.MustBuiltin(kinds.Deployment), "default/stray")
	if !errors.Is(err, errUnknownKind) {
		t.Fatalf("judging a reference to an undeclared kind: %v, want errUnknownKind", err)
	}
	if _, ok := w.meta("deployments", "stray"); !ok {
		t.Fatal("a deployment whose owner's kind is unknown was deleted")
	}

	w.run(w.gc)
	w.publish(kinds.Declaration{Queue: "foos", For: foo, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Deployment)}})
	waitUntil(t, "the collector learns Foo", func() bool {
		_, ok := w.gc.kinds.kind("Foo")
		return ok
	})
	// Learning Foo looked again at the stray Deployment, whose Foo is gone.
	waitUntil(t, "the stray deployment collected", func() bool {
		_, ok := w.meta("deployments", "stray")
		return !ok
	})
	var names []string
	for _, k := range w.gc.Kinds() {
		names = append(names, k.Kind)
	}
	if want := []string{"Deployment", "ReplicaSet", "StatefulSet", "Job", "Pod", "Foo"}; !slices.Equal(names, want) {
		t.Errorf("kinds %v, want %v (Deployment is known once)", names, want)
	}

	w.put(objects.Key("foos", "default", "app"), map[string]any{"kind": "Foo", "metadata": map[string]any{
		"name": "app", "namespace": "default", "uid": objects.NewUID()}})
	app, _ := w.meta("foos", "app")
	d := deployment(2)
	d["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"kind": "Foo", "name": "app", "uid": app.UID}}
	w.apply("deployments", "default", "app", d)
	w.converge()
	if len(w.names("deployments")) != 1 || len(w.names("replicasets")) != 1 || len(w.names("pods")) != 2 {
		t.Fatalf("with a live Foo: deployments %v, replicasets %v, pods %v", w.names("deployments"), w.names("replicasets"), w.names("pods"))
	}
	w.del(objects.Key("foos", "default", "app"))
	w.converge()
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
			w.converge()
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
			gc := w.collector(Options{Objects: st})
			judge := func(k kinds.Kind, key string) {
				t.Helper()
				if _, err := w.judge(gc, k, key); err != nil {
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
			w.converge()
			if owned(old.UID) != 0 || owned(cur.UID) != 2 {
				t.Errorf("current again: the old set's pods %d, the new set's %d, want 0 and 2", owned(old.UID), owned(cur.UID))
			}
		})
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
	gc := w.collector(Options{Objects: objects.NewClientWithCache(w.cli, cache)})
	if _, err := w.judge(gc, kinds.MustBuiltin(kinds.ReplicaSet), "default/web"); err != nil {
		t.Fatalf("collect the replicaset's key: %v", err)
	}
	if _, ok := w.meta("pods", "web-0"); ok {
		t.Fatal("the pod of a gone replicaset is still there: its status change since the cache saw it made the collector give up on it")
	}
}

// TestStaleCacheStillCleansUp: when the owner is really gone, the garbage
// collector reading through a cache deletes its children, confirming once
// in etcd and deleting each as it read it, with no read of its own.
func TestStaleCacheStillCleansUp(t *testing.T) {
	w := newWorld(t)
	w.apply("jobs", "default", "batch", map[string]any{"kind": "Job", "metadata": map[string]any{}, "spec": map[string]any{"parallelism": 3, "completions": 3, "template": template("busybox", 1000, 0)}})
	w.converge()
	if n := len(w.pods("Job", "batch")); n != 3 {
		t.Fatalf("the job has %d pods, want 3", n)
	}
	w.del(objects.Key("jobs", "default", "batch"))
	st := objects.NewClientWithCache(w.cli, &laggingCache{cli: w.cli, at: map[string]int64{}})
	job := kinds.MustBuiltin(kinds.Job)
	if _, err := w.judge(w.collector(Options{Objects: st}), job, "default/batch"); err != nil {
		t.Fatal(err)
	}
	if n := len(w.pods("Job", "batch")); n != 0 {
		t.Fatalf("the deleted job kept %d pods", n)
	}
	if r := st.Reads(); r.Etcd != 1 {
		t.Errorf("etcd reads %d, want 1 (the owner confirmed gone)", r.Etcd)
	}
}
