package resource

import (
	"context"
	"errors"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
)

// Validator gives each kind its schema: a reference kind's built-in one, a
// declared kind's from its declaration, and one of metadata alone to a
// kind declared without a schema or only owned.
func TestValidator(t *testing.T) {
	foo := kinds.Declaration{Queue: "foos", For: kinds.Kind{Kind: "Foo", Resource: "foos"},
		Owns: []kinds.Kind{{Kind: "Bar", Resource: "bars"}},
		Schema: &schema.Kind{Spec: &schema.Schema{Type: schema.TypeObject, Properties: map[string]*schema.Schema{
			"size": {Type: schema.TypeString, Default: "small"},
		}}},
		PrinterColumns: []schema.Column{{Name: "Size", Type: "string", JSONPath: ".spec.size"}}}
	tbl := NewTable(func(context.Context) ([]kinds.Declaration, error) { return []kinds.Declaration{foo}, nil })
	if err := tbl.Discover(t.Context()); err != nil {
		t.Fatal(err)
	}
	admit := func(resource, obj string) (map[string]any, error) {
		t.Helper()
		typ, ok := tbl.set.ByResource(resource)
		if !ok {
			t.Fatalf("no kind %s", resource)
		}
		v, err := tbl.Validator(typ)
		if err != nil {
			t.Fatalf("Validator(%s): %v", resource, err)
		}
		o := map[string]any{"kind": typ.Kind, "metadata": map[string]any{"name": "x"}, "spec": map[string]any{obj: "1"}}
		return o, v.Admit(o)
	}
	if _, err := admit("pods", "imgae"); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("a Pod with a misspelt field: %v", err)
	}
	if _, err := admit("foos", "sise"); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("a Foo with a misspelt field: %v", err)
	}
	if o, err := admit("foos", "size"); err != nil || o["spec"].(map[string]any)["size"] != "1" {
		t.Errorf("a Foo: %v, %v", o, err)
	}
	if _, err := admit("bars", "anything"); err != nil {
		t.Errorf("an owned kind without a schema: %v", err)
	}
	foos, _ := tbl.set.ByResource("foos")
	if cols := tbl.PrinterColumns(foos); len(cols) != 1 || cols[0].Name != "Size" {
		t.Errorf("PrinterColumns(foos) = %v", cols)
	}
	pods, _ := tbl.set.ByResource("pods")
	if cols := tbl.PrinterColumns(pods); cols != nil {
		t.Errorf("PrinterColumns(pods) = %v", cols)
	}
}
