package controllers

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/services/worker/garbagecollector"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// world is a real embedded etcd with every reference controller and the
// garbage collector, driven by hand: pass reconciles every key of every
// resource (and every key ever seen, so deleted owners get cleaned up)
// until a whole pass writes nothing. It tests the controllers' decisions
// without queue or observer; the end-to-end tests in package service run
// them through both.
type world struct {
	t     *testing.T
	cli   *clientv3.Client
	st    *objects.Client
	ctrls map[string]reconcile.Reconciler
	gc    *garbagecollector.Collector

	mu   sync.Mutex
	now  time.Time
	seen map[string]map[string]bool // resource → keys
}

func newWorld(t *testing.T) *world {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	w := &world{t: t, cli: cli, st: objects.NewClient(cli, nil), ctrls: map[string]reconcile.Reconciler{},
		now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), seen: map[string]map[string]bool{}}
	for _, n := range Names {
		if n == GarbageCollectorName {
			continue
		}
		r, err := New(n, Deps{Objects: w.st, Now: w.clock})
		if err != nil {
			t.Fatal(err)
		}
		w.ctrls[n] = r
	}
	gc, err := garbagecollector.New(garbagecollector.Options{Objects: w.st})
	if err != nil {
		t.Fatal(err)
	}
	w.gc = gc
	return w
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
}

func (w *world) rev() int64 {
	resp, err := w.cli.Get(w.t.Context(), "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		w.t.Fatal(err)
	}
	return resp.Header.Revision
}

// pass reconciles every key once per controller, and then once by the
// garbage collector, every key of each kind it knows; it returns whether
// etcd changed.
func (w *world) pass() bool {
	w.t.Helper()
	before := w.rev()
	for _, res := range Names {
		if res == GarbageCollectorName {
			continue
		}
		for _, k := range w.keys(res) {
			if _, err := w.ctrls[res].Reconcile(w.t.Context(), reconcile.Request{Queue: res, Key: k}); err != nil {
				w.t.Fatalf("reconcile %s %s: %v", res, k, err)
			}
		}
	}
	for _, kind := range w.gc.Kinds() {
		for _, k := range w.keys(kind.Resource) {
			key := kinds.CollectorKey(kind, k)
			if _, err := w.gc.Reconcile(w.t.Context(), reconcile.Request{Queue: garbagecollector.Name, Key: key}); err != nil {
				w.t.Fatalf("reconcile %s %s: %v", garbagecollector.Name, key, err)
			}
		}
	}
	return w.rev() != before
}

// keys returns every key of resource there is or ever was, sorted.
func (w *world) keys(res string) []string {
	w.t.Helper()
	resp, err := w.cli.Get(w.t.Context(), "/registry/"+res+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		w.t.Fatal(err)
	}
	if w.seen[res] == nil {
		w.seen[res] = map[string]bool{}
	}
	for _, kv := range resp.Kvs {
		w.seen[res][strings.TrimPrefix(string(kv.Key), "/registry/"+res+"/")] = true
	}
	var keys []string
	for k := range w.seen[res] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// converge runs passes until nothing changes, calling check after each.
func (w *world) converge(check func()) {
	w.t.Helper()
	for i := 0; ; i++ {
		changed := w.pass()
		if check != nil {
			check()
		}
		if !changed {
			return
		}
		if i > 200 {
			w.t.Fatal("did not converge in 200 passes")
		}
	}
}

func (w *world) put(key string, obj any) {
	w.t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.cli.Put(w.t.Context(), key, string(b)); err != nil {
		w.t.Fatal(err)
	}
}

// apply writes an object as batonctl would: uid kept, generation bumped.
func (w *world) apply(resource, ns, name string, obj map[string]any) {
	w.t.Helper()
	key := objects.Key(resource, ns, name)
	meta := obj["metadata"].(map[string]any)
	meta["name"], meta["namespace"] = name, ns
	if raw, err := w.st.GetDirect(w.t.Context(), key); err == nil {
		var old struct {
			Metadata objects.ObjectMeta `json:"metadata"`
		}
		json.Unmarshal(raw.Value, &old)
		meta["uid"], meta["generation"] = old.Metadata.UID, old.Metadata.Generation+1
	} else {
		meta["uid"], meta["generation"] = objects.NewUID(), 1
	}
	w.put(key, obj)
}

func (w *world) del(key string) {
	w.t.Helper()
	if _, err := w.cli.Delete(w.t.Context(), key); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) pods(ownerKind, ownerName string) []*objects.Pod {
	w.t.Helper()
	items, err := objects.List[objects.Pod](w.t.Context(), w.st, objects.Prefix("pods", "default"), objects.OwnedBy{Namespace: "default", Kind: ownerKind, Name: ownerName})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []*objects.Pod
	for _, it := range items {
		out = append(out, it.Object)
	}
	return out
}

func get[T any](w *world, resource, name string) *T {
	w.t.Helper()
	v, _, err := objects.Get[T](w.t.Context(), w.st, objects.Key(resource, "default", name))
	if err != nil {
		w.t.Fatalf("get %s/%s: %v", resource, name, err)
	}
	return v
}

func template(image string, duration float64, exit int) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
		"spec":     map[string]any{"image": image, "durationSeconds": duration, "exitCode": exit},
	}
}

func phases(pods []*objects.Pod) map[string]int {
	m := map[string]int{}
	for _, p := range pods {
		m[p.Status.Phase]++
	}
	return m
}

func TestReplicaSet(t *testing.T) {
	w := newWorld(t)
	rs := func(n int) map[string]any {
		return map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{}, "spec": map[string]any{"replicas": n, "template": template("nginx", 0, 0)}}
	}
	for _, n := range []int{0, 5, 2} {
		w.apply("replicasets", "default", "web", rs(n))
		w.converge(nil)
		pods := w.pods("ReplicaSet", "web")
		if len(pods) != n || phases(pods)["Running"] != n {
			t.Fatalf("replicas %d: pods %v", n, phases(pods))
		}
		for _, p := range pods {
			if !strings.HasPrefix(p.Metadata.Name, "web-") || len(p.Metadata.Name) != len("web-")+5 || p.Spec.Image != "nginx" || p.Metadata.Labels["app"] != "x" ||
				p.Status.ObservedGeneration != p.Metadata.Generation || p.Metadata.UID == "" {
				t.Errorf("pod %+v", p.Metadata)
			}
		}
		got := get[objects.ReplicaSet](w, "replicasets", "web")
		if got.Status.Replicas != n || got.Status.ReadyReplicas != n || got.Status.ObservedGeneration != got.Metadata.Generation {
			t.Errorf("status %+v, generation %d", got.Status, got.Metadata.Generation)
		}
	}
	// A deleted pod is replaced.
	victim := w.pods("ReplicaSet", "web")[0].Metadata.Name
	w.del(objects.Key("pods", "default", victim))
	w.converge(nil)
	pods := w.pods("ReplicaSet", "web")
	if len(pods) != 2 {
		t.Fatalf("after deleting a pod: %d pods", len(pods))
	}
	for _, p := range pods {
		if p.Metadata.Name == victim {
			t.Errorf("deleted pod %s came back", victim)
		}
	}
	// Deleting the set deletes its pods.
	w.del(objects.Key("replicasets", "default", "web"))
	w.converge(nil)
	if pods := w.pods("ReplicaSet", "web"); len(pods) != 0 {
		t.Fatalf("after deleting the set: %d pods", len(pods))
	}
}

func TestDeployment(t *testing.T) {
	w := newWorld(t)
	dep := func(image string, n int) map[string]any {
		return map[string]any{"kind": "Deployment", "metadata": map[string]any{}, "spec": map[string]any{
			"replicas": n, "template": template(image, 0, 0), "strategy": map[string]any{"maxSurge": 1, "maxUnavailable": 0}}}
	}
	livePods := func() (n int) {
		resp, err := w.cli.Get(t.Context(), "/registry/pods/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			var p objects.Pod
			json.Unmarshal(kv.Value, &p)
			if objects.Live(&p) {
				n++
			}
		}
		return n
	}
	maxLive := 0
	track := func() { maxLive = max(maxLive, livePods()) }
	rsNames := func() []string {
		items, _ := objects.List[objects.ReplicaSet](t.Context(), w.st, objects.Prefix("replicasets", "default"), objects.OwnedBy{})
		var out []string
		for _, it := range items {
			out = append(out, fmt.Sprintf("%s=%d", it.Object.Metadata.Name, objects.Or(it.Object.Spec.Replicas, 1)))
		}
		return out
	}

	w.apply("deployments", "default", "web", dep("nginx:1.27", 3))
	w.converge(nil)
	first := rsNames()
	if len(first) != 1 || livePods() != 3 {
		t.Fatalf("initial: replicasets %v, live pods %d", first, livePods())
	}
	rs := get[objects.ReplicaSet](w, "replicasets", strings.Split(first[0], "=")[0])
	if h := rs.Metadata.Labels[objects.LabelPodTemplateHash]; h == "" || rs.Metadata.Name != "web-"+h {
		t.Errorf("replicaset %s labels %v", rs.Metadata.Name, rs.Metadata.Labels)
	}

	w.apply("deployments", "default", "web", dep("nginx:1.28", 3))
	w.converge(track)
	after := rsNames()
	if len(after) != 2 || maxLive > 4 || livePods() != 3 {
		t.Fatalf("after image change: replicasets %v, max live %d (want <= 4), live %d", after, maxLive, livePods())
	}
	for _, p := range w.pods("ReplicaSet", strings.Split(first[0], "=")[0]) {
		t.Errorf("old replicaset still has pod %s", p.Metadata.Name)
	}
	d := get[objects.Deployment](w, "deployments", "web")
	if d.Status.Replicas != 3 || d.Status.UpdatedReplicas != 3 || d.Status.ReadyReplicas != 3 || d.Status.ObservedGeneration != 2 {
		t.Errorf("deployment status %+v", d.Status)
	}

	w.apply("deployments", "default", "web", dep("nginx:1.28", 5))
	w.converge(nil)
	if got := rsNames(); len(got) != 2 || livePods() != 5 {
		t.Fatalf("after count change: replicasets %v (want no new one), live %d", got, livePods())
	}

	// Old ReplicaSets stay scaled to 0, at most revisionHistoryLimit of them.
	for _, image := range []string{"a", "b", "c"} {
		d := dep("nginx:"+image, 5)
		d["spec"].(map[string]any)["revisionHistoryLimit"] = 2
		w.apply("deployments", "default", "web", d)
		w.converge(nil)
	}
	if got := rsNames(); len(got) != 3 || livePods() != 5 {
		t.Fatalf("after three more rollouts with revisionHistoryLimit 2: replicasets %v (want the active one and 2 old), live %d", got, livePods())
	}
	active := "web-" + mustHash(t, template("nginx:c", 0, 0))
	for _, n := range rsNames() {
		name, replicas, _ := strings.Cut(n, "=")
		if (name == active) != (replicas == "5") {
			t.Errorf("replicaset %s: want only %s active", n, active)
		}
	}

	w.del(objects.Key("deployments", "default", "web"))
	w.converge(nil)
	if got := rsNames(); len(got) != 0 || livePods() != 0 {
		t.Fatalf("after delete: replicasets %v, live %d", got, livePods())
	}
}

// mustHash is the template hash of a template written as JSON.
func mustHash(t *testing.T, tpl map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(tpl)
	var pt objects.PodTemplate
	if err := json.Unmarshal(b, &pt); err != nil {
		t.Fatal(err)
	}
	h, err := TemplateHash(pt)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestJob(t *testing.T) {
	w := newWorld(t)
	job := func(completions, parallelism, backoff, exit int) map[string]any {
		return map[string]any{"kind": "Job", "metadata": map[string]any{}, "spec": map[string]any{
			"completions": completions, "parallelism": parallelism, "backoffLimit": backoff, "template": template("busybox", 2, exit)}}
	}
	w.apply("jobs", "default", "ok", job(3, 2, 6, 0))
	maxActive := 0
	for i := 0; i < 20; i++ {
		w.converge(func() {
			maxActive = max(maxActive, phases(w.pods("Job", "ok"))["Running"]+phases(w.pods("Job", "ok"))["Pending"])
		})
		w.advance(time.Second)
	}
	j := get[objects.Job](w, "jobs", "ok")
	if !hasCondition(j.Status.Conditions, objects.JobComplete) || j.Status.Succeeded != 3 || maxActive > 2 || maxActive < 2 {
		t.Fatalf("job status %+v, max active %d", j.Status, maxActive)
	}

	w.apply("jobs", "default", "bad", job(1, 1, 2, 1))
	for i := 0; i < 20; i++ {
		w.converge(nil)
		w.advance(time.Second)
	}
	j = get[objects.Job](w, "jobs", "bad")
	if !hasCondition(j.Status.Conditions, objects.JobFailed) || j.Status.Failed != 3 || phases(w.pods("Job", "bad"))["Failed"] != 3 {
		t.Fatalf("failing job status %+v", j.Status)
	}
}

func TestStatefulSet(t *testing.T) {
	w := newWorld(t)
	set := func(n int) map[string]any {
		return map[string]any{"kind": "StatefulSet", "metadata": map[string]any{}, "spec": map[string]any{"replicas": n, "template": template("db", 0, 0)}}
	}
	w.apply("statefulsets", "default", "db", set(3))
	// Ordered: pod i+1 exists only once pod i is Running.
	w.converge(func() {
		pods := map[string]*objects.Pod{}
		for _, p := range w.pods("StatefulSet", "db") {
			pods[p.Metadata.Name] = p
		}
		for i := 1; i < 3; i++ {
			prev := pods[fmt.Sprintf("db-%d", i-1)]
			if pods[fmt.Sprintf("db-%d", i)] != nil && (prev == nil || prev.Status.Phase != objects.PodRunning) {
				t.Fatalf("db-%d exists before db-%d is Running", i, i-1)
			}
		}
	})
	names := func() []string {
		var out []string
		for _, p := range w.pods("StatefulSet", "db") {
			out = append(out, p.Metadata.Name)
		}
		sort.Strings(out)
		return out
	}
	if got := fmt.Sprint(names()); got != "[db-0 db-1 db-2]" {
		t.Fatalf("pods %s", got)
	}
	w.del(objects.Key("pods", "default", "db-1"))
	w.converge(nil)
	if got := fmt.Sprint(names()); got != "[db-0 db-1 db-2]" {
		t.Fatalf("after deleting db-1: pods %s", got)
	}
	// A pod that ended is replaced under the same name.
	failed := get[objects.Pod](w, "pods", "db-0")
	failed.Status.Phase = objects.PodFailed
	w.put(objects.Key("pods", "default", "db-0"), failed)
	w.converge(nil)
	if p := get[objects.Pod](w, "pods", "db-0"); p.Status.Phase != objects.PodRunning || p.Metadata.UID == failed.Metadata.UID {
		t.Fatalf("failed db-0 not replaced: %+v %+v", p.Metadata, p.Status)
	}

	w.apply("statefulsets", "default", "db", set(1))
	w.converge(nil)
	if got := fmt.Sprint(names()); got != "[db-0]" {
		t.Fatalf("after scale-down: pods %s", got)
	}
	s := get[objects.StatefulSet](w, "statefulsets", "db")
	if s.Status.Replicas != 1 || s.Status.ReadyReplicas != 1 || s.Status.ObservedGeneration != 2 {
		t.Errorf("status %+v", s.Status)
	}
}
