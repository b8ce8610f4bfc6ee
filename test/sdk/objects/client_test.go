package objects_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The objects Client against a real etcd, embedded in the test.

func newClient(t *testing.T) (*objects.Client, *clientv3.Client) {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return objects.NewClient(cli, nil), cli
}

func TestCreateUpdateDeleteAreCompareAndSwap(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	key := objects.Key("pods", "default", "p")
	pod := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "p", Namespace: "default"}}
	rev, err := st.Create(ctx, key, pod)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Metadata.UID == "" || pod.Metadata.CreationTimestamp == "" {
		t.Errorf("Create did not set uid/creationTimestamp: %+v", pod.Metadata)
	}
	if _, err := st.Create(ctx, key, pod); !errors.Is(err, objects.ErrConflict) {
		t.Errorf("second Create: %v, want ErrConflict", err)
	}
	if st.MinRevision() != rev {
		t.Errorf("MinRevision = %d, want the write's %d", st.MinRevision(), rev)
	}
	// Someone else writes: a write from the old revision is refused, so a
	// change made to the read from before it is made again to theirs.
	before, err := st.GetDirect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, `{"kind":"Pod","metadata":{"name":"p","namespace":"default","labels":{"by":"other"}}}`); err != nil {
		t.Fatal(err)
	}
	var changed []string // the label each attempt saw
	if err := objects.ModifyFrom(ctx, st, before, func(p *objects.Pod) (bool, error) {
		changed = append(changed, p.Metadata.Labels["by"])
		p.Spec.Image = "web"
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 2 || changed[0] != "" || changed[1] != "other" {
		t.Errorf("ModifyFrom a read of revision %d changed objects labelled %q; want the stale write refused, then the other writer's object changed", before.ModRevision, changed)
	}
	if got, _ := cli.Get(ctx, key); !strings.Contains(string(got.Kvs[0].Value), `"by":"other"`) || !strings.Contains(string(got.Kvs[0].Value), `"image":"web"`) {
		t.Errorf("after a stale write and its retry: %s", got.Kvs[0].Value)
	}
	if err := st.Delete(ctx, key, rev); !errors.Is(err, objects.ErrConflict) {
		t.Errorf("stale Delete: %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	if _, err := st.Get(ctx, key); !errors.Is(err, objects.ErrNotFound) {
		t.Errorf("Get after delete: %v, want ErrNotFound", err)
	}
}

// Modify retries on conflict: concurrent increments all land. The kind
// has no schema, so a top-level field the Go type does not know is kept
// (a reference kind's schema would refuse it).
func TestModifyRetriesConflicts(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	key := objects.Key("widgets", "default", "rs")
	if _, err := cli.Put(ctx, key, `{"kind":"Widget","extra":{"kept":true},"metadata":{"name":"rs","namespace":"default"},"spec":{"replicas":0,"template":{"metadata":{},"spec":{}}}}`); err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			errs <- objects.Modify(ctx, st, key, func(rs *objects.ReplicaSet) (bool, error) {
				n := objects.Or(rs.Spec.Replicas, 0) + 1
				rs.Spec.Replicas = &n
				return true, nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Modify: %v", err)
		}
	}
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Extra map[string]bool        `json:"extra"`
		Spec  objects.ReplicaSetSpec `json:"spec"`
	}
	json.Unmarshal(resp.Kvs[0].Value, &got)
	if objects.Or(got.Spec.Replicas, 0) != writers || !got.Extra["kept"] {
		t.Errorf("after %d concurrent increments: %s", writers, resp.Kvs[0].Value)
	}
}

func TestUpdateStatus(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	key := objects.Key("jobs", "default", "j")
	if _, err := cli.Put(ctx, key, `{"kind":"Job","metadata":{"name":"j","namespace":"default","uid":"u1","generation":2},"spec":{"completions":3,"future":"field"}}`); err != nil {
		t.Fatal(err)
	}
	want := objects.JobStatus{Active: 1, ObservedGeneration: 2}
	if err := st.UpdateStatus(ctx, key, "u1", want); err != nil {
		t.Fatal(err)
	}
	resp, _ := cli.Get(ctx, key)
	rev := resp.Kvs[0].ModRevision
	var got map[string]any
	json.Unmarshal(resp.Kvs[0].Value, &got)
	if got["spec"].(map[string]any)["future"] != "field" || got["status"].(map[string]any)["active"] != 1.0 {
		t.Errorf("after UpdateStatus: %s", resp.Kvs[0].Value)
	}
	// Equal status: no write (a write would wake the controller again).
	if err := st.UpdateStatus(ctx, key, "u1", want); err != nil {
		t.Fatal(err)
	}
	// Another uid: the object was replaced, nothing is written.
	if err := st.UpdateStatus(ctx, key, "u0", objects.JobStatus{Active: 9}); err != nil {
		t.Fatal(err)
	}
	resp, _ = cli.Get(ctx, key)
	if resp.Kvs[0].ModRevision != rev {
		t.Errorf("UpdateStatus wrote although nothing changed: %s", resp.Kvs[0].Value)
	}
}

// TestUpdateStatusFrom: the caller's read is used when current, and a stale
// one costs a refused write and a fresh read, never a lost change.
func TestUpdateStatusFrom(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	key := objects.Key("jobs", "default", "j")
	if _, err := cli.Put(ctx, key, `{"kind":"Job","metadata":{"name":"j","namespace":"default","uid":"u1","generation":1},"spec":{"completions":3}}`); err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetDirect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatusFrom(ctx, raw, "u1", objects.JobStatus{Active: 1}); err != nil {
		t.Fatal(err)
	}
	// raw is now stale: someone else changed the spec meanwhile.
	if _, err := cli.Put(ctx, key, `{"kind":"Job","metadata":{"name":"j","namespace":"default","uid":"u1","generation":2},"spec":{"completions":5},"status":{"active":1}}`); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatusFrom(ctx, raw, "u1", objects.JobStatus{Active: 2, ObservedGeneration: 2}); err != nil {
		t.Fatal(err)
	}
	resp, _ := cli.Get(ctx, key)
	var got objects.Job
	if err := json.Unmarshal(resp.Kvs[0].Value, &got); err != nil {
		t.Fatal(err)
	}
	if objects.Or(got.Spec.Completions, 0) != 5 || got.Status.Active != 2 || got.Status.ObservedGeneration != 2 {
		t.Errorf("after a status update from a stale read: %s", resp.Kvs[0].Value)
	}
	// A read whose status already equals the wanted one writes nothing.
	fresh, _ := st.GetDirect(ctx, key)
	if err := st.UpdateStatusFrom(ctx, fresh, "u1", objects.JobStatus{Active: 2, ObservedGeneration: 2}); err != nil {
		t.Fatal(err)
	}
	if again, _ := cli.Get(ctx, key); again.Kvs[0].ModRevision != resp.Kvs[0].ModRevision {
		t.Errorf("UpdateStatusFrom wrote an equal status: %s", again.Kvs[0].Value)
	}
}

// TestCreateAllWithStatus: the children and the owner's status are one
// revision; a stale owner or a taken key writes nothing at all; a status
// already equal leaves the owner alone.
func TestCreateAllWithStatus(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	key := objects.Key("replicasets", "default", "rs")
	if _, err := cli.Put(ctx, key, `{"kind":"ReplicaSet","metadata":{"name":"rs","namespace":"default","uid":"u1","generation":1},"spec":{"replicas":2}}`); err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetDirect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	pods := func(names ...string) ([]string, []objects.Metaobject) {
		var keys []string
		var vs []objects.Metaobject
		for _, n := range names {
			keys = append(keys, objects.Key("pods", "default", n))
			vs = append(vs, &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: n, Namespace: "default"}})
		}
		return keys, vs
	}
	keys, vs := pods("a", "b")
	if err := st.CreateAllWithStatus(ctx, keys, vs, raw, "u1", objects.ReplicaSetStatus{Replicas: 2, ObservedGeneration: 1}); err != nil {
		t.Fatal(err)
	}
	owner, _ := cli.Get(ctx, key)
	var rs objects.ReplicaSet
	if err := json.Unmarshal(owner.Kvs[0].Value, &rs); err != nil {
		t.Fatal(err)
	}
	if rs.Status.Replicas != 2 || rs.Status.ObservedGeneration != 1 || objects.Or(rs.Spec.Replicas, 0) != 2 {
		t.Errorf("owner after the transaction: %s", owner.Kvs[0].Value)
	}
	for _, k := range keys {
		p, _ := cli.Get(ctx, k)
		if len(p.Kvs) != 1 || p.Kvs[0].ModRevision != owner.Kvs[0].ModRevision {
			t.Errorf("pod %s: %v, want it written in the owner's revision %d", k, p.Kvs, owner.Kvs[0].ModRevision)
		}
	}

	// raw is stale now: nothing is written, not even the free pods.
	head := owner.Header.Revision
	keys, vs = pods("c")
	if err := st.CreateAllWithStatus(ctx, keys, vs, raw, "u1", objects.ReplicaSetStatus{Replicas: 3}); !errors.Is(err, objects.ErrConflict) {
		t.Errorf("from a stale owner: %v, want ErrConflict", err)
	}
	// A taken name: nothing is written either, status included.
	fresh, _ := st.GetDirect(ctx, key)
	keys, vs = pods("d", "a")
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u1", objects.ReplicaSetStatus{Replicas: 4}); !errors.Is(err, objects.ErrConflict) {
		t.Errorf("with a taken name: %v, want ErrConflict", err)
	}
	if now, _ := cli.Get(ctx, key); now.Header.Revision != head {
		t.Errorf("refused transactions moved etcd from revision %d to %d", head, now.Header.Revision)
	}

	// An equal status: the pods alone, the owner untouched.
	keys, vs = pods("e")
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u1", objects.ReplicaSetStatus{Replicas: 2, ObservedGeneration: 1}); err != nil {
		t.Fatal(err)
	}
	if now, _ := cli.Get(ctx, key); now.Kvs[0].ModRevision != owner.Kvs[0].ModRevision {
		t.Errorf("an equal status was written: %s", now.Kvs[0].Value)
	}
	if e, _ := cli.Get(ctx, keys[0]); len(e.Kvs) != 1 {
		t.Error("the pod of an unchanged status was not created")
	}
	// Another object of the same name (uid): the pods alone too.
	keys, vs = pods("f")
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u2", objects.ReplicaSetStatus{Replicas: 9}); err != nil {
		t.Fatal(err)
	}
	if now, _ := cli.Get(ctx, key); now.Kvs[0].ModRevision != owner.Kvs[0].ModRevision {
		t.Errorf("the status of another uid was written: %s", now.Kvs[0].Value)
	}
	// Too many for one transaction, or no owner read: refused, nothing written.
	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	keys, vs = pods(many...)
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u1", objects.ReplicaSetStatus{Replicas: 100}); err == nil || errors.Is(err, objects.ErrConflict) {
		t.Errorf("100 objects: %v, want a usage error", err)
	}
	if err := st.CreateAllWithStatus(ctx, keys[:1], vs[:1], objects.Raw{Key: key}, "u1", objects.ReplicaSetStatus{Replicas: 1}); err == nil || errors.Is(err, objects.ErrConflict) {
		t.Errorf("no owner read: %v, want a usage error", err)
	}
}

func TestListDirectFiltersOwners(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	put := func(name, owner string) {
		v := `{"kind":"Pod","metadata":{"name":"` + name + `","namespace":"default","ownerReferences":[{"kind":"ReplicaSet","name":"` + owner + `","uid":"u-` + owner + `"}]}}`
		if _, err := cli.Put(ctx, objects.Key("pods", "default", name), v); err != nil {
			t.Fatal(err)
		}
	}
	put("a-1", "a")
	put("a-2", "a")
	put("b-1", "b")
	tests := []struct {
		owner objects.OwnedBy
		want  int
	}{
		{objects.OwnedBy{}, 3},
		{objects.OwnedBy{Namespace: "default", Kind: objects.KindReplicaSet, Name: "a"}, 2},
		{objects.OwnedBy{Namespace: "default", Kind: objects.KindReplicaSet, Name: "a", UID: "other"}, 0},
		{objects.OwnedBy{Namespace: "other", Kind: objects.KindReplicaSet, Name: "a"}, 0},
		{objects.OwnedBy{Namespace: "default", Kind: objects.KindJob, Name: "a"}, 0},
	}
	for _, tt := range tests {
		got, err := objects.List[objects.Pod](ctx, st, objects.Prefix("pods", "default"), tt.owner)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.want {
			t.Errorf("List(%+v) = %d items, want %d", tt.owner, len(got), tt.want)
		}
	}
}
