package cli

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// watching runs batonctl in the background, as a user leaves `get -w`
// running, and stops it (Ctrl-C) when the test ends or stop is called.
type watching struct {
	t         *testing.T
	out, errb *syncWriter
	cancel    func()
	done      chan int
	exited    bool
	code      int
}

func startWatching(t *testing.T, e env, args ...string) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := &watching{t: t, out: &syncWriter{wrote: make(chan struct{}, 1)}, errb: &syncWriter{wrote: make(chan struct{}, 1)}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		w.done <- Main(ctx, append(e.globals(), args...), IO{Stdin: strings.NewReader(""), Stdout: w.out, Stderr: w.errb})
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// wait waits for batonctl to exit by itself and returns its status.
func (w *watching) wait() int {
	w.t.Helper()
	if !w.exited {
		select {
		case w.code = <-w.done:
			w.exited = true
		case <-time.After(15 * time.Second):
			w.t.Fatalf("batonctl did not exit within 15s\nstdout:\n%s\nstderr:\n%s", w.out.String(), w.errb.String())
		}
	}
	return w.code
}

// stop is Ctrl-C: it returns the exit status.
func (w *watching) stop() int {
	w.cancel()
	return w.wait()
}

// lines waits until the output has n lines, and returns them.
func (w *watching) lines(t *testing.T, n int) []string {
	t.Helper()
	eventually(t, 15*time.Second, "the watch printed "+string(rune('0'+n))+" lines", func() bool {
		return strings.Count(w.out.String(), "\n") >= n
	})
	return strings.Split(strings.TrimRight(w.out.String(), "\n"), "\n")
}

// TestGetWatch: get -w prints the list, then a line for each change of
// the objects it lists, aligned under the list's header, until Ctrl-C
// (exit 0); --output-watch-events says which change it was; -o json
// prints a document per change; a name or TYPE/NAME watches that object
// alone; several kinds are watched at once.
func TestGetWatch(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	etcd := etcdClient(t, e.etcd)
	dir := t.TempDir()
	e.run(t, "", "apply", "-f", writeFile(t, dir, "web.yaml", webDeployment)).mustSucceed(t)
	put := func(key, value string) {
		t.Helper()
		if _, err := etcd.Put(t.Context(), key, value); err != nil {
			t.Fatal(err)
		}
	}

	w := startWatching(t, e, "get", "deploy", "-w", "--output-watch-events")
	lines := w.lines(t, 2)
	if !hasRow(lines[0], "EVENT", "NAME", "READY", "UP-TO-DATE") || !hasRow(lines[1], "ADDED", "web", "0/3", "0") {
		t.Fatalf("the list first:\n%s", strings.Join(lines, "\n"))
	}
	e.run(t, "", "scale", "deploy/web", "--replicas", "5").mustSucceed(t)
	lines = w.lines(t, 3)
	if !hasRow(lines[2], "MODIFIED", "web", "0/5", "0") {
		t.Errorf("a change:\n%s", strings.Join(lines, "\n"))
	}
	if strings.Index(lines[2], "0/5") != strings.Index(lines[0], "READY") {
		t.Errorf("the change's row is not under the header:\n%s", strings.Join(lines, "\n"))
	}
	// A new object, and one of another kind, which this watch leaves out.
	put("/registry/replicasets/default/rs-1", `{"kind":"ReplicaSet","metadata":{"name":"rs-1","namespace":"default"},"spec":{"replicas":1}}`)
	e.run(t, "", "apply", "-f", writeFile(t, dir, "api.yaml", strings.ReplaceAll(webDeployment, "web", "api"))).mustSucceed(t)
	e.run(t, "", "delete", "deploy", "web").mustSucceed(t)
	lines = w.lines(t, 5)
	if !hasRow(lines[3], "ADDED", "api") || !hasRow(lines[4], "DELETED", "web", "0/5") {
		t.Errorf("an object added, another deleted:\n%s", strings.Join(lines, "\n"))
	}
	if code := w.stop(); code != 0 || strings.Contains(w.out.String(), "rs-1") || w.errb.String() != "" {
		t.Errorf("after Ctrl-C: exit %d, stderr %q, stdout:\n%s", code, w.errb.String(), w.out.String())
	}

	// -o json: a document per object, then per change; one object named.
	w = startWatching(t, e, "get", "deploy/api", "-w", "-o", "json")
	w.lines(t, 1)
	e.run(t, "", "scale", "deploy", "api", "--replicas", "2").mustSucceed(t)
	e.run(t, "", "scale", "deploy", "web", "--replicas", "2") // gone: changes nothing
	e.run(t, "", "apply", "-f", writeFile(t, dir, "web.yaml", webDeployment)).mustSucceed(t)
	e.run(t, "", "delete", "deploy/api").mustSucceed(t)
	var docs []map[string]any
	eventually(t, 15*time.Second, "three JSON documents", func() bool {
		docs = nil
		dec := json.NewDecoder(strings.NewReader(w.out.String()))
		for {
			var d map[string]any
			if err := dec.Decode(&d); err != nil {
				return err == io.EOF && len(docs) >= 3
			}
			docs = append(docs, d)
		}
	})
	w.stop()
	if len(docs) != 3 || field(docs[0], "spec", "replicas") != 3.0 || field(docs[1], "spec", "replicas") != 2.0 || field(docs[2], "metadata", "name") != "api" {
		t.Errorf("documents of deploy/api: %v", docs)
	}

	// Several kinds, every namespace, names only, changes only: not the
	// list (deployment/web, replicaset/rs-1), whose revision the watch
	// begins after. It prints nothing until a change, so rs-2 is written
	// until one is printed.
	w = startWatching(t, e, "get", "deploy,rs", "-A", "-w", "--watch-only", "-o", "name")
	eventually(t, 15*time.Second, "a change of rs-2 printed", func() bool {
		put("/registry/replicasets/team-a/rs-2", `{"kind":"ReplicaSet","metadata":{"name":"rs-2","namespace":"team-a"},"spec":{"replicas":1}}`)
		return strings.Contains(w.out.String(), "replicaset/rs-2\n")
	})
	e.run(t, "", "scale", "deploy/web", "--replicas", "4").mustSucceed(t)
	eventually(t, 15*time.Second, "the scale printed", func() bool { return strings.HasSuffix(w.out.String(), "deployment/web\n") })
	for _, line := range strings.Split(strings.TrimSuffix(w.out.String(), "deployment/web\n"), "\n") {
		if line != "replicaset/rs-2" && line != "" {
			t.Errorf("get deploy,rs -A -w --watch-only -o name printed %q:\n%s", line, w.out.String())
		}
	}
}

// TestGetWatchErrors: what get -w cannot watch is refused before it
// watches: an object that does not exist, a bad output format.
func TestGetWatchErrors(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"get", "deploy", "nope", "-w"}, 1, `deployments "nope" not found in namespace "default"`},
		{[]string{"get", "deploy", "-w", "-o", "xml"}, 2, `unknown output format "xml"`},
		{[]string{"get", "deploy/a", "pods", "-w"}, 2, `"pods" is not TYPE/NAME`},
		{[]string{"get", "deploy", "a/b"}, 2, `"a/b": give either TYPE NAME… or TYPE/NAME…, not both`},
		{[]string{"get", "deploy/a", "-A"}, 2, "a name needs a namespace, not -A"},
	} {
		r := e.run(t, "", tc.args...)
		if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("batonctl %q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.wantCode, tc.want)
		}
	}
}

// TestTypeSlashName: every command that takes a resource and a name takes
// TYPE/NAME too, as -o name prints it, several at once, of several kinds.
func TestTypeSlashName(t *testing.T) {
	qaddr, _ := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	dir := t.TempDir()
	e.run(t, "", "apply", "-f", writeFile(t, dir, "web.yaml", webDeployment)).mustSucceed(t)
	const pod = `{"kind":"Pod","metadata":{"name":"p1"},"spec":{"image":"x"}}`
	e.run(t, pod, "apply", "-f", "-").mustSucceed(t)

	names := e.run(t, "", "get", "deploy,pods", "-o", "name").mustSucceed(t).stdout
	if names != "deployment/web\npod/p1\n" {
		t.Fatalf("get -o name: %q", names)
	}
	args := append([]string{"get"}, strings.Fields(names)...)
	if got := e.run(t, "", args...).mustSucceed(t).stdout; !hasRow(got, "deployment/web", "0/3") || !hasRow(got, "pod/p1", "Pending") {
		t.Errorf("get of what -o name printed:\n%s", got)
	}
	if got := e.run(t, "", "get", "deploy/web").mustSucceed(t).stdout; !hasRow(got, "web", "0/3") {
		t.Errorf("get deploy/web:\n%s", got)
	}
	if obj := getJSON(t, e, "deployment/web"); field(obj, "metadata", "name") != "web" {
		t.Errorf("get deployment/web -o json is not the object: %v", obj)
	}
	if got := e.run(t, "", "describe", "po/p1").mustSucceed(t).stdout; !strings.Contains(got, "Name:         p1") || !strings.Contains(got, "Kind:         Pod") {
		t.Errorf("describe po/p1:\n%s", got)
	}
	r := e.run(t, "", "get", "deploy/web", "deploy/nope")
	if r.code != 1 || !hasRow(r.stdout, "web") || !strings.Contains(r.stderr, `deployments "nope" not found`) {
		t.Errorf("get of one that exists and one that does not: %+v", r)
	}
	if got := e.run(t, "", "delete", "deployment/web", "pod/p1").mustSucceed(t).stdout; got != "deployment/web deleted\npod/p1 deleted\n" {
		t.Errorf("delete TYPE/NAME…: %q", got)
	}
}
