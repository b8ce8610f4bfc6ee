package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// declare publishes d as a worker would.
func declare(t *testing.T, endpoint string, d kinds.Declaration) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	data, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, d.Key(), string(data)); err != nil {
		t.Fatal(err)
	}
}

const greeting = "kind: Greeting\nmetadata: {name: hi}\nspec: {name: world, extra: {any: [1, 2]}}\n"

// TestDeclaredKinds: a kind a controller declares under /baton/rules/ is
// found there the first time a command names it, and get, apply, describe
// and delete work for it as for a reference kind; describe's children come
// from the declaration's Owns.
func TestDeclaredKinds(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	dir := t.TempDir()
	file := writeFile(t, dir, "greeting.yaml", greeting)

	// Not declared yet: unknown, a usage error naming the known kinds.
	r := e.run(t, "", "get", "greetings")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown resource "greetings"`) {
		t.Fatalf("get of an undeclared kind: exit %d, %s", r.code, r.stderr)
	}
	r = e.run(t, "", "apply", "-f", file)
	if r.code != 1 || !strings.Contains(r.stderr, `unknown kind "Greeting"`) {
		t.Fatalf("apply of an undeclared kind: exit %d, %s", r.code, r.stderr)
	}

	declare(t, e.etcd, kinds.Declaration{Queue: "greeters",
		For:  kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting", "gr"}},
		Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}})

	if got := e.run(t, "", "apply", "-f", file).mustSucceed(t).stdout; got != "greeting/hi created\n" {
		t.Errorf("apply = %q", got)
	}
	if got := e.run(t, "", "apply", "-f", file).mustSucceed(t).stdout; got != "greeting/hi unchanged\n" {
		t.Errorf("apply again = %q", got)
	}
	out := e.run(t, "", "get", "gr").mustSucceed(t).stdout
	if !hasRow(out, "NAME", "AGE") || !hasRow(out, "hi") {
		t.Errorf("get gr:\n%s", out)
	}
	out = e.run(t, "", "get", "greeting", "hi", "-o", "yaml").mustSucceed(t).stdout
	if !strings.Contains(out, "name: world") || !strings.Contains(out, "generation: 1") {
		t.Errorf("get greeting hi -o yaml:\n%s", out)
	}
	// A name list mixes kinds; get all stays the reference kinds.
	out = e.run(t, "", "get", "greetings,pods", "-o", "name").mustSucceed(t).stdout
	if out != "greeting/hi\n" {
		t.Errorf("get greetings,pods -o name = %q", out)
	}
	if out := e.run(t, "", "get", "all", "-o", "name").mustSucceed(t).stdout; strings.Contains(out, "greeting") {
		t.Errorf("get all lists a declared kind: %q", out)
	}

	// A pod owned by the Greeting is its child in describe.
	pod := "kind: Pod\nmetadata:\n  name: hi-pod\n  ownerReferences: [{kind: Greeting, name: hi}]\nspec: {image: busybox}\n"
	e.run(t, pod, "apply", "-f", "-").mustSucceed(t)
	r = e.run(t, "", "describe", "greetings", "hi")
	for _, want := range []string{"Kind:         Greeting", "Key:          /registry/greetings/default/hi",
		"Queue item (queue greeters, key default/hi):", "Children (pods):", "hi-pod"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe lacks %q:\n%s", want, r.stdout)
		}
	}

	if got := e.run(t, "", "delete", "gr", "hi").mustSucceed(t).stdout; got != "greeting/hi deleted\n" {
		t.Errorf("delete = %q", got)
	}
	if got := e.run(t, "", "delete", "-f", file, "--ignore-not-found").mustSucceed(t).stdout; got != "" {
		t.Errorf("delete -f of a deleted object = %q", got)
	}
}

// Without etcd, a kind batonctl does not know is not a usage error: the
// declared kinds could not be read, and the message says why.
func TestDeclaredKindsWithoutEtcd(t *testing.T) {
	e := env{}
	r := e.run(t, "", "get", "greetings")
	if r.code != 1 || !strings.Contains(r.stderr, `unknown resource "greetings"`) || !strings.Contains(r.stderr, "etcd") {
		t.Errorf("get greetings without etcd: exit %d, %s", r.code, r.stderr)
	}
	if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
		t.Errorf("the error takes %d lines:\n%s", n+1, r.stderr)
	}
}
