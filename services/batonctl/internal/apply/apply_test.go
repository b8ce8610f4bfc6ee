package apply

import (
	"encoding/json"
	"errors"
	"fmt"
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
		if err := Delete(ctx, cli, key, tc.uid); !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := cli.Put(ctx, key, `{}`); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, cli, key, ""); err != nil {
		t.Errorf("delete without a uid precondition: %v", err)
	}
}
