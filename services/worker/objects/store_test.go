package objects

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func newStore(t *testing.T) (*Store, *clientv3.Client) {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return NewStore(cli, nil), cli
}

func TestCreateUpdateDeleteAreCompareAndSwap(t *testing.T) {
	st, cli := newStore(t)
	ctx := t.Context()
	key := Key("pods", "default", "p")
	pod := &Pod{Kind: KindPod, Metadata: ObjectMeta{Name: "p", Namespace: "default"}}
	rev, err := st.Create(ctx, key, pod)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Metadata.UID == "" || pod.Metadata.CreationTimestamp == "" {
		t.Errorf("Create did not set uid/creationTimestamp: %+v", pod.Metadata)
	}
	if _, err := st.Create(ctx, key, pod); !errors.Is(err, ErrConflict) {
		t.Errorf("second Create: %v, want ErrConflict", err)
	}
	if st.MinRevision() != rev {
		t.Errorf("MinRevision = %d, want the write's %d", st.MinRevision(), rev)
	}
	// Someone else writes: a write from the old revision is refused.
	if _, err := cli.Put(ctx, key, `{"kind":"Pod","metadata":{"name":"p","namespace":"default"}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.put(ctx, key, rev, []byte(`{}`)); !errors.Is(err, ErrConflict) {
		t.Errorf("stale write: %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, key, rev); !errors.Is(err, ErrConflict) {
		t.Errorf("stale Delete: %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if err := st.Delete(ctx, key, 0); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	if _, err := st.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after delete: %v, want ErrNotFound", err)
	}
}

// Modify retries on conflict: concurrent increments all land.
func TestModifyRetriesConflicts(t *testing.T) {
	st, cli := newStore(t)
	ctx := t.Context()
	key := Key("replicasets", "default", "rs")
	if _, err := cli.Put(ctx, key, `{"kind":"ReplicaSet","extra":{"kept":true},"metadata":{"name":"rs","namespace":"default"},"spec":{"replicas":0,"template":{"metadata":{},"spec":{}}}}`); err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			errs <- Modify(ctx, st, key, func(rs *ReplicaSet) (bool, error) {
				n := Or(rs.Spec.Replicas, 0) + 1
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
		Extra map[string]bool `json:"extra"`
		Spec  ReplicaSetSpec  `json:"spec"`
	}
	json.Unmarshal(resp.Kvs[0].Value, &got)
	if Or(got.Spec.Replicas, 0) != writers || !got.Extra["kept"] {
		t.Errorf("after %d concurrent increments: %s", writers, resp.Kvs[0].Value)
	}
}

func TestUpdateStatus(t *testing.T) {
	st, cli := newStore(t)
	ctx := t.Context()
	key := Key("jobs", "default", "j")
	if _, err := cli.Put(ctx, key, `{"kind":"Job","metadata":{"name":"j","namespace":"default","uid":"u1","generation":2},"spec":{"completions":3,"future":"field"}}`); err != nil {
		t.Fatal(err)
	}
	want := JobStatus{Active: 1, ObservedGeneration: 2}
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
	if err := st.UpdateStatus(ctx, key, "u0", JobStatus{Active: 9}); err != nil {
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
	st, cli := newStore(t)
	ctx := t.Context()
	key := Key("jobs", "default", "j")
	if _, err := cli.Put(ctx, key, `{"kind":"Job","metadata":{"name":"j","namespace":"default","uid":"u1","generation":1},"spec":{"completions":3}}`); err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetDirect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatusFrom(ctx, raw, "u1", JobStatus{Active: 1}); err != nil {
		t.Fatal(err)
	}
	// raw is now stale: someone else changed the spec meanwhile.
	if _, err := cli.Put(ctx, key, `{"kind":"Job","metadata":{"name":"j","namespace":"default","uid":"u1","generation":2},"spec":{"completions":5},"status":{"active":1}}`); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatusFrom(ctx, raw, "u1", JobStatus{Active: 2, ObservedGeneration: 2}); err != nil {
		t.Fatal(err)
	}
	resp, _ := cli.Get(ctx, key)
	var got Job
	if err := json.Unmarshal(resp.Kvs[0].Value, &got); err != nil {
		t.Fatal(err)
	}
	if Or(got.Spec.Completions, 0) != 5 || got.Status.Active != 2 || got.Status.ObservedGeneration != 2 {
		t.Errorf("after a status update from a stale read: %s", resp.Kvs[0].Value)
	}
	// A read whose status already equals the wanted one writes nothing.
	fresh, _ := st.GetDirect(ctx, key)
	if err := st.UpdateStatusFrom(ctx, fresh, "u1", JobStatus{Active: 2, ObservedGeneration: 2}); err != nil {
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
	st, cli := newStore(t)
	ctx := t.Context()
	key := Key("replicasets", "default", "rs")
	if _, err := cli.Put(ctx, key, `{"kind":"ReplicaSet","metadata":{"name":"rs","namespace":"default","uid":"u1","generation":1},"spec":{"replicas":2}}`); err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetDirect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	pods := func(names ...string) ([]string, []Metaobject) {
		var keys []string
		var vs []Metaobject
		for _, n := range names {
			keys = append(keys, Key("pods", "default", n))
			vs = append(vs, &Pod{Kind: KindPod, Metadata: ObjectMeta{Name: n, Namespace: "default"}})
		}
		return keys, vs
	}
	keys, vs := pods("a", "b")
	if err := st.CreateAllWithStatus(ctx, keys, vs, raw, "u1", ReplicaSetStatus{Replicas: 2, ObservedGeneration: 1}); err != nil {
		t.Fatal(err)
	}
	owner, _ := cli.Get(ctx, key)
	var rs ReplicaSet
	if err := json.Unmarshal(owner.Kvs[0].Value, &rs); err != nil {
		t.Fatal(err)
	}
	if rs.Status.Replicas != 2 || rs.Status.ObservedGeneration != 1 || Or(rs.Spec.Replicas, 0) != 2 {
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
	if err := st.CreateAllWithStatus(ctx, keys, vs, raw, "u1", ReplicaSetStatus{Replicas: 3}); !errors.Is(err, ErrConflict) {
		t.Errorf("from a stale owner: %v, want ErrConflict", err)
	}
	// A taken name: nothing is written either, status included.
	fresh, _ := st.GetDirect(ctx, key)
	keys, vs = pods("d", "a")
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u1", ReplicaSetStatus{Replicas: 4}); !errors.Is(err, ErrConflict) {
		t.Errorf("with a taken name: %v, want ErrConflict", err)
	}
	if now, _ := cli.Get(ctx, key); now.Header.Revision != head {
		t.Errorf("refused transactions moved etcd from revision %d to %d", head, now.Header.Revision)
	}

	// An equal status: the pods alone, the owner untouched.
	keys, vs = pods("e")
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u1", ReplicaSetStatus{Replicas: 2, ObservedGeneration: 1}); err != nil {
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
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u2", ReplicaSetStatus{Replicas: 9}); err != nil {
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
	if err := st.CreateAllWithStatus(ctx, keys, vs, fresh, "u1", ReplicaSetStatus{Replicas: 100}); err == nil || errors.Is(err, ErrConflict) {
		t.Errorf("100 objects: %v, want a usage error", err)
	}
	if err := st.CreateAllWithStatus(ctx, keys[:1], vs[:1], Raw{Key: key}, "u1", ReplicaSetStatus{Replicas: 1}); err == nil || errors.Is(err, ErrConflict) {
		t.Errorf("no owner read: %v, want a usage error", err)
	}
}

func TestListDirectFiltersOwners(t *testing.T) {
	st, cli := newStore(t)
	ctx := t.Context()
	put := func(name, owner string) {
		v := `{"kind":"Pod","metadata":{"name":"` + name + `","namespace":"default","ownerReferences":[{"kind":"ReplicaSet","name":"` + owner + `","uid":"u-` + owner + `"}]}}`
		if _, err := cli.Put(ctx, Key("pods", "default", name), v); err != nil {
			t.Fatal(err)
		}
	}
	put("a-1", "a")
	put("a-2", "a")
	put("b-1", "b")
	tests := []struct {
		owner OwnedBy
		want  int
	}{
		{OwnedBy{}, 3},
		{OwnedBy{Namespace: "default", Kind: KindReplicaSet, Name: "a"}, 2},
		{OwnedBy{Namespace: "default", Kind: KindReplicaSet, Name: "a", UID: "other"}, 0},
		{OwnedBy{Namespace: "other", Kind: KindReplicaSet, Name: "a"}, 0},
		{OwnedBy{Namespace: "default", Kind: KindJob, Name: "a"}, 0},
	}
	for _, tt := range tests {
		got, err := List[Pod](ctx, st, Prefix("pods", "default"), tt.owner)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.want {
			t.Errorf("List(%+v) = %d items, want %d", tt.owner, len(got), tt.want)
		}
	}
}

func TestIntOrPercent(t *testing.T) {
	tests := []struct {
		json    string
		total   int
		roundUp bool
		want    int
	}{
		{`1`, 10, true, 1},
		{`"2"`, 10, true, 2},
		{`"25%"`, 10, true, 3},
		{`"25%"`, 10, false, 2},
		{`"100%"`, 3, false, 3},
	}
	for _, tt := range tests {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(tt.json), &v); err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		if got := v.Resolve(tt.total, -1, tt.roundUp); got != tt.want {
			t.Errorf("%s of %d (roundUp %v) = %d, want %d", tt.json, tt.total, tt.roundUp, got, tt.want)
		}
	}
	var nilV *IntOrPercent
	if got := nilV.Resolve(10, 7, true); got != 7 {
		t.Errorf("unset = %d, want the default 7", got)
	}
}

func TestSplitKey(t *testing.T) {
	for _, k := range []string{"", "a", "/a", "a/", "a/b/c"} {
		if _, _, err := SplitKey(k); err == nil {
			t.Errorf("SplitKey(%q) accepted", k)
		}
	}
	if ns, n, err := SplitKey("default/web"); err != nil || ns != "default" || n != "web" {
		t.Errorf("SplitKey(default/web) = %q, %q, %v", ns, n, err)
	}
}

// decodeKnown tells an object T fully describes from one with fields T
// would drop, at any level; only the first may be written from T alone.
func TestDecodeKnown(t *testing.T) {
	for _, tc := range []struct {
		name, stored   string
		known, wantErr bool
	}{
		{"every field known", `{"kind":"Pod","metadata":{"name":"p","namespace":"d","labels":{"a":"b"}},"spec":{"image":"x"},"status":{"phase":"Running"}}`, true, false},
		{"unknown top-level field", `{"kind":"Pod","extra":1,"metadata":{"name":"p","namespace":"d"}}`, false, false},
		{"unknown nested field", `{"kind":"Pod","metadata":{"name":"p","namespace":"d","finalizers":["f"]}}`, false, false},
		{"trailing value", `{"kind":"Pod"} {"kind":"Pod"}`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, known, err := decodeKnown[Pod]([]byte(tc.stored))
			if tc.wantErr {
				if err == nil {
					t.Errorf("decodeKnown(%s) = %+v, nil error; want the decode error", tc.stored, v)
				}
				return
			}
			if err != nil || known != tc.known {
				t.Fatalf("decodeKnown(%s): known %t, err %v; want known %t", tc.stored, known, err, tc.known)
			}
			if v.Metadata.Name != "p" {
				t.Errorf("decodeKnown(%s) decoded %+v", tc.stored, v)
			}
			if !known {
				return
			}
			b, _ := json.Marshal(v)
			if !jsonEqual(b, []byte(tc.stored)) {
				t.Errorf("encoding the decoded object lost something: %s, stored %s", b, tc.stored)
			}
		})
	}
}

// BenchmarkModifyEncode compares the two ways Modify turns a changed pod
// into the bytes it writes: from the T alone when T knows every stored
// field, and merged over the stored top-level fields otherwise.
func BenchmarkModifyEncode(b *testing.B) {
	stored := []byte(`{"kind":"Pod","metadata":{"name":"rs-abcde","namespace":"default","uid":"0b9f6c8e-4d0a-4f4e-9a53-5f0e0c1d2e3f","labels":{"app":"web"},"ownerReferences":[{"kind":"ReplicaSet","name":"rs","uid":"1c2d3e4f-0000-4000-8000-000000000001"}],"creationTimestamp":"2026-12-05T07:00:00Z"},"spec":{"image":"nginx"},"status":{}}`)
	change := func(p *Pod) { p.Status.Phase = PodRunning }
	b.Run("known", func(b *testing.B) {
		for b.Loop() {
			v, known, err := decodeKnown[Pod](stored)
			if err != nil || !known {
				b.Fatal(known, err)
			}
			change(&v)
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		for b.Loop() {
			var v Pod
			if err := json.Unmarshal(stored, &v); err != nil {
				b.Fatal(err)
			}
			change(&v)
			if _, err := mergeTop(stored, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
