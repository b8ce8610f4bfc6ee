package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonrun/baton/services/etcdembed"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	if s == "" {
		return nil
	}
	m, err := Decode([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func TestMerge(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		name, stored, desired string
		wantOutcome           Outcome
		want                  string // JSON of the result; uid "*" means any
	}{
		{"create sets uid, generation, creation time; drops status", "",
			`{"kind":"Pod","metadata":{"name":"a"},"spec":{"image":"x"},"status":{"phase":"Running"}}`,
			Created, `{"kind":"Pod","metadata":{"creationTimestamp":"2026-11-29T20:00:00Z","generation":1,"name":"a","uid":"*"},"spec":{"image":"x"}}`},
		{"create keeps a given uid", "",
			`{"kind":"Pod","metadata":{"name":"a","uid":"u1","creationTimestamp":"t"},"spec":{}}`,
			Created, `{"kind":"Pod","metadata":{"creationTimestamp":"t","generation":1,"name":"a","uid":"u1"},"spec":{}}`},
		{"same spec is unchanged",
			`{"kind":"Pod","metadata":{"name":"a","uid":"u1","generation":3},"spec":{"image":"x"},"status":{"phase":"Running"}}`,
			`{"kind":"Pod","metadata":{"name":"a"},"spec":{"image":"x"}}`,
			Unchanged, `{"kind":"Pod","metadata":{"generation":3,"name":"a","uid":"u1"},"spec":{"image":"x"},"status":{"phase":"Running"}}`},
		{"spec change bumps generation and keeps status",
			`{"kind":"ReplicaSet","metadata":{"name":"a","uid":"u1","generation":3},"spec":{"replicas":1},"status":{"replicas":1}}`,
			`{"kind":"ReplicaSet","metadata":{"name":"a"},"spec":{"replicas":2},"status":{"replicas":99}}`,
			Configured, `{"kind":"ReplicaSet","metadata":{"generation":4,"name":"a","uid":"u1"},"spec":{"replicas":2},"status":{"replicas":1}}`},
		{"label change keeps generation",
			`{"kind":"Pod","metadata":{"name":"a","uid":"u1","generation":2,"labels":{"a":"1"}},"spec":{}}`,
			`{"kind":"Pod","metadata":{"name":"a","labels":{"a":"2"}},"spec":{}}`,
			Configured, `{"kind":"Pod","metadata":{"generation":2,"labels":{"a":"2"},"name":"a","uid":"u1"},"spec":{}}`},
		{"controller-set owner references survive",
			`{"kind":"Pod","metadata":{"name":"a","uid":"u1","generation":1,"ownerReferences":[{"kind":"ReplicaSet","name":"r","uid":"u2"}]},"spec":{"image":"x"}}`,
			`{"kind":"Pod","metadata":{"name":"a"},"spec":{"image":"y"}}`,
			Configured, `{"kind":"Pod","metadata":{"generation":2,"name":"a","ownerReferences":[{"kind":"ReplicaSet","name":"r","uid":"u2"}],"uid":"u1"},"spec":{"image":"y"}}`},
		{"stored without generation gets 1",
			`{"kind":"Pod","metadata":{"name":"a","uid":"u1"},"spec":{}}`,
			`{"kind":"Pod","metadata":{"name":"a"},"spec":{}}`,
			Configured, `{"kind":"Pod","metadata":{"generation":1,"name":"a","uid":"u1"},"spec":{}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, outcome, err := Merge(obj(t, tc.stored), obj(t, tc.desired), now)
			if err != nil {
				t.Fatal(err)
			}
			if outcome != tc.wantOutcome {
				t.Errorf("outcome = %s, want %s", outcome, tc.wantOutcome)
			}
			meta := got["metadata"].(map[string]any)
			if uid, _ := meta["uid"].(string); len(uid) == 36 && tc.stored == "" {
				meta["uid"] = "*" // random
			}
			b, _ := json.Marshal(got)
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

func TestMergeUIDMismatch(t *testing.T) {
	_, _, err := Merge(obj(t, `{"kind":"Pod","metadata":{"name":"a","uid":"u1"},"spec":{}}`),
		obj(t, `{"kind":"Pod","metadata":{"name":"a","uid":"u2"},"spec":{}}`), time.Now())
	if err == nil {
		t.Fatal("Merge accepted a different uid")
	}
}

// A manifest neither sets nor clears metadata.deletionTimestamp, and adds
// no finalizer to an object being deleted; removing one is its to do.
func TestMergeKeepsTheDeleteProtocol(t *testing.T) {
	now := time.Now()
	created, _, err := Merge(nil, obj(t, `{"kind":"Pod","metadata":{"name":"a","deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{}}`), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := created["metadata"].(map[string]any)["deletionTimestamp"]; ok {
		t.Errorf("a created object took the manifest's deletionTimestamp: %v", created["metadata"])
	}
	deleting := obj(t, `{"kind":"Pod","metadata":{"name":"a","uid":"u1","generation":1,"deletionTimestamp":"2026-01-01T00:00:00Z","finalizers":["a/keep","b/keep"]},"spec":{}}`)
	out, _, err := Merge(deleting, obj(t, `{"kind":"Pod","metadata":{"name":"a","deletionTimestamp":null,"finalizers":["a/keep"]},"spec":{}}`), now)
	if err != nil {
		t.Fatal(err)
	}
	m := out["metadata"].(map[string]any)
	if m["deletionTimestamp"] != "2026-01-01T00:00:00Z" {
		t.Errorf("the manifest cleared or changed deletionTimestamp: %v", m)
	}
	if f, _ := m["finalizers"].([]any); len(f) != 1 || f[0] != "a/keep" {
		t.Errorf("finalizers after removing one: %v", m["finalizers"])
	}
	if _, _, err := Merge(deleting, obj(t, `{"kind":"Pod","metadata":{"name":"a","finalizers":["a/keep","b/keep","c/new"]},"spec":{}}`), now); !errors.Is(err, ErrFinalizerOnDeleting) {
		t.Errorf("adding a finalizer to an object being deleted: %v, want ErrFinalizerOnDeleting", err)
	}
	alive := obj(t, `{"kind":"Pod","metadata":{"name":"a","uid":"u1","generation":1},"spec":{}}`)
	out, _, err = Merge(alive, obj(t, `{"kind":"Pod","metadata":{"name":"a","deletionTimestamp":"2026-01-01T00:00:00Z","finalizers":["c/new"]},"spec":{}}`), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out["metadata"].(map[string]any)["deletionTimestamp"]; ok {
		t.Errorf("a manifest marked a live object for deletion: %v", out["metadata"])
	}
}

func TestNewUID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		u := newUID()
		if len(u) != 36 || u[14] != '4' || seen[u] {
			t.Fatalf("bad or repeated uid %q", u)
		}
		seen[u] = true
	}
}

// TestApplyRacesStatusWriter applies spec changes while a "controller"
// rewrites status with its own compare-and-swap: no write may be lost, so at
// the end the spec is the last applied one, the generation counts every
// spec change, and status is the controller's last write.
func TestApplyRacesStatusWriter(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	const key = "/registry/replicasets/default/web"
	desired := func(n int) map[string]any {
		return obj(t, fmt.Sprintf(`{"kind":"ReplicaSet","metadata":{"name":"web","namespace":"default"},"spec":{"replicas":%d}}`, n))
	}
	if out, err := Apply(ctx, cli, key, desired(0), time.Now()); err != nil || out != Created {
		t.Fatalf("create: %v %v", out, err)
	}

	const rounds = 30
	var wg sync.WaitGroup
	statusWrites := 0
	wg.Go(func() {
		for statusWrites < rounds {
			resp, err := cli.Get(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			o, _ := Decode(resp.Kvs[0].Value)
			o["status"] = map[string]any{"replicas": statusWrites + 1}
			b, _ := json.Marshal(o)
			txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, string(b))).Commit()
			if err != nil {
				t.Error(err)
				return
			}
			if txn.Succeeded {
				statusWrites++
			}
		}
	})
	for i := 1; i <= rounds; i++ {
		if out, err := Apply(ctx, cli, key, desired(i), time.Now()); err != nil || out != Configured {
			t.Fatalf("apply %d: %v %v", i, out, err)
		}
	}
	wg.Wait()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	final, _ := Decode(resp.Kvs[0].Value)
	b, _ := json.Marshal(map[string]any{"spec": final["spec"], "status": final["status"], "generation": final["metadata"].(map[string]any)["generation"]})
	want := fmt.Sprintf(`{"generation":%d,"spec":{"replicas":%d},"status":{"replicas":%d}}`, rounds+1, rounds, rounds)
	if string(b) != want {
		t.Errorf("final %s, want %s", b, want)
	}
}

func TestDelete(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	const key = "/registry/pods/default/p"
	if _, err := cli.Put(ctx, key, `{"kind":"Pod","metadata":{"name":"p","uid":"u1"},"spec":{}}`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, uid string
		want      error
	}{
		{"another uid is refused", "u2", ErrUIDMismatch},
		{"the same uid deletes", "u1", nil},
		{"gone", "", ErrNotFound},
	}
	for _, tc := range tests {
		if _, err := Delete(ctx, cli, key, tc.uid, Background); !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := cli.Put(ctx, key, `{}`); err != nil {
		t.Fatal(err)
	}
	if _, err := Delete(ctx, cli, key, "", Background); err != nil {
		t.Errorf("delete without a uid precondition: %v", err)
	}
}

// TestDeleteCascade: foreground and orphan mark the object with
// deletionTimestamp and their finalizer and keep everything else as
// stored; an object that holds a finalizer is marked even in the
// background; one already being deleted is left as it is; and a cascade
// of another name writes nothing.
func TestDeleteCascade(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	const key = "/registry/deployments/default/web"
	stored := func() map[string]any {
		t.Helper()
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		return obj(t, string(resp.Kvs[0].Value))
	}
	const web = `{"kind":"Deployment","metadata":{"name":"web","uid":"u1","labels":{"app":"x"}},"spec":{"replicas":3},"status":{"replicas":3}}`
	tests := []struct {
		name, value string
		cascade     Cascade
		want        Deletion
		finalizers  []any // nil: removed
	}{
		{"background", web, Background, Removed, nil},
		{"foreground", web, Foreground, Marked, []any{"foregroundDeletion"}},
		{"orphan", web, Orphan, Marked, []any{"orphan"}},
		{"a finalizer holds it", `{"kind":"Deployment","metadata":{"name":"web","finalizers":["example.com/x"]}}`, Background, Marked, []any{"example.com/x"}},
		{"a finalizer and foreground", `{"kind":"Deployment","metadata":{"name":"web","finalizers":["example.com/x"]}}`, Foreground, Marked, []any{"example.com/x", "foregroundDeletion"}},
		{"already being deleted", `{"kind":"Deployment","metadata":{"name":"web","deletionTimestamp":"2026-01-01T00:00:00Z","finalizers":["example.com/x"]}}`, Orphan, AlreadyDeleting, []any{"example.com/x"}},
		{"being deleted, no finalizer left", `{"kind":"Deployment","metadata":{"name":"web","deletionTimestamp":"2026-01-01T00:00:00Z"}}`, Foreground, Removed, nil},
	}
	for _, tc := range tests {
		if _, err := cli.Put(ctx, key, tc.value); err != nil {
			t.Fatal(err)
		}
		got, err := Delete(ctx, cli, key, "", tc.cascade)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v, want %q", tc.name, got, err, tc.want)
			continue
		}
		after := stored()
		if tc.finalizers == nil {
			if after != nil {
				t.Errorf("%s: still stored: %v", tc.name, after)
			}
			continue
		}
		meta, _ := after["metadata"].(map[string]any)
		if fmt.Sprint(meta["finalizers"]) != fmt.Sprint(tc.finalizers) {
			t.Errorf("%s: finalizers %v, want %v", tc.name, meta["finalizers"], tc.finalizers)
		}
		if ts, _ := meta["deletionTimestamp"].(string); ts == "" {
			t.Errorf("%s: no deletionTimestamp", tc.name)
		} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("%s: deletionTimestamp %q: %v", tc.name, ts, err)
		}
		if tc.value == web {
			before := obj(t, web)
			delete(meta, "deletionTimestamp")
			delete(meta, "finalizers")
			if b, a := fmt.Sprint(before), fmt.Sprint(after); a != b {
				t.Errorf("%s: stored %s, want all else kept: %s", tc.name, a, b)
			}
		}
		if tc.want == AlreadyDeleting && meta["deletionTimestamp"] != "2026-01-01T00:00:00Z" {
			t.Errorf("%s: deletionTimestamp changed to %v", tc.name, meta["deletionTimestamp"])
		}
		cli.Delete(ctx, key)
	}
	if _, err := cli.Put(ctx, key, web); err != nil {
		t.Fatal(err)
	}
	if _, err := Delete(ctx, cli, key, "", "cascading"); err == nil || !strings.Contains(err.Error(), "background, foreground or orphan") {
		t.Errorf("an unknown cascade: %v", err)
	}
	if s := stored(); s == nil || s["metadata"].(map[string]any)["deletionTimestamp"] != nil {
		t.Errorf("an unknown cascade changed the object: %v", s)
	}
}

// TestUpdate: an update (what scale does) bumps the generation with the
// spec, keeps the status a controller writes meanwhile, returns change's
// error with nothing written, and ErrNotFound for no object.
func TestUpdate(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	const key = "/registry/deployments/default/web"
	if _, err := Update(ctx, cli, key, time.Now(), func(map[string]any) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of nothing: %v, want ErrNotFound", err)
	}
	if _, err := Apply(ctx, cli, key, obj(t, `{"kind":"Deployment","metadata":{"name":"web","namespace":"default"},"spec":{"replicas":1}}`), time.Now()); err != nil {
		t.Fatal(err)
	}
	setReplicas := func(n int) func(map[string]any) error {
		return func(o map[string]any) error {
			o["spec"].(map[string]any)["replicas"] = json.Number(fmt.Sprint(n))
			return nil
		}
	}
	const rounds = 20
	var wg sync.WaitGroup
	statusWrites := 0
	wg.Go(func() {
		for statusWrites < rounds {
			resp, err := cli.Get(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			o, _ := Decode(resp.Kvs[0].Value)
			o["status"] = map[string]any{"replicas": statusWrites + 1}
			b, _ := json.Marshal(o)
			txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, string(b))).Commit()
			if err != nil {
				t.Error(err)
				return
			}
			if txn.Succeeded {
				statusWrites++
			}
		}
	})
	for i := 2; i <= rounds+1; i++ {
		if out, err := Update(ctx, cli, key, time.Now(), setReplicas(i)); err != nil || out != Configured {
			t.Fatalf("update %d: %v %v", i, out, err)
		}
	}
	wg.Wait()
	if out, err := Update(ctx, cli, key, time.Now(), setReplicas(rounds+1)); err != nil || out != Unchanged {
		t.Errorf("update to the same replicas: %v %v, want unchanged", out, err)
	}
	refused := errors.New("not this one")
	before, _ := cli.Get(ctx, key)
	if _, err := Update(ctx, cli, key, time.Now(), func(o map[string]any) error {
		o["spec"] = map[string]any{"replicas": 0}
		return refused
	}); err != refused {
		t.Errorf("change's error came back as %v", err)
	}
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Error("an update whose change failed wrote")
	}
	final, _ := Decode(resp.Kvs[0].Value)
	b, _ := json.Marshal(map[string]any{"spec": final["spec"], "status": final["status"], "generation": final["metadata"].(map[string]any)["generation"]})
	want := fmt.Sprintf(`{"generation":%d,"spec":{"replicas":%d},"status":{"replicas":%d}}`, rounds+1, rounds+1, rounds)
	if string(b) != want {
		t.Errorf("final %s, want %s", b, want)
	}
}
