package kinds

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/schema"
)

func fooDeclaration() Declaration {
	zero := 0.0
	return Declaration{Queue: "foos", For: Kind{Kind: "Foo", Resource: "foos"},
		Schema: &schema.Kind{Spec: &schema.Schema{Type: schema.TypeObject, Required: []string{"replicas"},
			Properties: map[string]*schema.Schema{"replicas": {Type: schema.TypeInteger, Minimum: &zero}}}},
		PrinterColumns: []schema.Column{{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"}},
	}
}

// A declaration carries its schema and columns through its JSON; without
// them it is encoded as before they existed, so an observer that refuses
// unknown fields still takes it.
func TestDeclarationSchema(t *testing.T) {
	d := fooDeclaration()
	data, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"queue":"foos","for":{"kind":"Foo","resource":"foos"},"schema":{"spec":{"type":"object","properties":{"replicas":{"type":"integer","minimum":0}},"required":["replicas"]}},"printerColumns":[{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}]}`
	if string(data) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", data, want)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	v, err := back.Validator()
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	_ = json.Unmarshal([]byte(`{"kind":"Foo","metadata":{"name":"x"},"spec":{"replicas":"three"}}`), &obj)
	if err := v.Admit(obj); err == nil || !strings.Contains(err.Error(), `spec.replicas: Invalid value: "three": must be of type integer`) {
		t.Errorf("the parsed schema: Admit = %v", err)
	}
	if len(back.PrinterColumns) != 1 || back.PrinterColumns[0] != d.PrinterColumns[0] {
		t.Errorf("columns = %+v", back.PrinterColumns)
	}

	plain := Declaration{Queue: "foos", For: Kind{Kind: "Foo", Resource: "foos"}}
	if data, _ := plain.Marshal(); string(data) != `{"queue":"foos","for":{"kind":"Foo","resource":"foos"}}` {
		t.Errorf("a declaration without a schema = %s", data)
	}

	for _, tc := range []struct{ name, json, want string }{
		{"not structural", `{"queue":"a","for":{"kind":"A","resource":"as"},"schema":{"spec":{"type":"object","properties":{"x":{}}}}}`, "declaration of queue a: schema: spec.x: has no type"},
		{"a misspelt keyword", `{"queue":"a","for":{"kind":"A","resource":"as"},"schema":{"spec":{"type":"object","minimun":1}}}`, `unknown field "minimun"`},
		{"a pattern that does not compile", `{"queue":"a","for":{"kind":"A","resource":"as"},"schema":{"spec":{"type":"object","properties":{"x":{"type":"string","pattern":"("}}}}}`, "does not compile"},
		{"a bad column", `{"queue":"a","for":{"kind":"A","resource":"as"},"printerColumns":[{"name":"X","type":"integer","jsonPath":"spec.x"}]}`, "must begin with '.'"},
	} {
		if _, err := Parse([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Parse = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// The reference declarations carry the reference kinds' schemas, which
// take what the reference controllers and batonctl's examples write and
// refuse what batonctl refused before the schemas were shared.
func TestBuiltinSchemas(t *testing.T) {
	for _, d := range BuiltinDeclarations() {
		if d.Schema == nil || d.Schema.Spec == nil || d.Schema.Status == nil {
			t.Errorf("%s: no schema", d.For.Kind)
		}
		if v, ok := BuiltinValidator(d.For.Resource); !ok || v.Kind() != d.For.Kind {
			t.Errorf("BuiltinValidator(%s) = %v, %v", d.For.Resource, v, ok)
		}
	}
	if _, ok := BuiltinValidator("greetings"); ok {
		t.Error("a declared kind has a built-in validator")
	}
	s := NewSet()
	if d, ok := s.Declaration("pods"); !ok || d.Schema == nil {
		t.Errorf("Set.Declaration(pods) = %+v, %v", d, ok)
	}
	s.Declare(fooDeclaration())
	second := fooDeclaration()
	second.Queue, second.PrinterColumns = "other", nil
	s.Declare(second)
	if d, ok := s.Declaration("foos"); !ok || d.Queue != "foos" || len(d.PrinterColumns) != 1 {
		t.Errorf("Set.Declaration(foos) = %+v, %v: want the first declared", d, ok)
	}
	for _, tc := range []struct{ resource, obj, want string }{
		{"deployments", `{"kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":3,"strategy":{"maxSurge":"25%","maxUnavailable":0},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"image":"nginx"}}}}`, ""},
		{"deployments", `{"kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":"three","strategy":{"maxSurge":"lots"},"template":{"spec":{}}}}`,
			`[spec.replicas: Invalid value: "three": must be of type integer, spec.strategy.maxSurge: Invalid value: "lots": must match the pattern '^[0-9]+%$']`},
		{"replicasets", `{"kind":"ReplicaSet","metadata":{"name":"web"},"spec":{"replicas":-1}}`, `[spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.template: Required value]`},
		{"jobs", `{"kind":"Job","metadata":{"name":"j"},"spec":{"template":{"spec":{"durationSeconds":0.5,"exitCode":1}}},"status":{"conditions":[{"type":"Complete","status":"True"}],"succeeded":1}}`, ""},
		{"pods", `{"kind":"Pod","metadata":{"name":"p","ownerReferences":[{"kind":"ReplicaSet","name":"web","uid":"u"}]},"spec":{"imgae":"x"},"status":{"phase":"Sleeping"}}`,
			`[spec.imgae: Unknown field: not in the schema of Pod (known: durationSeconds, exitCode, image), status.phase: Unsupported value: "Sleeping": supported values: "Pending", "Running", "Succeeded", "Failed"]`},
		{"statefulsets", `{"kind":"StatefulSet","metadata":{"name":"s"},"spec":{"replicas":2,"template":{"spec":{"image":"db"}}},"status":{"replicas":2,"readyReplicas":1,"observedGeneration":1}}`, ""},
	} {
		v, _ := BuiltinValidator(tc.resource)
		var obj map[string]any
		if err := json.Unmarshal([]byte(tc.obj), &obj); err != nil {
			t.Fatal(err)
		}
		err := v.Admit(obj)
		got := ""
		if err != nil {
			got = strings.TrimPrefix(err.Error(), v.Kind()+" ")
			got = got[strings.Index(got, ": ")+2:]
		}
		if got != tc.want {
			t.Errorf("%s: Admit(%s)\n got %s\nwant %s", tc.resource, tc.obj, got, tc.want)
		}
	}
}
