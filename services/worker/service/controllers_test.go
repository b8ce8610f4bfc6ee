package service_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/objects"
)

const converge = 30 * time.Second

func tpl(image string, duration float64, exit int) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
		"spec":     map[string]any{"image": image, "durationSeconds": duration, "exitCode": exit},
	}
}

func TestReplicaSetEndToEnd(t *testing.T) {
	s := startStack(t)
	s.startWorker(s.workerConfig())
	rs := func(n int) map[string]any {
		return map[string]any{"kind": "ReplicaSet", "spec": map[string]any{"replicas": n, "template": tpl("nginx", 0, 0)}}
	}
	for _, n := range []int{0, 5, 2} {
		s.apply("replicasets", "web", rs(n))
		waitFor(t, converge, fmt.Sprintf("%d running pods and status", n), func() bool {
			r := get[objects.ReplicaSet](s, "replicasets", "web")
			pods := s.pods("ReplicaSet", "web")
			return len(pods) == n && running(pods) == n && r.Status.ReadyReplicas == n &&
				r.Status.ObservedGeneration == r.Metadata.Generation
		})
	}
	pods := s.pods("ReplicaSet", "web")
	for name := range pods {
		if len(name) != len("web-")+5 || !strings.HasPrefix(name, "web-") {
			t.Errorf("pod name %q is not web-<5 random>", name)
		}
	}
	var victim string
	for name := range pods {
		victim = name
	}
	s.del("pods", victim)
	waitFor(t, converge, "the deleted pod replaced", func() bool {
		pods := s.pods("ReplicaSet", "web")
		_, back := pods[victim]
		return len(pods) == 2 && running(pods) == 2 && !back
	})
	s.del("replicasets", "web")
	waitFor(t, converge, "the set's pods deleted", func() bool { return len(s.pods("ReplicaSet", "web")) == 0 })
}

// The exercise of "The Hidden Worker": an image change and a count change
// are two different decisions inside one controller's invariant.
func TestDeploymentEndToEnd(t *testing.T) {
	s := startStack(t)
	s.startWorker(s.workerConfig())
	const replicas, surge = 3, 1
	dep := func(image string, n int) map[string]any {
		return map[string]any{"kind": "Deployment", "spec": map[string]any{
			"replicas": n, "template": tpl(image, 0, 0),
			"strategy": map[string]any{"maxSurge": surge, "maxUnavailable": 0}}}
	}
	replicaSets := func() map[string]*objects.ReplicaSet {
		items, err := objects.List[objects.ReplicaSet](t.Context(), objects.NewClient(s.cli, nil), objects.Prefix("replicasets", "default"), objects.OwnedBy{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*objects.ReplicaSet{}
		for _, it := range items {
			out[it.Object.Metadata.Name] = it.Object
		}
		return out
	}
	settled := func(n, sets int) func() bool {
		return func() bool {
			d := get[objects.Deployment](s, "deployments", "web")
			return d != nil && d.Status.ObservedGeneration == d.Metadata.Generation && d.Status.ReadyReplicas == n &&
				d.Status.UpdatedReplicas == n && d.Status.Replicas == n && len(replicaSets()) == sets
		}
	}
	s.apply("deployments", "web", dep("nginx:1.27", replicas))
	waitFor(t, converge, "first rollout", settled(replicas, 1))
	var first string
	for name, rs := range replicaSets() {
		first = name
		if rs.Metadata.Labels[objects.LabelPodTemplateHash] == "" || name != "web-"+rs.Metadata.Labels[objects.LabelPodTemplateHash] {
			t.Errorf("replicaset %s, labels %v", name, rs.Metadata.Labels)
		}
	}

	watch := s.watchPods()
	s.apply("deployments", "web", dep("nginx:1.28", replicas))
	waitFor(t, converge, "image rollout", func() bool {
		sets := replicaSets()
		old := sets[first]
		return settled(replicas, 2)() && old != nil && objects.Or(old.Spec.Replicas, 1) == 0 && len(s.pods("ReplicaSet", first)) == 0
	})
	// Replay the pod events: never more than replicas+maxSurge live.
	live := watch.initialLive()
	maxLive := len(live)
	for _, ev := range watch.snapshot() {
		if ev.deleted || !objects.Live(ev.pod) {
			delete(live, ev.name)
		} else {
			live[ev.name] = true
		}
		maxLive = max(maxLive, len(live))
	}
	if maxLive > replicas+surge {
		t.Errorf("max live pods during the rollout = %d, want <= %d", maxLive, replicas+surge)
	}
	if maxLive < replicas {
		t.Errorf("max live pods = %d: the watch saw nothing", maxLive)
	}

	before := slices.Sorted(mapKeys(replicaSets()))
	s.apply("deployments", "web", dep("nginx:1.28", 5))
	waitFor(t, converge, "scale to 5", settled(5, 2))
	if after := slices.Sorted(mapKeys(replicaSets())); !slices.Equal(before, after) {
		t.Errorf("a count change made a replicaset: before %v, after %v", before, after)
	}

	s.del("deployments", "web")
	waitFor(t, converge, "deployment's replicasets and pods deleted", func() bool {
		return len(replicaSets()) == 0 && len(s.pods("", "")) == 0
	})
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestJobEndToEnd(t *testing.T) {
	s := startStack(t)
	s.startWorker(s.workerConfig())
	job := func(completions, parallelism, backoff, exit int) map[string]any {
		return map[string]any{"kind": "Job", "spec": map[string]any{
			"completions": completions, "parallelism": parallelism, "backoffLimit": backoff,
			"template": tpl("busybox", 0.3, exit)}}
	}
	watch := s.watchPods()
	s.apply("jobs", "ok", job(3, 2, 6, 0))
	s.apply("jobs", "bad", job(1, 1, 2, 1))
	waitFor(t, converge, "job ok Complete", func() bool {
		j := get[objects.Job](s, "jobs", "ok")
		return hasCond(j, objects.JobComplete) && j.Status.Succeeded == 3 && j.Status.Active == 0
	})
	waitFor(t, converge, "job bad Failed", func() bool {
		j := get[objects.Job](s, "jobs", "bad")
		return hasCond(j, objects.JobFailed) && j.Status.Failed == 3
	})
	// Never more than parallelism pods of "ok" running (or about to).
	active, maxActive := map[string]bool{}, 0
	for _, ev := range watch.snapshot() {
		if !strings.HasPrefix(ev.name, "ok-") {
			continue
		}
		if ev.deleted || !objects.Live(ev.pod) {
			delete(active, ev.name)
		} else {
			active[ev.name] = true
		}
		maxActive = max(maxActive, len(active))
	}
	if maxActive != 2 {
		t.Errorf("max active pods of job ok = %d, want 2", maxActive)
	}
	// Finished pods stay: 3 succeeded; 3 failed (backoffLimit 2, then Failed).
	if p := s.pods("Job", "ok"); len(p) != 3 || phases(p)[objects.PodSucceeded] != 3 {
		t.Errorf("job ok pods: %v", phases(p))
	}
	if p := s.pods("Job", "bad"); len(p) != 3 || phases(p)[objects.PodFailed] != 3 {
		t.Errorf("job bad pods: %v", phases(p))
	}
	s.del("jobs", "ok")
	waitFor(t, converge, "job ok's pods deleted", func() bool { return len(s.pods("Job", "ok")) == 0 })
}

func hasCond(j *objects.Job, typ string) bool {
	if j == nil {
		return false
	}
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == "True" {
			return true
		}
	}
	return false
}

func phases(pods map[string]*objects.Pod) map[string]int {
	m := map[string]int{}
	for _, p := range pods {
		m[p.Status.Phase]++
	}
	return m
}

func TestStatefulSetEndToEnd(t *testing.T) {
	s := startStack(t)
	s.startWorker(s.workerConfig())
	set := func(n int) map[string]any {
		return map[string]any{"kind": "StatefulSet", "spec": map[string]any{"replicas": n, "template": tpl("db", 0, 0)}}
	}
	names := func() string {
		var out []string
		for n := range s.pods("StatefulSet", "db") {
			out = append(out, n)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	ready := func(n int) func() bool {
		return func() bool {
			st := get[objects.StatefulSet](s, "statefulsets", "db")
			return st != nil && st.Status.ReadyReplicas == n && st.Status.Replicas == n && st.Status.ObservedGeneration == st.Metadata.Generation
		}
	}
	watch := s.watchPods()
	s.apply("statefulsets", "db", set(4))
	waitFor(t, converge, "4 ready", ready(4))
	if got := names(); got != "db-0 db-1 db-2 db-3" {
		t.Fatalf("pods %q", got)
	}
	// Ordered creation: db-i is created only after db-(i-1) is Running.
	phase := map[string]string{}
	for _, ev := range watch.snapshot() {
		if ev.deleted {
			continue
		}
		if _, seen := phase[ev.name]; !seen {
			var i int
			fmt.Sscanf(ev.name, "db-%d", &i)
			if prev := fmt.Sprintf("db-%d", i-1); i > 0 && phase[prev] != objects.PodRunning {
				t.Errorf("%s created while %s was %q", ev.name, prev, phase[prev])
			}
		}
		phase[ev.name] = ev.pod.Status.Phase
	}

	s.del("pods", "db-1")
	waitFor(t, converge, "db-1 back", func() bool {
		p := s.pods("StatefulSet", "db")["db-1"]
		return p != nil && p.Status.Phase == objects.PodRunning && ready(4)()
	})

	mark := len(watch.snapshot())
	s.apply("statefulsets", "db", set(1))
	waitFor(t, converge, "1 ready", ready(1))
	if got := names(); got != "db-0" {
		t.Fatalf("after scale-down: pods %q", got)
	}
	var deleted []string
	for _, ev := range watch.snapshot()[mark:] {
		if ev.deleted {
			deleted = append(deleted, ev.name)
		}
	}
	if got := strings.Join(deleted, " "); got != "db-3 db-2 db-1" {
		t.Errorf("scale-down deleted %q, want highest ordinal first: db-3 db-2 db-1", got)
	}
}

// The exercise of "The Dispatcher Who Tried to Do Everything": three rapid
// changes to one object before any worker is free are one reconcile.
func TestThreeRapidChangesOneReconcile(t *testing.T) {
	s := startStack(t)
	rec := newCalls()
	release := make(chan struct{})
	cfg := s.workerConfig()
	cfg.Controllers, cfg.Concurrency = "replicasets", 1
	cfg.Wrap = rec.wrap(func(ctx context.Context, queue, key string, next func(context.Context) error) error {
		if key == "default/busy" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return next(ctx)
	})
	s.startWorker(cfg)
	rs := func(label string) map[string]any {
		return map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{"labels": map[string]any{"v": label}},
			"spec": map[string]any{"replicas": 0, "template": tpl("nginx", 0, 0)}}
	}
	// web converges first (replicas 0: no pods, status written once).
	s.apply("replicasets", "web", rs("0"))
	waitFor(t, converge, "web settled", func() bool {
		r := get[objects.ReplicaSet](s, "replicasets", "web")
		return r.Status.ObservedGeneration == 1 && s.inspect("replicasets", "default/web").GetState() == queuev1.ItemState_ITEM_STATE_ABSENT
	})
	// Occupy the only worker.
	s.apply("replicasets", "busy", rs("0"))
	waitFor(t, converge, "the worker busy", func() bool { return rec.count("replicasets", "default/busy") == 1 })
	before := rec.count("replicasets", "default/web")

	for _, v := range []string{"1", "2", "3"} {
		s.apply("replicasets", "web", rs(v))
	}
	// Wait until the observer has seen the third change and handed every
	// key to the queue (its outbox may coalesce the three announcements
	// into one Add already; the queue collapses whatever arrives).
	head, err := s.cli.Get(t.Context(), "/registry/replicasets/default/web")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, converge, "the observer to announce the third change", func() bool {
		st, err := s.observer.Status(t.Context(), &observerv1.StatusRequest{})
		if err != nil || st.GetOutboxSize() != 0 {
			return false
		}
		for _, p := range st.GetPrefixes() {
			if p.GetPrefix() == "/registry/replicasets/" && p.GetObservedRevision() < head.Kvs[0].ModRevision {
				return false
			}
		}
		return s.inspect("replicasets", "default/web").GetState() == queuev1.ItemState_ITEM_STATE_PENDING
	})
	t.Logf("announcements of web while the worker was busy: %d", s.inspect("replicasets", "default/web").GetAnnouncements())
	close(release)
	waitFor(t, converge, "web reconciled and forgotten", func() bool {
		return rec.count("replicasets", "default/web") > before &&
			s.inspect("replicasets", "default/web").GetState() == queuev1.ItemState_ITEM_STATE_ABSENT
	})
	if got := rec.count("replicasets", "default/web") - before; got != 1 {
		t.Errorf("reconciles of web after three changes = %d, want 1", got)
	}
}
