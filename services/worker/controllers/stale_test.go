package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// laggingCache is a cache that lags etcd, as the observer's can: each
// resource's objects are read from etcd as they were at a revision of its
// own (etcd keeps that history), or at the head for a resource not pinned.
// It is the observer's cache at its worst, made of etcd's real history
// rather than of invented answers.
type laggingCache struct {
	cli *clientv3.Client
	mu  sync.Mutex
	at  map[string]int64 // resource → the revision its reads see
}

func (c *laggingCache) pin(resource string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[resource] = rev
}

func (c *laggingCache) rev(key string) []clientv3.OpOption {
	c.mu.Lock()
	defer c.mu.Unlock()
	for res, rev := range c.at {
		if strings.HasPrefix(key, "/registry/"+res+"/") {
			return []clientv3.OpOption{clientv3.WithRev(rev)}
		}
	}
	return nil
}

func (c *laggingCache) Get(ctx context.Context, key string, _ int64) (objects.Raw, error) {
	resp, err := c.cli.Get(ctx, key, c.rev(key)...)
	if err != nil {
		return objects.Raw{}, err
	}
	if len(resp.Kvs) == 0 {
		return objects.Raw{}, fmt.Errorf("get %s: %w", key, objects.ErrNotFound)
	}
	return objects.Raw{Key: key, Value: resp.Kvs[0].Value, ModRevision: resp.Kvs[0].ModRevision}, nil
}

func (c *laggingCache) List(ctx context.Context, prefix string, owner objects.OwnedBy, _ int64) ([]objects.Raw, error) {
	resp, err := c.cli.Get(ctx, prefix, append(c.rev(prefix), clientv3.WithPrefix())...)
	if err != nil {
		return nil, err
	}
	var out []objects.Raw
	for _, kv := range resp.Kvs {
		var o struct {
			Metadata objects.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(kv.Value, &o) != nil {
			continue
		}
		if owner.Kind != "" && !o.Metadata.OwnedBy(owner.Kind, owner.Name, owner.UID) {
			continue
		}
		out = append(out, objects.Raw{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision})
	}
	return out, nil
}

// TestStaleCacheKeepsALiveOwnersChildren: a ReplicaSet deleted and created
// again under its name, its new pods made by a reconcile that saw it; then
// reconciles whose cache lags on the ReplicaSets (it shows the set gone, or
// the old set) but not on the pods. Neither may delete the new set's pods:
// with the owner's uid confirmed in etcd they are the live owner's. Once
// the cache is current, the old set's leftovers go and the new set's stay.
func TestStaleCacheKeepsALiveOwnersChildren(t *testing.T) {
	w := newWorld(t)
	rs := map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{}, "spec": map[string]any{"replicas": 2, "template": template("nginx", 0, 0)}}
	w.apply("replicasets", "default", "web", rs)
	w.converge(nil)
	oldUID := get[objects.ReplicaSet](w, "replicasets", "web").Metadata.UID
	withOld := w.rev() // the set as first made, with its two pods

	w.del(objects.Key("replicasets", "default", "web"))
	gone := w.rev() // no set named web
	rs2 := map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{}, "spec": map[string]any{"replicas": 2, "template": template("nginx", 0, 0)}}
	w.apply("replicasets", "default", "web", rs2) // a new uid: apply found none
	newUID := get[objects.ReplicaSet](w, "replicasets", "web").Metadata.UID
	if newUID == oldUID {
		t.Fatal("the set made again kept its uid")
	}
	// A reconcile that sees the new set makes its two pods (the old
	// ones are leftovers it leaves to a current view below).
	rc := func(st *objects.Client) error {
		c := &ReplicaSetController{Deps{Objects: st, Log: w.ctrls["replicasets"].(*ReplicaSetController).d.Log}}
		_, err := c.Reconcile(t.Context(), reconcile.Request{Queue: "replicasets", Key: "default/web"})
		return err
	}
	current := objects.NewClientWithCache(w.cli, &laggingCache{cli: w.cli, at: map[string]int64{}})
	if err := rc(current); err != nil {
		t.Fatal(err)
	}
	newPods := func() int {
		n := 0
		for _, p := range w.pods("ReplicaSet", "web") {
			if p.Metadata.OwnedBy("ReplicaSet", "web", newUID) {
				n++
			}
		}
		return n
	}
	if n := newPods(); n != 2 {
		t.Fatalf("the new set has %d pods, want 2", n)
	}

	for _, lag := range []struct {
		name string
		at   int64
	}{{"shows the set gone", gone}, {"shows the old set", withOld}} {
		cache := &laggingCache{cli: w.cli, at: map[string]int64{}}
		cache.pin("replicasets", lag.at)
		err := rc(objects.NewClientWithCache(w.cli, cache))
		if lag.at == withOld && err == nil {
			t.Errorf("%s: the reconcile acted on an owner etcd has replaced", lag.name)
		}
		if n := newPods(); n != 2 {
			t.Fatalf("a cache that %s deleted the live set's pods: %d left", lag.name, n)
		}
	}

	// Current again: the old set's pods are leftovers and go.
	w.converge(nil)
	for _, p := range w.pods("ReplicaSet", "web") {
		if !p.Metadata.OwnedBy("ReplicaSet", "web", newUID) {
			t.Errorf("pod %s of the old set survived", p.Metadata.Name)
		}
	}
	if n := newPods(); n != 2 {
		t.Fatalf("the new set has %d pods, want 2", n)
	}
}

// TestFirstReconcileIsOneWrite: a new ReplicaSet's (or Job's) first
// reconcile creates its pods and writes its status in one etcd
// transaction; and from a stale read of the set (changed since), the
// transaction is refused and the two steps still create the pods and write
// the status over the newer set.
func TestFirstReconcileIsOneWrite(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	set := func(name string, labels map[string]any) map[string]any {
		return map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{"labels": labels},
			"spec": map[string]any{"replicas": 3, "template": template("nginx", 0, 0)}}
	}
	w.apply("replicasets", "default", "one", set("one", nil))
	before := w.rev()
	if _, err := w.ctrls["replicasets"].Reconcile(ctx, reconcile.Request{Queue: "replicasets", Key: "default/one"}); err != nil {
		t.Fatal(err)
	}
	if after := w.rev(); after != before+1 {
		t.Errorf("the first reconcile took %d revisions, want 1", after-before)
	}
	got := get[objects.ReplicaSet](w, "replicasets", "one")
	if pods := w.pods("ReplicaSet", "one"); len(pods) != 3 || got.Status.Replicas != 3 || got.Status.ReadyReplicas != 0 || got.Status.ObservedGeneration != got.Metadata.Generation {
		t.Errorf("after one reconcile: %d pods, status %+v", len(pods), got.Status)
	}

	// A Job's first reconcile too: its pods and its status (active) at once.
	w.apply("jobs", "default", "j", map[string]any{"kind": "Job", "metadata": map[string]any{},
		"spec": map[string]any{"completions": 2, "parallelism": 2, "template": template("busybox", 2, 0)}})
	before = w.rev()
	if _, err := w.ctrls["jobs"].Reconcile(ctx, reconcile.Request{Queue: "jobs", Key: "default/j"}); err != nil {
		t.Fatal(err)
	}
	if after := w.rev(); after != before+1 {
		t.Errorf("the Job's first reconcile took %d revisions, want 1", after-before)
	}
	if job := get[objects.Job](w, "jobs", "j"); len(w.pods("Job", "j")) != 2 || job.Status.Active != 2 {
		t.Errorf("after one Job reconcile: %d pods, status %+v", len(w.pods("Job", "j")), job.Status)
	}

	// A cache that shows the set as it was before a label was added.
	w.apply("replicasets", "default", "two", set("two", nil))
	stale := w.rev()
	w.apply("replicasets", "default", "two", set("two", map[string]any{"changed": "yes"}))
	cache := &laggingCache{cli: w.cli, at: map[string]int64{"replicasets": stale}}
	rc, err := New("replicasets", Deps{Objects: objects.NewClientWithCache(w.cli, cache), Now: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Reconcile(ctx, reconcile.Request{Queue: "replicasets", Key: "default/two"}); err != nil {
		t.Fatal(err)
	}
	two := get[objects.ReplicaSet](w, "replicasets", "two")
	if pods := w.pods("ReplicaSet", "two"); len(pods) != 3 || two.Status.Replicas != 3 || two.Metadata.Labels["changed"] != "yes" {
		t.Errorf("from a stale read: %d pods, status %+v, labels %v", len(pods), two.Status, two.Metadata.Labels)
	}
}
