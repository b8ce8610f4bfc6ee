package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/batonctl/internal/manifest"
)

const webDeployment = `# the web tier
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: web}}
    spec: {image: "nginx:1.27"}
`

func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func getJSON(t *testing.T, e env, args ...string) map[string]any {
	t.Helper()
	r := e.run(t, "", append([]string{"get"}, append(args, "-o", "json")...)...).mustSucceed(t)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r.stdout)
	}
	return m
}

func field(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		cur = cur.(map[string]any)[p]
	}
	return cur
}

// TestObjects walks apply → get → a controller's status write → apply a
// change → describe → delete against a real etcd and queue.
func TestObjects(t *testing.T) {
	qaddr, _ := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	etcd := etcdClient(t, e.etcd)
	dir := t.TempDir()
	path := writeFile(t, dir, "web.yaml", webDeployment)

	if got := e.run(t, "", "apply", "-f", dir).mustSucceed(t).stdout; got != "deployment/web created\n" {
		t.Errorf("first apply: %q", got)
	}
	if got := e.run(t, "", "apply", "-f", path).mustSucceed(t).stdout; got != "deployment/web unchanged\n" {
		t.Errorf("second apply: %q", got)
	}
	obj := getJSON(t, e, "deploy", "web")
	uid, _ := field(obj, "metadata", "uid").(string)
	if len(uid) != 36 || field(obj, "metadata", "generation") != 1.0 || field(obj, "metadata", "namespace") != "default" {
		t.Errorf("stored metadata: %v", obj["metadata"])
	}
	table := e.run(t, "", "get", "deployments").mustSucceed(t).stdout
	if !hasRow(table, "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE") || !hasRow(table, "web", "0/3", "0", "0") {
		t.Errorf("table:\n%s", table)
	}

	// A controller reports status; the next apply must keep it.
	resp, err := etcd.Get(t.Context(), "/registry/deployments/default/web")
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	_ = json.Unmarshal(resp.Kvs[0].Value, &stored)
	stored["status"] = map[string]any{"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "observedGeneration": 1}
	b, _ := json.Marshal(stored)
	if _, err := etcd.Put(t.Context(), "/registry/deployments/default/web", string(b)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "web.yaml", strings.Replace(webDeployment, "replicas: 3", "replicas: 5", 1))
	if got := e.run(t, "", "apply", "-f", path).mustSucceed(t).stdout; got != "deployment/web configured\n" {
		t.Errorf("apply after edit: %q", got)
	}
	obj = getJSON(t, e, "deploy", "web")
	if field(obj, "metadata", "generation") != 2.0 || field(obj, "spec", "replicas") != 5.0 ||
		field(obj, "status", "readyReplicas") != 3.0 || field(obj, "metadata", "uid") != uid {
		t.Errorf("after edit: %v", obj)
	}
	if got := e.run(t, "", "get", "deploy").stdout; !hasRow(got, "web", "3/5", "3", "3") {
		t.Errorf("table after edit:\n%s", got)
	}

	// get -o yaml is a manifest apply accepts, and changes nothing.
	y := e.run(t, "", "get", "deploy", "web", "-o", "yaml").mustSucceed(t).stdout
	if got := e.run(t, y, "apply", "-f", "-").mustSucceed(t).stdout; got != "deployment/web unchanged\n" {
		t.Errorf("apply of get -o yaml: %q\n%s", got, y)
	}

	// Children are found by their ownerReferences; a same-named object of
	// another owner is not one.
	put := func(key, value string) {
		t.Helper()
		if _, err := etcd.Put(t.Context(), key, value); err != nil {
			t.Fatal(err)
		}
	}
	put("/registry/replicasets/default/web-5d9f8", `{"kind":"ReplicaSet","metadata":{"name":"web-5d9f8","namespace":"default",
		"ownerReferences":[{"kind":"Deployment","name":"web","uid":"`+uid+`"}]},"spec":{"replicas":5},"status":{"replicas":5,"readyReplicas":4}}`)
	put("/registry/pods/default/web-5d9f8-abcde", `{"kind":"Pod","metadata":{"name":"web-5d9f8-abcde","namespace":"default",
		"ownerReferences":[{"kind":"ReplicaSet","name":"web-5d9f8"}]},"spec":{"image":"nginx:1.27"},"status":{"phase":"Running"}}`)
	put("/registry/replicasets/default/other", `{"kind":"ReplicaSet","metadata":{"name":"other","namespace":"default",
		"ownerReferences":[{"kind":"Deployment","name":"web","uid":"someone-else"}]},"spec":{"replicas":1}}`)

	// The queue item: one failed attempt.
	q, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Add(t.Context(), "deployments", []string{"default/web"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	leases, err := q.Lease(t.Context(), "deployments", queueclient.LeaseOptions{Worker: "w1", Wait: 5 * time.Second})
	if err != nil || len(leases) != 1 {
		t.Fatalf("lease: %v %v", leases, err)
	}
	if _, err := q.Ack(t.Context(), "deployments", []queueclient.Ack{{Key: "default/web", Token: leases[0].Token, Outcome: queueclient.Failure("image pull: boom")}}); err != nil {
		t.Fatal(err)
	}
	d := e.run(t, "", "describe", "deploy", "web").mustSucceed(t).stdout
	for _, want := range []string{"Name:         web", "Kind:         Deployment", "UID:          " + uid, "Generation:   2",
		"Labels:       app=web", "  replicas: 5", "  readyReplicas: 3", "Queue item (queue deployments, key default/web):",
		"Attempts:     1", "Last error:   image pull: boom", "Children (replicasets):"} {
		if !strings.Contains(d, want) {
			t.Errorf("describe lacks %q:\n%s", want, d)
		}
	}
	if !strings.Contains(d, "Pods of those replicasets:") || !hasRow(d, "web-5d9f8-abcde", "Running", "nginx:1.27", "replicaset/web-5d9f8") {
		t.Errorf("describe lacks the pods of the ReplicaSets:\n%s", d)
	}
	if !hasRow(d, "web-5d9f8", "5", "5", "4") {
		t.Errorf("describe lacks the child's row:\n%s", d)
	}
	if strings.Contains(d, "other") {
		t.Errorf("describe lists another owner's child:\n%s", d)
	}

	all := e.run(t, "", "get", "all").mustSucceed(t).stdout
	for _, want := range []string{"deployment/web", "replicaset/web-5d9f8", "replicaset/other"} {
		if !strings.Contains(all, want) {
			t.Errorf("get all lacks %s:\n%s", want, all)
		}
	}
	if got := e.run(t, "", "get", "deploy,rs").stdout; !hasRow(got, "deployment/web") || !hasRow(got, "replicaset/other") || strings.Contains(got, "pod") {
		t.Errorf("get deploy,rs:\n%s", got)
	}
	if got := e.run(t, "", "get", "rs", "-A").stdout; !hasRow(got, "NAMESPACE", "NAME") || !hasRow(got, "default", "web-5d9f8") {
		t.Errorf("get -A:\n%s", got)
	}
	if got := e.run(t, "", "get", "rs", "-o", "name").stdout; got != "replicaset/other\nreplicaset/web-5d9f8\n" {
		t.Errorf("get -o name: %q", got)
	}
	if r := e.run(t, "", "get", "sts"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "No resources found in default namespace.") {
		t.Errorf("empty get: %+v", r)
	}

	if got := e.run(t, "", "delete", "deploy", "web").mustSucceed(t).stdout; got != "deployment/web deleted\n" {
		t.Errorf("delete: %q", got)
	}
	if r := e.run(t, "", "get", "deploy", "web"); r.code != 1 || !strings.Contains(r.stderr, `deployments "web" not found in namespace "default"`) {
		t.Errorf("get after delete: %+v", r)
	}
	e.run(t, "", "apply", "-f", dir, "-n", "team-a").mustSucceed(t)
	if got := e.run(t, "", "delete", "-f", dir, "-n", "team-a").mustSucceed(t).stdout; got != "deployment/web deleted\n" {
		t.Errorf("delete -f: %q", got)
	}
	// A manifest that carries a uid deletes only that object.
	e.run(t, "", "apply", "-f", dir).mustSucceed(t)
	stale := writeFile(t, t.TempDir(), "stale.yaml", strings.Replace(webDeployment, "  name: web\n", "  name: web\n  uid: 00000000-0000-4000-8000-000000000000\n", 1))
	if r := e.run(t, "", "delete", "-f", stale); r.code != 1 || !strings.Contains(r.stderr, "stale.yaml:2: deployment/web: not deleted: apply: metadata.uid does not match") {
		t.Errorf("delete -f with another uid: %+v", r)
	}
	// --cascade: a value of another name deletes nothing; orphan (with no
	// collector running here to finish it) marks the object, and a second
	// delete finds it being deleted.
	if r := e.run(t, "", "delete", "deploy", "web", "--cascade=sideways"); r.code != 2 || !strings.Contains(r.stderr, `--cascade must be background, foreground or orphan, not "sideways"`) {
		t.Errorf("delete --cascade=sideways: %+v", r)
	}
	if got := e.run(t, "", "delete", "deploy", "web", "--cascade=orphan").mustSucceed(t).stdout; got != "deployment/web marked for deletion\n" {
		t.Errorf("delete --cascade=orphan: %q", got)
	}
	marked := getJSON(t, e, "deploy", "web")
	if f := field(marked, "metadata", "finalizers"); fmt.Sprint(f) != "[orphan]" || field(marked, "metadata", "deletionTimestamp") == nil {
		t.Errorf("after delete --cascade=orphan: finalizers %v, deletionTimestamp %v", f, field(marked, "metadata", "deletionTimestamp"))
	}
	if got := e.run(t, "", "delete", "deploy", "web", "--cascade=foreground").mustSucceed(t).stdout; got != "deployment/web already being deleted\n" {
		t.Errorf("delete of an object being deleted: %q", got)
	}
	if _, err := etcd.Delete(t.Context(), "/registry/deployments/default/web"); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t, "", "delete", "deploy", "web", "--ignore-not-found"); r.code != 0 {
		t.Errorf("delete --ignore-not-found: %+v", r)
	}
}

// TestErrors: every failure names the file, line and field, or the
// endpoint, and exits non-zero.
func TestErrors(t *testing.T) {
	live := env{etcd: startEtcd(t)}
	dead := env{}
	dir := t.TempDir()
	good := writeFile(t, dir, "ok/good.yaml", webDeployment)
	tests := []struct {
		name     string
		e        env
		file     string // manifest written to bad.yaml and applied, if set
		args     []string
		wantCode int
		want     string
	}{
		{name: "yaml syntax", e: live, file: "kind: Pod\nmetadata:\n  name: a\n bad: [\n", wantCode: 1, want: "bad.yaml:3: did not find expected key"},
		{name: "unknown kind", e: live, file: "kind: Deploymnet\nmetadata: {name: a}\nspec: {}\n", wantCode: 1,
			want: `bad.yaml:1:7: kind: unknown kind "Deploymnet" (known: Deployment, `},
		{name: "missing name", e: live, file: "kind: Pod\nmetadata:\n  labels: {a: b}\nspec: {}\n", wantCode: 1, want: `bad.yaml:3:3: The Pod "" is invalid: metadata.name: Required value`},
		{name: "bad field type", e: live, file: strings.Replace(webDeployment, "replicas: 3", `replicas: "3"`, 1), wantCode: 1,
			want: `bad.yaml:7:13: The Deployment "web" is invalid: spec.replicas: Invalid value: "3": must be of type integer`},
		{name: "unknown field", e: live, file: strings.Replace(webDeployment, "image:", "imgae:", 1), wantCode: 1,
			want: `bad.yaml:10:12: The Deployment "web" is invalid: spec.template.spec.imgae: Unknown field: not in the schema of Deployment (known: durationSeconds, exitCode, image)`},
		{name: "json", e: live, file: `{"kind": "Pod",` + "\n" + `"metadata": {"name": "a"}, "spec": {"exitCode": "1"}}`, wantCode: 1,
			want: `bad.yaml:2:49: The Pod "a" is invalid: spec.exitCode: Invalid value: "1": must be of type integer`},
		{name: "missing file", e: live, args: []string{"apply", "-f", dir + "/nope.yaml"}, wantCode: 1, want: "nope.yaml: no such file or directory"},
		// Refused before etcd is dialed (dead: none is running).
		{name: "manifest over the limit", e: dead, file: webDeployment + strings.Repeat("#", manifest.MaxFileBytes-len(webDeployment)) + "\n", wantCode: 1,
			want: fmt.Sprintf("bad.yaml: larger than %d bytes (1.5 MiB), the most a manifest file may hold", manifest.MaxFileBytes)},
		{name: "apply without -f", e: live, args: []string{"apply"}, wantCode: 2, want: "usage: batonctl apply -f"},
		{name: "unreachable etcd", e: dead, args: []string{"apply", "-f", good}, wantCode: 1,
			want: "connection refused: is etcd running at http://127.0.0.1:1? (set --etcd-endpoints)"},
		{name: "unreachable etcd on get", e: dead, args: []string{"get", "pods"}, wantCode: 1, want: "connection refused: is etcd running at http://127.0.0.1:1?"},
		{name: "unreachable queue", e: live, args: []string{"queue", "stats"}, wantCode: 1,
			want: "connection refused: is the queue running at 127.0.0.1:1? (set --queue-addr)"},
		{name: "unreachable queue on watch", e: live, args: []string{"watch", "--once"}, wantCode: 1, want: "connection refused: is the queue running at 127.0.0.1:1?"},
		{name: "a member's address without a port", e: env{queue: deadAddr + ",queue-2"}, args: []string{"queue", "stats"}, wantCode: 2,
			want: `--queue-addr: "queue-2" is not host:port`},
		{name: "no member of a list listens", e: env{queue: deadAddr + ",127.0.0.1:2"}, args: []string{"queue", "members"}, wantCode: 1,
			want: "connection refused: is the queue running at 127.0.0.1:1,127.0.0.1:2? (set --queue-addr)"},
		{name: "no member of a list listens, status", e: env{queue: deadAddr + ",127.0.0.1:2"}, args: []string{"status", "--worker-http-addr", ""}, wantCode: 1,
			want: "not healthy: etcd, queue, observer"},
		{name: "unknown global flag", e: live, args: []string{"--bogus", "get", "pods"}, wantCode: 2, want: "flag provided but not defined: -bogus"},
		{name: "unknown resource", e: live, args: []string{"get", "foos"}, wantCode: 2, want: `unknown resource "foos"`},
		{name: "unknown command", e: live, args: []string{"frobnicate"}, wantCode: 2, want: `unknown command "frobnicate"`},
		{name: "unknown flag", e: live, args: []string{"get", "pods", "--bogus"}, wantCode: 2, want: "flag provided but not defined: -bogus"},
		{name: "bad output", e: live, args: []string{"get", "pods", "-o", "xml"}, wantCode: 2, want: `unknown output format "xml"`},
		{name: "not found", e: live, args: []string{"get", "deploy", "nope"}, wantCode: 1, want: `deployments "nope" not found in namespace "default"`},
		{name: "delete not found", e: live, args: []string{"delete", "pod", "nope"}, wantCode: 1, want: `pods "nope" not found`},
		{name: "describe not found", e: live, args: []string{"describe", "sts", "nope"}, wantCode: 1, want: `statefulsets "nope" not found`},
		{name: "bad queue state", e: live, args: []string{"queue", "list", "q", "--state", "sleeping"}, wantCode: 2, want: `unknown state "sleeping"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = []string{"apply", "-f", writeFile(t, t.TempDir(), "bad.yaml", tc.file)}
			}
			r := tc.e.run(t, "", args...)
			if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want %d; stderr:\n%s\nwant it to contain:\n%s", r.code, tc.wantCode, r.stderr, tc.want)
			}
			// Each error once, and nothing else (the flag package used to
			// print its own line and the usage beside batonctl's).
			if n := strings.Count(r.stderr, tc.want); n != 1 || strings.Contains(r.stderr, "Usage") {
				t.Errorf("stderr says it %d times, or with a usage dump:\n%s", n, r.stderr)
			}
		})
	}

	// One bad manifest in a folder stops the whole apply before any write.
	writeFile(t, dir, "ok/zz-bad.yaml", "kind: Pod\nmetadata: {name: x}\nspec: {image: 3}\n")
	if r := live.run(t, "", "apply", "-f", dir+"/ok"); r.code != 1 || !strings.Contains(r.stderr, `zz-bad.yaml:3:15: The Pod "x" is invalid: spec.image`) {
		t.Errorf("folder with a bad file: %+v", r)
	}
	if r := live.run(t, "", "get", "deploy", "web"); r.code != 1 {
		t.Errorf("a folder with a bad file was partly applied: %+v", r)
	}
}

// TestEnvironment: the global flags can come from BATON_BATONCTL_*, and a
// flag on the command line wins.
func TestEnvironment(t *testing.T) {
	etcd := startEtcd(t)
	env := map[string]string{"BATON_BATONCTL_ETCD_ENDPOINTS": etcd, "BATON_BATONCTL_TIMEOUT": "2s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	run := func(args ...string) (int, string) {
		var out, errb strings.Builder
		code := Main(t.Context(), args, IO{Stdout: &out, Stderr: &errb, Lookup: lookup})
		return code, errb.String()
	}
	if code, stderr := run("get", "pods"); code != 0 {
		t.Errorf("with env: exit %d: %s", code, stderr)
	}
	if code, stderr := run("--etcd-endpoints", "http://"+deadAddr, "get", "pods"); code != 1 || !strings.Contains(stderr, deadAddr) {
		t.Errorf("flag over env: exit %d: %s", code, stderr)
	}
}

func TestQueueCommands(t *testing.T) {
	qaddr, _ := startQueue(t)
	e := env{queue: qaddr}
	q, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := t.Context()
	if _, err := q.Add(ctx, "jobs", []string{"default/a", "default/b", "default/c"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	leases, err := q.Lease(ctx, "jobs", queueclient.LeaseOptions{Worker: "w1", MaxItems: 1, Wait: 5 * time.Second})
	if err != nil || len(leases) != 1 || leases[0].Key != "default/a" {
		t.Fatalf("lease: %v %v", leases, err)
	}
	if _, err := q.Ack(ctx, "jobs", []queueclient.Ack{{Key: "default/a", Token: leases[0].Token, Outcome: queueclient.RequeueAfter(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Lease(ctx, "jobs", queueclient.LeaseOptions{Worker: "w2", MaxItems: 1, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}

	stats := e.run(t, "", "queue", "stats").mustSucceed(t).stdout
	if !hasRow(stats, "QUEUE", "PENDING", "DELAYED", "LEASED") || !hasRow(stats, "jobs", "1", "1", "1") {
		t.Errorf("stats:\n%s", stats)
	}
	var sj struct {
		Queues []struct {
			Queue   string `json:"queue"`
			Pending string `json:"pending"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(e.run(t, "", "queue", "stats", "jobs", "-o", "json").mustSucceed(t).stdout), &sj); err != nil ||
		len(sj.Queues) != 1 || sj.Queues[0].Pending != "1" {
		t.Errorf("stats -o json: %+v %v", sj, err)
	}
	list := e.run(t, "", "queue", "list", "jobs").mustSucceed(t).stdout
	for _, want := range [][]string{{"default/a", "DELAYED", "0"}, {"default/b", "LEASED", "0", "false", "w2"}, {"default/c", "PENDING"}} {
		if !hasRow(list, want...) {
			t.Errorf("list lacks %q:\n%s", want, list)
		}
	}
	if got := e.run(t, "", "queue", "list", "jobs", "--state", "pending").mustSucceed(t).stdout; strings.Contains(got, "default/a") || !strings.Contains(got, "default/c") {
		t.Errorf("list --state pending:\n%s", got)
	}
	insp := e.run(t, "", "queue", "inspect", "jobs", "default/a").mustSucceed(t).stdout
	for _, want := range []string{"Key:          default/a", "State:        DELAYED", "Ready in:     59m"} {
		if !strings.Contains(insp, want) {
			t.Errorf("inspect lacks %q:\n%s", want, insp)
		}
	}
	if got := e.run(t, "", "queue", "forget", "jobs", "default/a", "default/zz").mustSucceed(t).stdout; got != "forgot 1 of 2 keys in queue jobs\n" {
		t.Errorf("forget: %q", got)
	}
	if got := e.run(t, "", "queue", "inspect", "jobs", "default/a").mustSucceed(t).stdout; !strings.Contains(got, "State:        ABSENT") {
		t.Errorf("inspect after forget:\n%s", got)
	}
	w := e.run(t, "", "watch", "--once").mustSucceed(t).stdout
	if !hasRow(w, "QUEUE", "DEPTH", "DELAYED") || !hasRow(w, "jobs", "1", "0", "1") {
		t.Errorf("watch --once:\n%s", w)
	}
}

// syncWriter lets the test read what a running command has written.
type syncWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	wrote chan struct{}
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestWatchStopsOnCancel: watch refreshes until Ctrl-C (the context), then
// exits 0 promptly.
func TestWatchStopsOnCancel(t *testing.T) {
	qaddr, _ := startQueue(t)
	q, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Add(t.Context(), "pods", []string{"default/p"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncWriter{wrote: make(chan struct{}, 1)}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, append(env{queue: qaddr}.globals(), "watch", "--interval", "50ms"), IO{Stdout: out, Stderr: io.Discard})
	}()
	eventually(t, 10*time.Second, "watch printed two samples", func() bool { return strings.Count(out.String(), "QUEUE") >= 2 })
	if !hasRow(out.String(), "pods", "1") {
		t.Errorf("watch output:\n%s", out.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("watch exit %d after cancel", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop within 5s of cancellation")
	}
}

// TestStatusReportsDownService: with etcd and the queue up and the observer
// down, status says which is which, names the dead endpoint, and fails.
func TestStatusReportsDownService(t *testing.T) {
	qaddr, qhttp := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	var r result
	eventually(t, 15*time.Second, "queue reported OK", func() bool {
		r = e.run(t, "", "status", "--queue-http-addr", qhttp, "--observer-http-addr", deadAddr, "--worker-http-addr", "")
		return hasRow(r.stdout, "queue", qaddr+",", "http://"+qhttp, "OK")
	})
	if r.code != 1 {
		t.Errorf("exit %d with the observer down", r.code)
	}
	for _, want := range [][]string{{"etcd", e.etcd, "OK", "v3.6.16,", "revision"}, {"observer", "127.0.0.1:1,", "http://127.0.0.1:1", "DOWN"}} {
		if !hasRow(r.stdout, want...) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "worker") {
		t.Errorf("status checked the worker though told not to:\n%s", r.stdout)
	}
}

// TestStatusWorkerDefault: a worker absent from the default address is
// reported as not probed, not as down (workers publish no port under
// compose); the same address given explicitly is a failure.
func TestStatusWorkerDefault(t *testing.T) {
	qaddr, qhttp := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	saved := defaultWorkerHTTP
	defaultWorkerHTTP = deadAddr
	t.Cleanup(func() { defaultWorkerHTTP = saved })
	var r result
	eventually(t, 15*time.Second, "queue reported OK", func() bool {
		r = e.run(t, "", "status", "--queue-http-addr", qhttp, "--observer-http-addr", deadAddr)
		return hasRow(r.stdout, "queue", qaddr+",", "http://"+qhttp, "OK")
	})
	if !hasRow(r.stdout, "worker", "http://"+deadAddr, "-", "not", "probed:") {
		t.Errorf("status with no worker at the default address:\n%s", r.stdout)
	}
	if r.code != 1 || strings.TrimSpace(r.stderr) != "error: not healthy: observer" {
		t.Errorf("exit %d, stderr %q: want 1 and only the observer named as not healthy", r.code, r.stderr)
	}
	r = e.run(t, "", "status", "--queue-http-addr", qhttp, "--observer-http-addr", deadAddr, "--worker-http-addr", deadAddr)
	if r.code != 1 || !hasRow(r.stdout, "worker", "http://"+deadAddr, "DOWN") {
		t.Errorf("status with --worker-http-addr of a dead address: exit %d\n%s", r.code, r.stdout)
	}
}

// TestStatusShowsWorkersTheQueueSaw: workers that publish no port (under
// compose) are still reported, from the queue's view: every worker that
// asked for keys lately, with what it holds.
func TestStatusShowsWorkersTheQueueSaw(t *testing.T) {
	qaddr, qhttp := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	saved := defaultWorkerHTTP
	defaultWorkerHTTP = deadAddr
	t.Cleanup(func() { defaultWorkerHTTP = saved })
	c, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	for _, q := range []string{"replicasets", "pods"} {
		if _, err := c.Add(ctx, q, []string{"default/web"}, queueclient.AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if ls, err := c.Lease(ctx, "replicasets", queueclient.LeaseOptions{Worker: "compose-worker-1"}); err != nil || len(ls) != 1 {
		t.Fatalf("lease: %v %v", ls, err)
	}
	if _, err := c.Lease(ctx, "pods", queueclient.LeaseOptions{Worker: "compose-worker-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lease(ctx, "pods", queueclient.LeaseOptions{Worker: "compose-worker-2", MaxItems: 0}); err != nil {
		t.Fatal(err)
	}
	var r result
	eventually(t, 15*time.Second, "queue reported OK", func() bool {
		r = e.run(t, "", "status", "--queue-http-addr", qhttp, "--observer-http-addr", deadAddr)
		return hasRow(r.stdout, "queue", qaddr+",", "http://"+qhttp, "OK")
	})
	for _, want := range [][]string{
		{"worker", "seen", "by", "the", "queue", "as", "compose-worker-1", "OK", "2", "leased;", "leases", "from", "pods,", "replicasets;"},
		{"worker", "seen", "by", "the", "queue", "as", "compose-worker-2", "OK", "0", "leased;", "leases", "from", "pods;"},
	} {
		if !hasRow(r.stdout, want...) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "not probed") {
		t.Errorf("status says no worker was probed though the queue saw two:\n%s", r.stdout)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"get", "-h"}} {
		r := runCtx(t, t.Context(), "", args...)
		if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "Usage") && !strings.Contains(r.stdout+r.stderr, "-o string") {
			t.Errorf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCtx(t, t.Context(), "", "help"); !strings.Contains(r.stdout, "batonctl controls a Baton stack") {
		t.Errorf("help prints to stdout: %+v", r)
	}
	if r := runCtx(t, t.Context(), ""); r.code != 2 || !strings.Contains(r.stderr, "Commands:") {
		t.Errorf("no command: %+v", r)
	}
}

// TestGlobalFlagsAfterTheCommand: global flags may follow the command, as
// kubectl's and etcdctl's do, in every spelling.
func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	etcd := startEtcd(t)
	for _, args := range [][]string{
		{"get", "pods", "--etcd-endpoints", etcd},
		{"get", "--etcd-endpoints=" + etcd, "pods"},
		{"get", "pods", "-etcd-endpoints", etcd, "-A"},
		{"--timeout", "3s", "get", "pods", "--etcd-endpoints", etcd},
	} {
		// The defaults point at nothing: only the hoisted flag can work.
		r := runCtx(t, t.Context(), "", append([]string{"--etcd-endpoints", "http://" + deadAddr}, args...)...)
		if r.code != 0 {
			t.Errorf("batonctl %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// TestRefusedAtOnce: when nothing listens at an address, batonctl says so
// at once instead of waiting out its timeout for "context deadline
// exceeded" (the timeout here is a minute; a refusal takes milliseconds).
func TestRefusedAtOnce(t *testing.T) {
	etcd := startEtcd(t)
	for _, args := range [][]string{
		{"--timeout", "1m", "--etcd-endpoints", "http://" + deadAddr, "get", "pods"},
		{"--timeout", "1m", "--queue-addr", deadAddr, "queue", "stats"},
		{"--timeout", "1m", "--queue-addr", deadAddr + ",127.0.0.1:2", "queue", "stats"},
		{"--timeout", "1m", "--etcd-endpoints", etcd, "--queue-addr", deadAddr, "watch", "--once"},
	} {
		start := time.Now()
		r := runCtx(t, t.Context(), "", args...)
		if r.code == 0 || !strings.Contains(r.stderr, "connection refused: is ") || time.Since(start) > 5*time.Second {
			t.Errorf("batonctl %v: exit %d after %v, stderr %q", args, r.code, time.Since(start), r.stderr)
		}
	}
}
