package objects_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/sdk/objects"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// foos declares the kind Foo with a schema, as a worker would.
func foos(t *testing.T, cli *clientv3.Client) kinds.Kind {
	t.Helper()
	zero := 0.0
	d := kinds.Declaration{Queue: "foos", For: kinds.Kind{Kind: "Foo", Resource: "foos"},
		Schema: &schema.Kind{
			Spec: &schema.Schema{Type: schema.TypeObject, Required: []string{"replicas"}, Properties: map[string]*schema.Schema{
				"replicas": {Type: schema.TypeInteger, Minimum: &zero},
				"mode":     {Type: schema.TypeString, Enum: []any{"fast", "slow"}, Default: "slow"},
			}},
			Status: &schema.Schema{Type: schema.TypeObject, Properties: map[string]*schema.Schema{
				"ready":              {Type: schema.TypeInteger},
				"observedGeneration": {Type: schema.TypeInteger},
			}},
		}}
	data, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), d.Key(), string(data)); err != nil {
		t.Fatal(err)
	}
	return d.For
}

// Foo is a declared kind's object, its spec and status open maps, so that
// a test can write what a Go type would not let it.
type Foo = objects.Object[map[string]any, map[string]any]

func storedAt(t *testing.T, cli *clientv3.Client, key string) (map[string]any, int64) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		t.Fatal(err)
	}
	return m, resp.Kvs[0].ModRevision
}

func generation(m map[string]any) float64 {
	g, _ := m["metadata"].(map[string]any)["generation"].(float64)
	return g
}

// TestSchemaRefusesInvalidWrites: a declared Foo with a misspelt field or
// a string for an integer is refused by Create with the schema's message,
// and nothing is written; a valid one is stored with its defaults; an
// update or a status write that breaks the schema is refused too.
func TestSchemaRefusesInvalidWrites(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	kind := foos(t, cli)
	key := kind.Key("default", "x")
	for _, tc := range []struct {
		spec map[string]any
		want string
	}{
		{map[string]any{"replicas": 1, "bogusField": 1}, `create /registry/foos/default/x: Foo "x" is invalid: spec.bogusField: Unknown field: not in the schema of Foo (known: mode, replicas)`},
		{map[string]any{"replicas": "three"}, `create /registry/foos/default/x: Foo "x" is invalid: spec.replicas: Invalid value: "three": must be of type integer`},
		{map[string]any{"replicas": -1, "mode": "medium"}, `create /registry/foos/default/x: Foo "x" is invalid: [spec.mode: Unsupported value: "medium": supported values: "fast", "slow", spec.replicas: Invalid value: -1: must be greater than or equal to 0]`},
	} {
		_, err := st.Create(ctx, key, &Foo{Kind: "Foo", Metadata: objects.ObjectMeta{Name: "x", Namespace: "default"}, Spec: tc.spec})
		var errs *schema.Errors
		if !errors.Is(err, objects.ErrInvalid) || !errors.As(err, &errs) || err.Error() != tc.want {
			t.Errorf("Create(%v) = %v\nwant %s", tc.spec, err, tc.want)
		}
		if m, _ := storedAt(t, cli, key); m != nil {
			t.Fatalf("a refused Create wrote %v", m)
		}
	}

	// A valid one: kind and defaults filled in, generation 1 whatever the
	// object said.
	if _, err := st.Create(ctx, key, &Foo{Metadata: objects.ObjectMeta{Name: "x", Namespace: "default", Generation: 7}, Spec: map[string]any{"replicas": 1}}); err != nil {
		t.Fatal(err)
	}
	m, rev := storedAt(t, cli, key)
	if m["kind"] != "Foo" || m["spec"].(map[string]any)["mode"] != "slow" || generation(m) != 1 {
		t.Errorf("created: %v", m)
	}

	// An update to an invalid spec, and an invalid status, write nothing.
	err := objects.Modify(ctx, st, key, func(f *Foo) (bool, error) {
		f.Spec["replicas"] = "three"
		return true, nil
	})
	if !errors.Is(err, objects.ErrInvalid) || !strings.Contains(err.Error(), `spec.replicas: Invalid value: "three": must be of type integer`) {
		t.Errorf("Modify to an invalid spec = %v", err)
	}
	if err := st.UpdateStatus(ctx, key, "", map[string]any{"ready": "all"}); !errors.Is(err, objects.ErrInvalid) ||
		!strings.Contains(err.Error(), `update status of /registry/foos/default/x: Foo "x" is invalid: status.ready: Invalid value: "all": must be of type integer`) {
		t.Errorf("UpdateStatus of an invalid status = %v", err)
	}
	if _, now := storedAt(t, cli, key); now != rev {
		t.Error("a refused update wrote")
	}

	// A reference kind is checked the same, in CreateAll too: nothing of
	// the transaction is written.
	bad := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "b", Namespace: "default"}, Spec: objects.PodSpec{DurationSeconds: -1}}
	good := &objects.Pod{Kind: objects.KindPod, Metadata: objects.ObjectMeta{Name: "g", Namespace: "default"}}
	err = st.CreateAll(ctx, []string{objects.Key("pods", "default", "g"), objects.Key("pods", "default", "b")}, []objects.Metaobject{good, bad})
	if !errors.Is(err, objects.ErrInvalid) || !strings.Contains(err.Error(), `Pod "b" is invalid: spec.durationSeconds: Invalid value: -1: must be greater than or equal to 0`) {
		t.Errorf("CreateAll with an invalid pod = %v", err)
	}
	if m, _ := storedAt(t, cli, objects.Key("pods", "default", "g")); m != nil {
		t.Error("CreateAll wrote part of a refused transaction")
	}
}

// TestGeneration: the Client raises metadata.generation when spec changes,
// and only then: not on a status write, not on a label change, and a
// hand-raised generation is replaced by the stored one plus one.
func TestGeneration(t *testing.T) {
	st, cli := newClient(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		key  string
		obj  func() objects.Metaobject
	}{
		{"a declared kind with a schema", objects.Key("foos", "default", "x"), func() objects.Metaobject {
			return &Foo{Kind: "Foo", Metadata: objects.ObjectMeta{Name: "x", Namespace: "default"}, Spec: map[string]any{"replicas": 1}}
		}},
		{"a kind without a schema", objects.Key("widgets", "default", "w"), func() objects.Metaobject {
			return &Foo{Kind: "Widget", Metadata: objects.ObjectMeta{Name: "w", Namespace: "default"}, Spec: map[string]any{"replicas": 1, "anything": true}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foos(t, cli)
			if _, err := st.Create(ctx, tc.key, tc.obj()); err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				what   string
				change func(*Foo)
				want   float64
			}{
				{"spec changed", func(f *Foo) { f.Spec["replicas"] = 2 }, 2},
				{"labels changed", func(f *Foo) { f.Metadata.Labels = map[string]string{"a": "b"} }, 2},
				{"spec changed, generation raised by hand", func(f *Foo) { f.Spec["replicas"] = 3; f.Metadata.Generation += 5 }, 3},
				{"generation lowered by hand alone", func(f *Foo) { f.Metadata.Generation = 1 }, 3},
			}
			for _, s := range steps {
				if err := objects.Modify(ctx, st, tc.key, func(f *Foo) (bool, error) { s.change(f); return true, nil }); err != nil {
					t.Fatalf("%s: %v", s.what, err)
				}
				if m, _ := storedAt(t, cli, tc.key); generation(m) != s.want {
					t.Errorf("%s: generation %v, want %v", s.what, generation(m), s.want)
				}
			}
			if err := st.UpdateStatus(ctx, tc.key, "", map[string]any{"ready": 1, "observedGeneration": 3}); err != nil {
				t.Fatal(err)
			}
			if err := objects.Modify(ctx, st, tc.key, func(f *Foo) (bool, error) { f.Status["ready"] = 2; return true, nil }); err != nil {
				t.Fatal(err)
			}
			if m, _ := storedAt(t, cli, tc.key); generation(m) != 3 || m["status"].(map[string]any)["ready"] != 2.0 {
				t.Errorf("after status writes: %v, want generation 3 and ready 2", m)
			}
		})
	}
}
