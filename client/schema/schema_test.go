package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

// foo is the schema of a kind that uses every keyword.
func foo() *Kind {
	return &Kind{
		Spec: &Schema{Type: TypeObject, Required: []string{"replicas"}, Properties: map[string]*Schema{
			"replicas": {Type: TypeInteger, Minimum: f64(0), Maximum: f64(10)},
			"ratio":    {Type: TypeNumber, Minimum: f64(0), ExclusiveMinimum: true, Maximum: f64(1), ExclusiveMaximum: true},
			"mode":     {Type: TypeString, Enum: []any{"fast", "slow"}, Default: "slow"},
			"level":    {Type: TypeInteger, Enum: []any{1, 2, 3}},
			"name":     {Type: TypeString, MinLength: i64(2), MaxLength: i64(5), Pattern: `^[a-z]+$`},
			"at":       {Type: TypeString, Format: "date-time"},
			"day":      {Type: TypeString, Format: "date"},
			"on":       {Type: TypeBoolean},
			"tags":     {Type: TypeArray, MinItems: i64(1), MaxItems: i64(3), Items: &Schema{Type: TypeString}},
			"env":      {Type: TypeObject, AdditionalProperties: &Schema{Type: TypeString}},
			"extra":    {Type: TypeObject, XPreserveUnknownFields: true, Properties: map[string]*Schema{"known": {Type: TypeInteger}}},
			"anything": {XPreserveUnknownFields: true},
			"surge":    {XIntOrString: true, Pattern: `^[0-9]+%$`, Minimum: f64(0)},
			"maybe":    {Type: TypeString, Nullable: true},
			"limits": {Type: TypeObject, Default: map[string]any{}, Properties: map[string]*Schema{
				"cpu": {Type: TypeInteger, Default: 2},
				"mem": {Type: TypeInteger},
			}},
			"ports": {Type: TypeArray, Items: &Schema{Type: TypeObject, Required: []string{"port"}, Properties: map[string]*Schema{
				"port":     {Type: TypeInteger},
				"protocol": {Type: TypeString, Default: "TCP"},
			}}},
		}},
		Status: &Schema{Type: TypeObject, Properties: map[string]*Schema{
			"ready":              {Type: TypeInteger, Default: 0},
			"observedGeneration": {Type: TypeInteger},
		}},
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := decodeJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)
}

func obj(spec string) string {
	return `{"kind":"Foo","metadata":{"name":"x","namespace":"default"},"spec":` + spec + `}`
}

// Each keyword refuses what it should, with the API server's message, and
// takes what it should.
func TestValidateKeywords(t *testing.T) {
	v := MustCompile("Foo", foo())
	for _, tc := range []struct {
		name, obj string
		want      []string // the errors, in order; none: valid
	}{
		{"valid", obj(`{"replicas":3}`), nil},
		{"type integer", obj(`{"replicas":"three"}`), []string{`spec.replicas: Invalid value: "three": must be of type integer`}},
		{"integer with a fraction", obj(`{"replicas":1.5}`), []string{`spec.replicas: Invalid value: 1.5: must be of type integer`}},
		{"type object", obj(`[1]`), []string{`spec: Invalid value: [1]: must be of type object`}},
		{"unknown field", obj(`{"replicas":1,"bogusField":1}`), []string{`spec.bogusField: Unknown field: not in the schema of Foo (known: anything, at, day, env, extra, level, limits, maybe, mode, name, on, ports, ratio, replicas, surge, tags)`}},
		{"required", obj(`{}`), []string{`spec.replicas: Required value`}},
		{"required null", obj(`{"replicas":null}`), []string{`spec.replicas: Required value`}},
		{"minimum", obj(`{"replicas":-1}`), []string{`spec.replicas: Invalid value: -1: must be greater than or equal to 0`}},
		{"maximum", obj(`{"replicas":11}`), []string{`spec.replicas: Invalid value: 11: must be less than or equal to 10`}},
		{"exclusive minimum", obj(`{"replicas":1,"ratio":0}`), []string{`spec.ratio: Invalid value: 0: must be greater than 0`}},
		{"exclusive maximum", obj(`{"replicas":1,"ratio":1}`), []string{`spec.ratio: Invalid value: 1: must be less than 1`}},
		{"number", obj(`{"replicas":1,"ratio":0.5}`), nil},
		{"number type", obj(`{"replicas":1,"ratio":"half"}`), []string{`spec.ratio: Invalid value: "half": must be of type number`}},
		{"enum", obj(`{"replicas":1,"mode":"medium"}`), []string{`spec.mode: Unsupported value: "medium": supported values: "fast", "slow"`}},
		{"enum of integers", obj(`{"replicas":1,"level":2.0e0}`), []string{`spec.level: Invalid value: 2.0e0: must be of type integer`}},
		{"enum of integers, taken", obj(`{"replicas":1,"level":3}`), nil},
		{"enum of integers, refused", obj(`{"replicas":1,"level":4}`), []string{`spec.level: Unsupported value: 4: supported values: 1, 2, 3`}},
		{"minLength", obj(`{"replicas":1,"name":"a"}`), []string{`spec.name: Invalid value: "a": must be at least 2 characters long`}},
		{"maxLength", obj(`{"replicas":1,"name":"abcdef"}`), []string{`spec.name: Too long: may not be longer than 5 characters`}},
		{"maxLength counts characters", obj(`{"replicas":1,"name":"ééééé","on":true}`), []string{`spec.name: Invalid value: "ééééé": must match the pattern '^[a-z]+$'`}},
		{"pattern", obj(`{"replicas":1,"name":"AB"}`), []string{`spec.name: Invalid value: "AB": must match the pattern '^[a-z]+$'`}},
		{"date-time", obj(`{"replicas":1,"at":"yesterday"}`), []string{`spec.at: Invalid value: "yesterday": must be a date-time in RFC 3339, such as 2026-01-02T15:04:05Z`}},
		{"date-time taken", obj(`{"replicas":1,"at":"2026-01-02T15:04:05.5+01:00","day":"2026-01-02"}`), nil},
		{"date", obj(`{"replicas":1,"day":"2 Jan"}`), []string{`spec.day: Invalid value: "2 Jan": must be a date, such as 2026-01-02`}},
		{"boolean", obj(`{"replicas":1,"on":"yes"}`), []string{`spec.on: Invalid value: "yes": must be of type boolean`}},
		{"minItems", obj(`{"replicas":1,"tags":[]}`), []string{`spec.tags: Invalid value: []: must have at least 1 items`}},
		{"maxItems", obj(`{"replicas":1,"tags":["a","b","c","d"]}`), []string{`spec.tags: Too many: 4: must have at most 3 items`}},
		{"items", obj(`{"replicas":1,"tags":["a",2]}`), []string{`spec.tags[1]: Invalid value: 2: must be of type string`}},
		{"array type", obj(`{"replicas":1,"tags":"a"}`), []string{`spec.tags: Invalid value: "a": must be of type array`}},
		{"additionalProperties", obj(`{"replicas":1,"env":{"A":"1","B":2}}`), []string{`spec.env[B]: Invalid value: 2: must be of type string`}},
		{"preserve unknown fields", obj(`{"replicas":1,"extra":{"known":1,"other":{"deep":[1]}},"anything":[{"x":1}]}`), nil},
		{"preserve unknown fields checks the known", obj(`{"replicas":1,"extra":{"known":"one"}}`), []string{`spec.extra.known: Invalid value: "one": must be of type integer`}},
		{"int-or-string: integer", obj(`{"replicas":1,"surge":2}`), nil},
		{"int-or-string: string", obj(`{"replicas":1,"surge":"25%"}`), nil},
		{"int-or-string: pattern", obj(`{"replicas":1,"surge":"lots"}`), []string{`spec.surge: Invalid value: "lots": must match the pattern '^[0-9]+%$'`}},
		{"int-or-string: minimum", obj(`{"replicas":1,"surge":-1}`), []string{`spec.surge: Invalid value: -1: must be greater than or equal to 0`}},
		{"int-or-string: type", obj(`{"replicas":1,"surge":true}`), []string{`spec.surge: Invalid value: true: must be of type integer or string`}},
		{"nullable", obj(`{"replicas":1,"maybe":null}`), nil},
		{"null in an array", obj(`{"replicas":1,"tags":[null]}`), []string{`spec.tags[0]: Invalid value: null: must be of type string`}},
		{"required in an array's objects", obj(`{"replicas":1,"ports":[{"port":80},{"protocol":"UDP"}]}`), []string{`spec.ports[1].port: Required value`}},
		{"every error at once", obj(`{"replicas":"three","bogusField":1,"mode":"x"}`), []string{
			`spec.bogusField: Unknown field: not in the schema of Foo (known: anything, at, day, env, extra, level, limits, maybe, mode, name, on, ports, ratio, replicas, surge, tags)`,
			`spec.mode: Unsupported value: "x": supported values: "fast", "slow"`,
			`spec.replicas: Invalid value: "three": must be of type integer`,
		}},
		{"status", `{"kind":"Foo","metadata":{"name":"x"},"spec":{"replicas":1},"status":{"ready":"all"}}`, []string{`status.ready: Invalid value: "all": must be of type integer`}},
		{"kind", `{"kind":"Bar","metadata":{"name":"x"},"spec":{"replicas":1}}`, []string{`kind: Unsupported value: "Bar": supported values: "Foo"`}},
		{"metadata", `{"kind":"Foo","metadata":{"nmae":"x","labels":{"a":1},"generation":-1},"spec":{"replicas":1}}`, []string{
			`metadata.generation: Invalid value: -1: must be greater than or equal to 0`,
			`metadata.labels[a]: Invalid value: 1: must be of type string`,
			`metadata.nmae: Unknown field: not in the schema of Foo (known: annotations, creationTimestamp, deletionTimestamp, finalizers, generation, labels, name, namespace, ownerReferences, resourceVersion, uid)`,
			`metadata.name: Required value`,
		}},
		{"top level", `{"kind":"Foo","metadata":{"name":"x"},"spec":{"replicas":1},"extra":1}`, []string{`extra: Unknown field: not in the schema of Foo (known: apiVersion, kind, metadata, spec, status)`}},
		{"no spec", `{"kind":"Foo","metadata":{"name":"x"}}`, []string{`spec: Required value`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Admit(decode(t, tc.obj))
			var got []string
			if err != nil {
				var errs *Errors
				if !errors.As(err, &errs) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("Admit = %v, not an *Errors that is ErrInvalid", err)
				}
				for _, e := range errs.List {
					got = append(got, e.Error())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("Admit(%s):\n got %q\nwant %q", tc.obj, got, tc.want)
			}
		})
	}
}

// Defaults fill in absent and null (not nullable) fields of objects that
// are present, their own fields' defaults too, before validation; a
// nullable null stays.
func TestDefaults(t *testing.T) {
	v := MustCompile("Foo", foo())
	o := decode(t, `{"metadata":{"name":"x"},"spec":{"replicas":1,"mode":null,"maybe":null,"ports":[{"port":80},{"port":81,"protocol":"UDP"}]},"status":{}}`)
	if err := v.Admit(o); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(o)
	want := `{"kind":"Foo","metadata":{"name":"x"},"spec":{"limits":{"cpu":2},"maybe":null,"mode":"slow","ports":[{"port":80,"protocol":"TCP"},{"port":81,"protocol":"UDP"}],"replicas":1},"status":{"ready":0}}`
	if string(b) != want {
		t.Errorf("defaulted:\n got %s\nwant %s", b, want)
	}
	// A default is a copy: changing one object's does not change the next.
	o["spec"].(map[string]any)["limits"].(map[string]any)["cpu"] = json.Number("9")
	o2 := decode(t, obj(`{"replicas":1}`))
	if err := v.Admit(o2); err != nil {
		t.Fatal(err)
	}
	if got := o2["spec"].(map[string]any)["limits"].(map[string]any)["cpu"]; fmt.Sprint(got) != "2" {
		t.Errorf("the default was shared: cpu %v", got)
	}
	// A default that would be invalid is refused with the value.
	var st any = map[string]any{"observedGeneration": json.Number("3")}
	if changed, err := v.AdmitStatus("x", &st); err != nil || !changed {
		t.Fatalf("AdmitStatus = %v, %v", changed, err)
	}
	if b, _ := json.Marshal(st); string(b) != `{"observedGeneration":3,"ready":0}` {
		t.Errorf("AdmitStatus = %s", b)
	}
	if changed, err := v.AdmitStatus("x", &st); err != nil || changed {
		t.Errorf("AdmitStatus of a defaulted status = %v, %v; want no change", changed, err)
	}
	st = map[string]any{"ready": "all"}
	if _, err := v.AdmitStatus("x", &st); err == nil || err.Error() != `Foo "x" is invalid: status.ready: Invalid value: "all": must be of type integer` {
		t.Errorf("AdmitStatus of a bad status = %v", err)
	}
	// Default reports whether it changed anything.
	o3 := decode(t, obj(`{"replicas":1}`))
	if !v.Default(o3) {
		t.Error("Default of an object with absent defaults: no change reported")
	}
	if v.Default(o3) {
		t.Error("Default of a defaulted object: a change reported")
	}
}

// The errors of one object are bounded; the message counts the rest.
func TestMaxErrors(t *testing.T) {
	v := MustCompile("Foo", &Kind{Spec: &Schema{Type: TypeObject}})
	var fields []string
	for i := range MaxErrors + 5 {
		fields = append(fields, fmt.Sprintf(`"f%02d":1`, i))
	}
	err := v.Admit(decode(t, obj("{"+strings.Join(fields, ",")+"}")))
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) != MaxErrors || errs.Omitted != 5 {
		t.Fatalf("Admit = %v", err)
	}
	if !strings.HasPrefix(err.Error(), `Foo "x" is invalid: [spec.f00: Unknown field`) || !strings.HasSuffix(err.Error(), ", and 5 more]") {
		t.Errorf("message = %s", err)
	}
}

// Without a schema, spec and status take any fields; the rest is checked.
func TestNoSchema(t *testing.T) {
	v := MustCompile("Greeting", nil)
	if err := v.Admit(decode(t, `{"kind":"Greeting","metadata":{"name":"x"},"spec":{"any":[1,{"x":null}]},"status":{"y":1}}`)); err != nil {
		t.Errorf("an open spec: %v", err)
	}
	if err := v.Admit(decode(t, `{"kind":"Greeting","metadata":{"name":"x"},"spec":[]}`)); err == nil || !strings.Contains(err.Error(), "spec: Invalid value: []: must be of type object") {
		t.Errorf("a list as spec: %v", err)
	}
}

// Check refuses every schema that is not structural, or past a limit.
func TestCheck(t *testing.T) {
	obj := func(props map[string]*Schema) *Kind {
		return &Kind{Spec: &Schema{Type: TypeObject, Properties: props}}
	}
	field := func(s *Schema) *Kind { return obj(map[string]*Schema{"f": s}) }
	deep := &Schema{Type: TypeObject}
	cur := deep
	for range MaxDepth + 1 {
		next := &Schema{Type: TypeObject}
		cur.Properties = map[string]*Schema{"a": next}
		cur = next
	}
	wide := map[string]*Schema{}
	for i := range MaxNodes {
		wide[fmt.Sprint("f", i)] = &Schema{Type: TypeString}
	}
	for _, tc := range []struct {
		name string
		k    *Kind
		want string
	}{
		{"empty", &Kind{}, "declares neither spec nor status"},
		{"root not an object", &Kind{Spec: &Schema{Type: TypeString}}, `spec: the root must be of type object, not "string"`},
		{"root nullable", &Kind{Status: &Schema{Type: TypeObject, Nullable: true}}, "status: the root may not be nullable"},
		{"no type", field(&Schema{}), "spec.f: has no type"},
		{"unknown type", field(&Schema{Type: "int"}), `spec.f: type "int" is not one of`},
		{"null node", field(nil), "spec.f: is empty"},
		{"int-or-string with a type", field(&Schema{Type: TypeString, XIntOrString: true}), "x-kubernetes-int-or-string takes no type"},
		{"properties on a string", field(&Schema{Type: TypeString, Properties: map[string]*Schema{"a": {Type: TypeString}}}), "properties: only for objects"},
		{"required on an array", field(&Schema{Type: TypeArray, Items: &Schema{Type: TypeString}, Required: []string{"a"}}), "required: only for objects"},
		{"items on an object", field(&Schema{Type: TypeObject, Items: &Schema{Type: TypeString}}), "items: only for arrays"},
		{"array without items", field(&Schema{Type: TypeArray}), "an array needs items"},
		{"pattern on an integer", field(&Schema{Type: TypeInteger, Pattern: "a"}), "pattern: only for strings"},
		{"minimum on a string", field(&Schema{Type: TypeString, Minimum: f64(1)}), "minimum and maximum: only for integers and numbers"},
		{"maxItems on a string", field(&Schema{Type: TypeString, MaxItems: i64(1)}), "minItems and maxItems: only for arrays"},
		{"preserve on a string", field(&Schema{Type: TypeString, XPreserveUnknownFields: true}), "x-kubernetes-preserve-unknown-fields: only for objects"},
		{"properties and additionalProperties", field(&Schema{Type: TypeObject, Properties: map[string]*Schema{"a": {Type: TypeString}}, AdditionalProperties: &Schema{Type: TypeString}}), "exclude each other"},
		{"exclusive without a bound", field(&Schema{Type: TypeInteger, ExclusiveMinimum: true}), "exclusiveMinimum needs minimum"},
		{"minimum above maximum", field(&Schema{Type: TypeInteger, Minimum: f64(2), Maximum: f64(1)}), "minimum 2 is above maximum 1"},
		{"minLength above maxLength", field(&Schema{Type: TypeString, MinLength: i64(2), MaxLength: i64(1)}), "minLength 2 is above maxLength 1"},
		{"negative length", field(&Schema{Type: TypeString, MaxLength: i64(-1)}), "may not be negative"},
		{"unknown format", field(&Schema{Type: TypeString, Format: "email"}), `format "email" is not one of date-time, date`},
		{"pattern does not compile", field(&Schema{Type: TypeString, Pattern: "(a"}), `pattern "(a" does not compile`},
		{"pattern beyond RE2", field(&Schema{Type: TypeString, Pattern: `(?=a)`}), "does not compile"},
		{"required not a property", obj(map[string]*Schema{"a": {Type: TypeString}}).with(func(s *Schema) { s.Required = []string{"b"} }), `required names "b", which is not among its properties`},
		{"required twice", obj(map[string]*Schema{"a": {Type: TypeString}}).with(func(s *Schema) { s.Required = []string{"a", "a"} }), `required names "a" twice`},
		{"empty enum", field(&Schema{Type: TypeString, Enum: []any{}}), "enum is empty"},
		{"enum value of another type", field(&Schema{Type: TypeString, Enum: []any{"a", 1}}), `enum value 1 is not valid here: Invalid value: 1: must be of type string`},
		{"default of another type", field(&Schema{Type: TypeInteger, Default: "one"}), `default "one" is not valid here: Invalid value: "one": must be of type integer`},
		{"default out of bounds", field(&Schema{Type: TypeInteger, Maximum: f64(3), Default: 4}), `default 4 is not valid here`},
		{"default with an unknown field", field(&Schema{Type: TypeObject, Properties: map[string]*Schema{"a": {Type: TypeString}}, Default: map[string]any{"b": "x"}}), `default {"b":"x"} is not valid here: Unknown field`},
		{"too deep", &Kind{Spec: deep}, fmt.Sprintf("nested deeper than %d levels", MaxDepth)},
		{"too many nodes", obj(wide), fmt.Sprintf("more than %d schema nodes", MaxNodes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.k.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check = %v, want an error containing %q", err, tc.want)
			}
			if _, cerr := Compile("Foo", tc.k); cerr == nil {
				t.Error("Compile took what Check refuses")
			}
		})
	}
	if err := foo().Check(); err != nil {
		t.Errorf("Check(foo) = %v", err)
	}
}

func (k *Kind) with(f func(*Schema)) *Kind {
	f(k.Spec)
	return k
}

// A schema survives its own JSON: what a declaration carries is what the
// writer compiled.
func TestSchemaJSON(t *testing.T) {
	b, err := json.Marshal(foo())
	if err != nil {
		t.Fatal(err)
	}
	var back Kind
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(&back)
	if string(b) != string(b2) {
		t.Errorf("round trip changed the schema:\n%s\n%s", b, b2)
	}
	if !strings.Contains(string(b), `"x-kubernetes-preserve-unknown-fields":true`) || !strings.Contains(string(b), `"x-kubernetes-int-or-string":true`) {
		t.Errorf("the extensions' names: %s", b)
	}
	v := MustCompile("Foo", &back)
	if err := v.Admit(decode(t, obj(`{"replicas":"three"}`))); err == nil {
		t.Error("the decoded schema takes a string for an integer")
	}
}

func TestColumns(t *testing.T) {
	o := decode(t, `{"spec":{"replicas":3,"list":[{"a":"x"}]},"status":{"conditions":[{"type":"Ready"}]}}`)
	for _, tc := range []struct {
		path string
		want any
		ok   bool
	}{
		{".spec.replicas", json.Number("3"), true},
		{".status.conditions[0].type", "Ready", true},
		{".spec.list[0].a", "x", true},
		{".spec.list[1].a", nil, false},
		{".spec.missing", nil, false},
		{".spec.replicas.deeper", nil, false},
	} {
		got, ok := Column{JSONPath: tc.path}.Lookup(o)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Lookup(%s) = %v, %v; want %v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
	good := []Column{{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"}, {Name: "Ready", Type: "string", JSONPath: ".status.conditions[0].type", Priority: 1}}
	if err := CheckColumns(good); err != nil {
		t.Errorf("CheckColumns = %v", err)
	}
	for _, tc := range []struct {
		col  Column
		want string
	}{
		{Column{Name: "", Type: "string", JSONPath: ".a"}, "a name is 1 to 63"},
		{Column{Name: "Age", Type: "date", JSONPath: ".a"}, "printed always"},
		{Column{Name: "Replicas", Type: "integer", JSONPath: ".a"}, "named twice"},
		{Column{Name: "X", Type: "int", JSONPath: ".a"}, `type "int" is not one of`},
		{Column{Name: "X", Type: "string", JSONPath: "spec.a"}, "must begin with '.'"},
		{Column{Name: "X", Type: "string", JSONPath: ".a[x]"}, "not a non-negative integer"},
		{Column{Name: "X", Type: "string", JSONPath: ".a[?(@.x)]"}, "not a non-negative integer"},
		{Column{Name: "X", Type: "string", JSONPath: ".a..b"}, "an empty field name"},
		{Column{Name: "X", Type: "string", JSONPath: ".a", Priority: -1}, "negative"},
	} {
		if err := CheckColumns(append(good[:1:1], tc.col)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckColumns(%+v) = %v, want %q", tc.col, err, tc.want)
		}
	}
	many := make([]Column, MaxColumns+1)
	for i := range many {
		many[i] = Column{Name: fmt.Sprint("c", i), Type: "string", JSONPath: ".a"}
	}
	if err := CheckColumns(many); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxColumns)) {
		t.Errorf("CheckColumns of %d = %v", len(many), err)
	}
}

func BenchmarkAdmit(b *testing.B) {
	v := MustCompile("Foo", foo())
	data := []byte(obj(`{"replicas":3,"name":"web","tags":["a","b"],"env":{"A":"1"},"ports":[{"port":80}],"surge":"25%"}`))
	b.ReportAllocs()
	for b.Loop() {
		o, _ := decodeJSON(data)
		if err := v.Admit(o.(map[string]any)); err != nil {
			b.Fatal(err)
		}
	}
}
