package cli

import (
	"encoding/json"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestScale: scale writes spec.replicas with a new generation, keeps the
// status a controller wrote, takes both forms of naming, and refuses
// kinds it cannot scale, a failed --current-replicas and a missing
// --replicas without writing.
func TestScale(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	etcd := etcdClient(t, e.etcd)
	dir := t.TempDir()
	e.run(t, "", "apply", "-f", writeFile(t, dir, "web.yaml", webDeployment)).mustSucceed(t)
	const sts = `{"kind":"StatefulSet","metadata":{"name":"db"},"spec":{"replicas":1,"template":{"spec":{"image":"pg"}}}}`
	e.run(t, sts, "apply", "-f", "-").mustSucceed(t)
	setStatus(t, etcd, "/registry/deployments/default/web", map[string]any{"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "observedGeneration": 1})

	if got := e.run(t, "", "scale", "deploy/web", "--replicas", "5").mustSucceed(t).stdout; got != "deployment/web scaled\n" {
		t.Errorf("scale: %q", got)
	}
	obj := getJSON(t, e, "deploy", "web")
	if field(obj, "spec", "replicas") != 5.0 || field(obj, "metadata", "generation") != 2.0 || field(obj, "status", "readyReplicas") != 3.0 {
		t.Errorf("after scale: %v", obj)
	}
	if got := e.run(t, "", "scale", "statefulset", "db", "--replicas=3", "--current-replicas", "1").mustSucceed(t).stdout; got != "statefulset/db scaled\n" {
		t.Errorf("scale TYPE NAME: %q", got)
	}
	if obj := getJSON(t, e, "sts/db"); field(obj, "spec", "replicas") != 3.0 {
		t.Errorf("statefulset after scale: %v", obj)
	}

	rev := func() int64 {
		resp, err := etcd.Get(t.Context(), "/registry/deployments/default/web")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Kvs[0].ModRevision
	}
	before := rev()
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"scale", "deploy/web", "--replicas", "1", "--current-replicas", "3"}, 1, "deployment/web: not scaled: it has 5 replicas, not --current-replicas 3"},
		{[]string{"scale", "deploy/web"}, 2, "scale needs --replicas N"},
		{[]string{"scale", "deploy/web", "--replicas", "-2"}, 2, "scale needs --replicas N"},
		{[]string{"scale", "job/pi", "--replicas", "2"}, 2, "cannot scale jobs: scale takes deployments, replicasets and statefulsets"},
		{[]string{"scale", "deploy/nope", "--replicas", "2"}, 1, `deployments "nope" not found in namespace "default"`},
		{[]string{"scale", "deploy", "--replicas", "2"}, 2, "scale deploy needs the names of the objects to scale"},
	} {
		r := e.run(t, "", tc.args...)
		if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("batonctl %q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.wantCode, tc.want)
		}
	}
	if rev() != before {
		t.Error("a refused scale wrote the deployment")
	}
}

// setStatus writes an object's status as its controller would.
func setStatus(t *testing.T, etcd *clientv3.Client, key string, status map[string]any) {
	t.Helper()
	resp, err := etcd.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s: %v", key, err)
	}
	var o map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &o); err != nil {
		t.Fatal(err)
	}
	o["status"] = status
	b, _ := json.Marshal(o)
	if _, err := etcd.Put(t.Context(), key, string(b)); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutStatus: rollout status prints kubectl's line each time the
// rollout progresses and exits 0 once every replica is updated and ready
// and the controller has seen the latest generation; it exits 1 when its
// --timeout passes first (the global --timeout before the command is
// another flag), and -w=false prints the status once.
func TestRolloutStatus(t *testing.T) {
	e := env{etcd: startEtcd(t)}
	etcd := etcdClient(t, e.etcd)
	dir := t.TempDir()
	e.run(t, "", "apply", "-f", writeFile(t, dir, "web.yaml", webDeployment)).mustSucceed(t)
	const key = "/registry/deployments/default/web"

	if r := e.run(t, "", "--timeout", "3s", "rollout", "status", "deploy/web", "--timeout", "300ms"); r.code != 1 ||
		r.stdout != "Waiting for deployment spec update to be observed...\n" ||
		!strings.Contains(r.stderr, "deployment/web: timed out waiting for the rollout after 300ms: Waiting for deployment spec update to be observed") {
		t.Errorf("a rollout that does not finish in time: %+v", r)
	}
	if r := e.run(t, "", "rollout", "status", "deployment", "web", "-w=false").mustSucceed(t); r.stdout != "Waiting for deployment spec update to be observed...\n" {
		t.Errorf("-w=false: %q", r.stdout)
	}

	w := startWatching(t, e, "rollout", "status", "deploy/web", "--timeout", "1m")
	w.lines(t, 1)
	steps := []struct {
		status map[string]any
		line   string
	}{
		{map[string]any{"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1},
			`Waiting for deployment "web" rollout to finish: 1 out of 3 new replicas have been updated...`},
		{map[string]any{"observedGeneration": 1, "replicas": 4, "updatedReplicas": 3, "readyReplicas": 3},
			`Waiting for deployment "web" rollout to finish: 1 old replicas are pending termination...`},
		{map[string]any{"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2},
			`Waiting for deployment "web" rollout to finish: 2 of 3 updated replicas are ready...`},
		{map[string]any{"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3},
			`deployment "web" successfully rolled out`},
	}
	for i, s := range steps {
		setStatus(t, etcd, key, s.status)
		if lines := w.lines(t, i+2); lines[i+1] != s.line {
			t.Fatalf("step %d: %q, want %q\n%s", i, lines[i+1], s.line, w.out.String())
		}
	}
	if code := w.wait(); code != 0 {
		t.Errorf("rollout status once the rollout finished: exit %d, stderr %q", code, w.errb.String())
	}

	// Finished: it says so at once. A change of spec is a new rollout.
	if got := e.run(t, "", "rollout", "status", "deploy/web").mustSucceed(t).stdout; got != "deployment \"web\" successfully rolled out\n" {
		t.Errorf("a finished rollout: %q", got)
	}
	e.run(t, "", "scale", "deploy/web", "--replicas", "4").mustSucceed(t)
	if got := e.run(t, "", "rollout", "status", "deploy/web", "-w=false").stdout; got != "Waiting for deployment spec update to be observed...\n" {
		t.Errorf("after a scale: %q", got)
	}

	// Deleted while waited for.
	w = startWatching(t, e, "rollout", "status", "deploy/web")
	w.lines(t, 1)
	e.run(t, "", "delete", "deploy/web").mustSucceed(t)
	if code := w.wait(); code != 1 || !strings.Contains(w.errb.String(), "deployment/web was deleted before its rollout finished") {
		t.Errorf("deleted while waited for: exit %d, stderr %q", code, w.errb.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "status", "rs/web"}, "rollout status follows deployments, not replicasets"},
		{[]string{"rollout", "status", "deploy/a", "deploy/b"}, "rollout status follows one deployment"},
		{[]string{"rollout", "status"}, "usage: batonctl rollout status"},
	} {
		if r := e.run(t, "", tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("batonctl %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
