package manifest

import (
	"context"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
)

// withGreetings knows the reference kinds and a declared Greeting.
func withGreetings() Kinds {
	tbl := resource.NewTable(func(context.Context) ([]kinds.Declaration, error) {
		return []kinds.Declaration{{Queue: "greetings", For: kinds.Kind{Kind: "Greeting", Resource: "greetings"}}}, nil
	})
	return func(kind string) (resource.Type, error) { return tbl.ByKind(context.Background(), kind) }
}

// A declared kind takes any spec mapping (its controller checks the
// fields); its metadata is checked as every kind's.
func TestDeclaredKind(t *testing.T) {
	in := "kind: Greeting\nmetadata: {name: hi, labels: {a: b}}\nspec: {name: world, anything: [1, {x: y}]}\n"
	objs, err := Decode("g.yaml", strings.NewReader(in), "", withGreetings())
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key() != "/registry/greetings/default/hi" || objs[0].Ref() != "greeting/hi" {
		t.Fatalf("decoded %+v", objs)
	}
	for _, tc := range []struct{ in, want string }{
		{"kind: Greeting\nmetadata: {name: hi}\nspec: [1]\n", "g.yaml:3:7: spec: must be a mapping"},
		{"kind: Greeting\nmetadata: {name: hi}\n", "spec: missing required field"},
		{"kind: Greeting\nmetadata: {nmae: hi}\nspec: {}\n", "metadata.nmae: unknown field"},
		{"kind: Salutation\nmetadata: {name: hi}\nspec: {}\n", `unknown kind "Salutation" (known: Deployment, Greeting, Job, Pod, ReplicaSet, StatefulSet)`},
	} {
		_, err := Decode("g.yaml", strings.NewReader(tc.in), "", withGreetings())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// Without discovery, Greeting is unknown.
	if _, err := Decode("g.yaml", strings.NewReader(in), "", nil); err == nil || !strings.Contains(err.Error(), `unknown kind "Greeting"`) {
		t.Errorf("Decode with the reference kinds only = %v", err)
	}
	// The reference kinds keep their strict schemas.
	if _, err := Decode("p.yaml", strings.NewReader("kind: Pod\nmetadata: {name: p}\nspec: {imgae: x}\n"), "", withGreetings()); err == nil || !strings.Contains(err.Error(), "spec.imgae: unknown field") {
		t.Errorf("a Pod with a misspelt field = %v", err)
	}
}
