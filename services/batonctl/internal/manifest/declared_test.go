package manifest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
)

// withGreetings knows the reference kinds, a declared Greeting (no
// schema) and a declared Foo with a schema.
func withGreetings() Kinds {
	zero, three := 0.0, 3.0
	foo := kinds.Declaration{Queue: "foos", For: kinds.Kind{Kind: "Foo", Resource: "foos"},
		Schema: &schema.Kind{Spec: &schema.Schema{Type: schema.TypeObject, Required: []string{"size"}, Properties: map[string]*schema.Schema{
			"replicas": {Type: schema.TypeInteger, Minimum: &zero, Maximum: &three, Default: 1},
			"size":     {Type: schema.TypeString, Enum: []any{"small", "large"}},
			"mode":     {Type: schema.TypeString, Default: "fast"},
		}}}}
	tbl := resource.NewTable(func(context.Context) ([]kinds.Declaration, error) {
		return []kinds.Declaration{{Queue: "greetings", For: kinds.Kind{Kind: "Greeting", Resource: "greetings"}}, foo}, nil
	})
	return TableKinds(context.Background(), tbl)
}

// A declared kind without a schema takes any spec mapping (its controller
// checks the fields); its metadata is checked as every kind's.
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
		{"kind: Greeting\nmetadata: {name: hi}\nspec: [1]\n", `g.yaml:3:7: The Greeting "hi" is invalid: spec: Invalid value: [1]: must be of type object`},
		{"kind: Greeting\nmetadata: {name: hi}\n", `g.yaml:1:1: The Greeting "hi" is invalid: spec: Required value`},
		{"kind: Greeting\nmetadata: {nmae: hi}\nspec: {}\n", `g.yaml:2:12: The Greeting "" is invalid: metadata.nmae: Unknown field: not in the schema of Greeting (known: annotations, `},
		{"kind: Salutation\nmetadata: {name: hi}\nspec: {}\n", `unknown kind "Salutation" (known: Deployment, `},
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
	if _, err := Decode("p.yaml", strings.NewReader("kind: Pod\nmetadata: {name: p}\nspec: {imgae: x}\n"), "", withGreetings()); err == nil ||
		!strings.Contains(err.Error(), `p.yaml:3:8: The Pod "p" is invalid: spec.imgae: Unknown field`) {
		t.Errorf("a Pod with a misspelt field = %v", err)
	}
}

// A declared kind's schema is its declaration's: defaults are filled in,
// and every field error is reported, each where it is, in the manifest's
// order.
func TestDeclaredSchema(t *testing.T) {
	objs, err := Decode("f.yaml", strings.NewReader("kind: Foo\nmetadata: {name: x}\nspec: {size: small, replicas: 2}\n"), "", withGreetings())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(objs[0].Value["spec"])
	if string(got) != `{"mode":"fast","replicas":2,"size":"small"}` {
		t.Errorf("spec after defaults = %s", got)
	}
	objs, err = Decode("f.yaml", strings.NewReader("kind: Foo\nmetadata: {name: x}\nspec: {size: small}\n"), "", withGreetings())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(objs[0].Value); string(got) != `{"kind":"Foo","metadata":{"name":"x","namespace":"default"},"spec":{"mode":"fast","replicas":1,"size":"small"}}` {
		t.Errorf("object after defaults = %s", got)
	}
	// A status is neither checked nor kept: it is not apply's to write.
	objs, err = Decode("p.yaml", strings.NewReader("kind: Pod\nmetadata: {name: p}\nspec: {}\nstatus: {phase: Bogus}\n"), "", withGreetings())
	if err != nil || len(objs) != 1 || objs[0].Value["status"] != nil {
		t.Errorf("a Pod with a status none could write: %v, %v", err, objs)
	}

	bad := "kind: Foo\nmetadata:\n  name: x\nspec:\n  bogusField: 1\n  replicas: \"three\"\n  size: huge\n"
	_, err = Decode("f.yaml", strings.NewReader(bad), "", withGreetings())
	want := `f.yaml:5:3: The Foo "x" is invalid: spec.bogusField: Unknown field: not in the schema of Foo (known: mode, replicas, size)
f.yaml:6:13: The Foo "x" is invalid: spec.replicas: Invalid value: "three": must be of type integer
f.yaml:7:9: The Foo "x" is invalid: spec.size: Unsupported value: "huge": supported values: "small", "large"`
	if err == nil || err.Error() != want {
		t.Errorf("Decode of a bad Foo =\n%v\nwant\n%s", err, want)
	}
	var inv *Invalid
	if !errors.As(err, &inv) || !errors.Is(err, schema.ErrInvalid) || len(inv.Fields) != 3 {
		t.Errorf("the error is not an *Invalid of 3 fields wrapping schema.ErrInvalid: %#v", err)
	}
	// Beyond schema.MaxErrors, the rest are counted.
	var many strings.Builder
	many.WriteString("kind: Foo\nmetadata: {name: x}\nspec:\n  size: small\n")
	for i := range schema.MaxErrors + 5 {
		fmt.Fprintf(&many, "  bogus%d: 1\n", i)
	}
	_, err = Decode("f.yaml", strings.NewReader(many.String()), "", withGreetings())
	if err == nil || strings.Count(err.Error(), "\n") != schema.MaxErrors || !strings.HasSuffix(err.Error(), "\nf.yaml:1:1: The Foo \"x\" is invalid: and 5 more errors") {
		t.Errorf("Decode of a Foo with %d errors:\n%v", schema.MaxErrors+5, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"kind: Foo\nmetadata: {name: x}\nspec: {size: small, replicas: 4}\n", `f.yaml:3:31: The Foo "x" is invalid: spec.replicas: Invalid value: 4: must be less than or equal to 3`},
		{"kind: Foo\nmetadata: {name: x}\nspec: {replicas: 1}\n", `f.yaml:3:7: The Foo "x" is invalid: spec.size: Required value`},
	} {
		if _, err := Decode("f.yaml", strings.NewReader(tc.in), "", withGreetings()); err == nil || err.Error() != tc.want {
			t.Errorf("Decode(%q) = %v, want %s", tc.in, err, tc.want)
		}
	}
}
