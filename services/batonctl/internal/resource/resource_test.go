package resource

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestLookup(t *testing.T) {
	tbl := NewTable(nil)
	tests := []struct{ in, want string }{
		{"deployments", "Deployment"}, {"deploy", "Deployment"}, {"Deployment", "Deployment"},
		{"rs", "ReplicaSet"}, {"sts", "StatefulSet"}, {"job", "Job"}, {"po", "Pod"}, {"PODS", "Pod"},
	}
	for _, tc := range tests {
		got, err := tbl.Lookup(t.Context(), tc.in)
		if err != nil || got.Kind != tc.want {
			t.Errorf("Lookup(%q) = %v, %v; want %s", tc.in, got.Kind, err, tc.want)
		}
	}
	if _, err := tbl.Lookup(t.Context(), "services"); err == nil {
		t.Error("Lookup(services) succeeded")
	}
	d, _ := tbl.Lookup(t.Context(), "deploy")
	if got := d.Key("ns", "web"); got != "/registry/deployments/ns/web" {
		t.Errorf("Key = %q", got)
	}
	if got := d.NamespacePrefix(""); got != "/registry/deployments/" {
		t.Errorf("NamespacePrefix = %q", got)
	}
	if got := tbl.Children(d); len(got) != 1 || got[0].Resource != "replicasets" {
		t.Errorf("Children(deployments) = %v", got)
	}
	if got := tbl.Queue(d); got != "deployments" {
		t.Errorf("Queue(deployments) = %q", got)
	}
}

var greetings = kinds.Declaration{Queue: "greeters",
	For:  kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting", "gr"}},
	Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}

// A kind the table does not know sends it to discover the declared kinds,
// once, and only then.
func TestDiscovery(t *testing.T) {
	calls := 0
	tbl := NewTable(func(context.Context) ([]kinds.Declaration, error) {
		calls++
		return []kinds.Declaration{greetings}, nil
	})
	if _, err := tbl.Lookup(t.Context(), "rs"); err != nil || calls != 0 {
		t.Fatalf("Lookup(rs) = %v after %d discoveries, want none", err, calls)
	}
	g, err := tbl.Lookup(t.Context(), "gr")
	if err != nil || g.Kind != "Greeting" {
		t.Fatalf("Lookup(gr) = %v, %v", g, err)
	}
	if _, err := tbl.ByKind(t.Context(), "Greeting"); err != nil {
		t.Errorf("ByKind(Greeting) = %v", err)
	}
	if _, err := tbl.ByKind(t.Context(), "Salutation"); err == nil || !strings.Contains(err.Error(), "Greeting") {
		t.Errorf("ByKind of an unknown kind = %v, want the known ones, Greeting among them", err)
	}
	if calls != 1 {
		t.Errorf("%d discoveries, want 1", calls)
	}
	if got := tbl.Children(g); len(got) != 1 || got[0].Kind != kinds.Pod {
		t.Errorf("Children(greetings) = %v, want the declared Owns", got)
	}
	if got := tbl.Queue(g); got != "greeters" {
		t.Errorf("Queue(greetings) = %q, want the declaration's queue", got)
	}
	var names []string
	for _, k := range tbl.Known() {
		names = append(names, k.Kind)
	}
	if !slices.Equal(names, []string{"Deployment", "ReplicaSet", "StatefulSet", "Job", "Pod", "Event", "Greeting"}) {
		t.Errorf("Known() = %v", names)
	}
	if n := len(Reference()); n != 5 {
		t.Errorf("Reference() has %d kinds, want the 5 reference kinds", n)
	}
}

func TestDiscoveryFailureIsNamed(t *testing.T) {
	down := errors.New("etcd is down")
	tbl := NewTable(func(context.Context) ([]kinds.Declaration, error) { return nil, down })
	_, err := tbl.Lookup(t.Context(), "greetings")
	if !errors.Is(err, down) || !strings.Contains(err.Error(), `unknown resource "greetings"`) {
		t.Errorf("Lookup with discovery failing = %v", err)
	}
	_, err = tbl.ByKind(t.Context(), "Greeting")
	if !errors.Is(err, down) || !strings.Contains(err.Error(), `unknown kind "Greeting"`) {
		t.Errorf("ByKind with discovery failing = %v", err)
	}
}

func TestDeclared(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	good, err := greetings.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		greetings.Key():               string(good),
		kinds.DeclarationPrefix + "x": string(good), // under another queue's key
		kinds.DeclarationPrefix + "y": `{"queue":"y"}`,
	} {
		if _, err := cli.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Declared(t.Context(), cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Queue != "greeters" || got[0].For.Kind != "Greeting" {
		t.Errorf("Declared = %+v, want only the valid record", got)
	}
}

// A mistyped resource is answered with the names it was probably meant to
// be, declared kinds included, and the list of known resources.
func TestLookupSuggests(t *testing.T) {
	tbl := NewTable(func(context.Context) ([]kinds.Declaration, error) {
		return []kinds.Declaration{greetings}, nil
	})
	for _, tc := range []struct{ in, want string }{
		{"deploymnets", `unknown resource "deploymnets": did you mean deployments or deployment? (known: deployments (deploy), `},
		{"greetngs", `unknown resource "greetngs": did you mean greetings or greeting? (known: `},
		{"frobs", `unknown resource "frobs" (known: deployments (deploy), replicasets (rs), `},
	} {
		_, err := tbl.Lookup(t.Context(), tc.in)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Lookup(%q) = %v, want an error beginning %q", tc.in, err, tc.want)
		}
	}
	if _, err := tbl.Lookup(t.Context(), "frobs"); err == nil || !strings.Contains(err.Error(), "greetings (gr)") {
		t.Errorf("the known resources leave out the declared ones: %v", err)
	}
}
