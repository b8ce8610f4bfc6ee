package controllers

import (
	"slices"
	"testing"

	"github.com/batonrun/baton/client/kinds"
)

// The reference controllers are exactly client/kinds' built-in
// declarations: one controller per declaration, named like its queue, in
// the table's order, and then the garbage collector, which is none of them.
func TestControllersAreTheBuiltinDeclarations(t *testing.T) {
	decls := kinds.BuiltinDeclarations()
	var queues []string
	for _, d := range decls {
		queues = append(queues, d.Queue)
	}
	if want := append(queues, GarbageCollectorName); !slices.Equal(Names, want) {
		t.Fatalf("Names = %v, want the built-in declarations' queues and the collector %v", Names, want)
	}
	if _, err := Declaration(GarbageCollectorName); err == nil {
		t.Error("Declaration(garbagecollector) succeeded: the collector declares nothing (the observer feeds its queue)")
	}
	if _, err := New(GarbageCollectorName, Deps{}); err == nil {
		t.Error("New(garbagecollector) succeeded: the collector is package garbagecollector's")
	}
	for _, want := range decls {
		got, err := Declaration(want.Queue)
		if err != nil {
			t.Fatal(err)
		}
		if got.For.Kind != want.For.Kind || !slices.EqualFunc(got.Owns, want.Owns, func(a, b kinds.Kind) bool { return a.Kind == b.Kind }) {
			t.Errorf("Declaration(%s) = %+v, want %+v", want.Queue, got, want)
		}
		if _, err := New(want.Queue, Deps{}); err != nil {
			t.Errorf("New(%s) = %v", want.Queue, err)
		}
	}
	if _, err := Declaration("widgets"); err == nil {
		t.Error("Declaration(widgets) succeeded")
	}
	if _, err := New("widgets", Deps{}); err == nil {
		t.Error("New(widgets) succeeded")
	}
}
