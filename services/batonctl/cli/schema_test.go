package cli

import (
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
)

// fooDeclaration declares Foo with a schema and printer columns.
func fooDeclaration() kinds.Declaration {
	zero := 0.0
	return kinds.Declaration{Queue: "foos",
		For: kinds.Kind{Kind: "Foo", Resource: "foos", Aliases: []string{"foo"}},
		Schema: &schema.Kind{
			Spec: &schema.Schema{Type: schema.TypeObject, Description: "What a Foo should be.", Required: []string{"size"},
				Properties: map[string]*schema.Schema{
					"replicas": {Type: schema.TypeInteger, Minimum: &zero, Default: 1, Description: "How many copies."},
					"size":     {Type: schema.TypeString, Enum: []any{"small", "large"}, Description: "How big each is."},
					"mode":     {Type: schema.TypeString, Default: "fast"},
				}},
			Status: &schema.Schema{Type: schema.TypeObject, Properties: map[string]*schema.Schema{
				"ready": {Type: schema.TypeBoolean},
			}},
		},
		PrinterColumns: []schema.Column{
			{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
			{Name: "Size", Type: "string", JSONPath: ".spec.size"},
			{Name: "Ready", Type: "boolean", JSONPath: ".status.ready"},
			{Name: "Mode", Type: "string", JSONPath: ".spec.mode", Priority: 1},
		}}
}

// TestDeclaredSchema: apply checks a declared kind's objects against the
// schema its declaration carries, reports every field error where it is,
// writes nothing of a refused object (nor of the apply it is part of),
// fills in the defaults, and raises the generation only when the spec
// changes; get prints the declaration's columns; explain prints the
// schema.
func TestDeclaredSchema(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	etcd := etcdClient(t, e.etcd)
	declare(t, e.etcd, fooDeclaration())
	dir := t.TempDir()
	stored := func(name string) bool {
		t.Helper()
		resp, err := etcd.Get(t.Context(), "/registry/foos/default/"+name)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) == 1
	}

	bad := writeFile(t, dir, "bad.yaml", "kind: Foo\nmetadata:\n  name: x\nspec:\n  bogusField: 1\n  replicas: \"three\"\n  size: small\n")
	r := e.run(t, "", "apply", "-f", bad)
	want := "error: " + bad + `:5:3: The Foo "x" is invalid: spec.bogusField: Unknown field: not in the schema of Foo (known: mode, replicas, size)
error: ` + bad + `:6:13: The Foo "x" is invalid: spec.replicas: Invalid value: "three": must be of type integer
`
	if r.code != 1 || r.stderr != want || r.stdout != "" {
		t.Errorf("apply of a bad Foo: exit %d\nstdout %q\nstderr:\n%s\nwant:\n%s", r.code, r.stdout, r.stderr, want)
	}
	if stored("x") {
		t.Error("a refused Foo was stored")
	}
	// One refused object stops the whole apply: a good one beside it is
	// not written either.
	two := writeFile(t, dir, "two.yaml", "kind: Foo\nmetadata: {name: y}\nspec: {size: small}\n---\nkind: Foo\nmetadata: {name: z}\nspec: {size: huge}\n")
	r = e.run(t, "", "apply", "-f", two)
	if r.code != 1 || !strings.Contains(r.stderr, two+`:7:14: The Foo "z" is invalid: spec.size: Unsupported value: "huge": supported values: "small", "large"`) {
		t.Errorf("apply of a good and a bad Foo: exit %d, %s", r.code, r.stderr)
	}
	if stored("y") || stored("z") {
		t.Error("an apply with a refused object wrote some of its objects")
	}

	// Defaults are filled in and stored.
	good := writeFile(t, dir, "good.yaml", "kind: Foo\nmetadata: {name: x}\nspec: {size: small}\n")
	if got := e.run(t, "", "apply", "-f", good).mustSucceed(t).stdout; got != "foo/x created\n" {
		t.Errorf("apply = %q", got)
	}
	obj := getJSON(t, e, "foo", "x")
	if field(obj, "spec", "replicas") != 1.0 || field(obj, "spec", "mode") != "fast" || field(obj, "metadata", "generation") != 1.0 {
		t.Errorf("stored Foo: %v", obj)
	}
	// The same manifest, the defaults still absent from it, changes
	// nothing; a change of spec raises the generation.
	if got := e.run(t, "", "apply", "-f", good).mustSucceed(t).stdout; got != "foo/x unchanged\n" {
		t.Errorf("apply again = %q", got)
	}
	writeFile(t, dir, "good.yaml", "kind: Foo\nmetadata: {name: x}\nspec: {size: large, replicas: 3}\n")
	if got := e.run(t, "", "apply", "-f", good).mustSucceed(t).stdout; got != "foo/x configured\n" {
		t.Errorf("apply of a change = %q", got)
	}
	obj = getJSON(t, e, "foo", "x")
	if field(obj, "spec", "replicas") != 3.0 || field(obj, "metadata", "generation") != 2.0 {
		t.Errorf("Foo after a change of spec: %v", obj)
	}
	setStatus(t, etcd, "/registry/foos/default/x", map[string]any{"ready": true})

	// get prints NAME, the columns of priority 0, AGE; -o wide all.
	out := e.run(t, "", "get", "foos").mustSucceed(t).stdout
	if !hasRow(out, "NAME", "REPLICAS", "SIZE", "READY", "AGE") || !hasRow(out, "x", "3", "large", "true") || strings.Contains(out, "MODE") {
		t.Errorf("get foos:\n%s", out)
	}
	out = e.run(t, "", "get", "foos", "-o", "wide").mustSucceed(t).stdout
	if !hasRow(out, "NAME", "REPLICAS", "SIZE", "READY", "MODE", "AGE") || !hasRow(out, "x", "3", "large", "true", "fast") {
		t.Errorf("get foos -o wide:\n%s", out)
	}
	out = e.run(t, "", "get", "foos", "-A").mustSucceed(t).stdout
	if !hasRow(out, "NAMESPACE", "NAME", "REPLICAS") || !hasRow(out, "default", "x", "3") {
		t.Errorf("get foos -A:\n%s", out)
	}

	// explain prints the schema, as kubectl explain does.
	out = e.run(t, "", "explain", "foos.spec").mustSucceed(t).stdout
	for _, want := range []string{"KIND:       Foo\n", "FIELD: spec <Object> -required-\n", "DESCRIPTION:\n    What a Foo should be.\n",
		"FIELDS:\n", "  replicas\t<integer>\n    How many copies.\n    default: 1\n    minimum: >= 0\n",
		"  size\t<string> -required-\n    How big each is.\n    enum: \"small\", \"large\"\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain foos.spec lacks %q:\n%s", want, out)
		}
	}
	r = e.run(t, "", "explain", "foo.spec.replcias")
	if r.code != 2 || !strings.Contains(r.stderr, `field "replcias" does not exist in Foo.spec: did you mean replicas? (fields: mode, replicas, size)`) {
		t.Errorf("explain of a misspelt field: exit %d, %s", r.code, r.stderr)
	}
	r = e.run(t, "", "explain", "fooz")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown resource "fooz": did you mean foo`) {
		t.Errorf("explain of a misspelt resource: exit %d, %s", r.code, r.stderr)
	}
	// Completion offers the fields of what is before the last '.'.
	out = e.run(t, "", "__complete", "explain", "foo.spec.").stdout
	if out != "foo.spec.mode\nfoo.spec.replicas\nfoo.spec.size\n:nospace\n" {
		t.Errorf("__complete explain foo.spec. = %q", out)
	}
}

// TestExplainReference: explain needs no server for a reference kind, and
// goes through lists to their elements.
func TestExplainReference(t *testing.T) {
	e := env{}
	out := e.run(t, "", "explain", "jobs.status.conditions").mustSucceed(t).stdout
	for _, want := range []string{"KIND:       Job\nRESOURCE:   jobs\n", "FIELD: conditions <[]Object>\n",
		"  type\t<string> -required-\n", `enum: "Complete", "Failed"`} {
		if !strings.Contains(out, want) {
			t.Errorf("explain jobs.status.conditions lacks %q:\n%s", want, out)
		}
	}
	out = e.run(t, "", "explain", "deploy", "--recursive").mustSucceed(t).stdout
	if !strings.Contains(out, "  spec\t<Object> -required-\n    replicas\t<integer>\n") || !strings.Contains(out, "      maxSurge\t<IntOrString>\n") {
		t.Errorf("explain deploy --recursive:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain"}, "usage: batonctl explain <resource>[.FIELD…]"},
		{[]string{"explain", "pods.spec.image.size"}, `field "size" does not exist in Pod.spec.image (Pod.spec.image has no fields to explain: it is string)`},
		{[]string{"explain", "pods..spec"}, `field "" does not exist in Pod`},
	} {
		if r := e.run(t, "", tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("batonctl %q: exit %d, %s; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestScaleChecksTheSchema: scale writes only an object its kind's schema
// takes; one another writer stored without a template is left as it is.
func TestScaleChecksTheSchema(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	etcd := etcdClient(t, e.etcd)
	const key = "/registry/deployments/default/bare"
	if _, err := etcd.Put(t.Context(), key, `{"kind":"Deployment","metadata":{"name":"bare","namespace":"default","generation":1},"spec":{"replicas":1}}`); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, "", "scale", "deploy/bare", "--replicas", "4")
	if r.code != 1 || !strings.Contains(r.stderr, `deployment/bare: not scaled: The Deployment "bare" is invalid: spec.template: Required value`) {
		t.Errorf("scale of an invalid object: exit %d, %s", r.code, r.stderr)
	}
	if obj := getJSON(t, e, "deploy", "bare"); field(obj, "spec", "replicas") != 1.0 || field(obj, "metadata", "generation") != 1.0 {
		t.Errorf("the refused scale wrote: %v", obj)
	}
}
