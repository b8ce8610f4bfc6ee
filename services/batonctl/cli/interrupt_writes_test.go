package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// cancelOnWrite is a stdout that ends the command's context (Ctrl-C) once
// the command has printed a line.
type cancelOnWrite struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel()
	return w.buf.Write(p)
}

// TestInterruptedBetweenWrites: apply and delete -f interrupted after
// their first object write no more, and say which they left out.
func TestInterruptedBetweenWrites(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	etcd := etcdClient(t, e.etcd)
	file := writeFile(t, t.TempDir(), "two.yaml", "kind: Pod\nmetadata: {name: a}\nspec: {image: x}\n---\nkind: Pod\nmetadata: {name: b}\nspec: {image: x}\n")
	stored := func() []string {
		t.Helper()
		resp, err := etcd.Get(t.Context(), "/registry/pods/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, strings.TrimPrefix(string(kv.Key), "/registry/pods/default/"))
		}
		return out
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		out := &cancelOnWrite{cancel: cancel}
		var errb bytes.Buffer
		code := Main(ctx, append(e.globals(), args...), IO{Stdin: strings.NewReader(""), Stdout: out, Stderr: &errb,
			Lookup: func(string) (string, bool) { return "", false }})
		return code, out.buf.String(), errb.String()
	}

	code, stdout, stderr := run("apply", "-f", file)
	if want := "error: interrupted (context canceled) after 1 of 2 objects: " + file + ":5: pod/b and those after it were not applied\n"; code != 1 || stdout != "pod/a created\n" || stderr != want {
		t.Errorf("apply interrupted after its first write: exit %d\nstdout %q\nstderr %q\nwant stderr %q", code, stdout, stderr, want)
	}
	if got := stored(); len(got) != 1 || got[0] != "a" {
		t.Errorf("stored after an interrupted apply: %q, want [a]", got)
	}

	e.run(t, "", "apply", "-f", file).mustSucceed(t)
	code, stdout, stderr = run("delete", "-f", file)
	if want := "error: interrupted (context canceled) after 1 of 2 objects: " + file + ":5: pod/b and those after it were not deleted\n"; code != 1 || stdout != "pod/a deleted\n" || stderr != want {
		t.Errorf("delete -f interrupted after its first write: exit %d\nstdout %q\nstderr %q\nwant stderr %q", code, stdout, stderr, want)
	}
	if got := stored(); len(got) != 1 || got[0] != "b" {
		t.Errorf("stored after an interrupted delete: %q, want [b]", got)
	}
}
