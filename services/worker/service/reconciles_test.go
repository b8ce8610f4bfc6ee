package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/sdk/objects"
)

// perQueue returns the reconciles recorded so far, by queue and key.
func (c *calls) perQueue() map[string]map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[string]int{}
	for id, n := range c.n {
		queue, key, _ := strings.Cut(id, " ")
		if out[queue] == nil {
			out[queue] = map[string]int{}
		}
		out[queue][key] = n
	}
	return out
}

// settled waits until the observer has handed on every change up to etcd's
// head and the queues hold nothing: every reconcile those changes cause
// has run.
func (s *stack) settled(t *testing.T) {
	t.Helper()
	waitFor(t, converge, "the stack to go idle", func() bool {
		h, err := s.cli.Get(context.Background(), "health")
		return err == nil && s.idle(t, h.Header.Revision)
	})
}

// TestReconcilesFromNothing: ReplicaSets converged from nothing
// cost at most 6 reconciles a set, its 3 pods included, because a
// controller's own status write does not bring its object back to it (the
// reference declarations ignore their own status changes): each pod is
// reconciled once (Pending → Running), each job pod twice (→ Running, then
// → Succeeded after its duration, timed by a requeue), and the sets, a Job
// and a Deployment's rollout still converge. Without ignoreOwnStatus each
// pod costs two reconciles and each job pod four.
func TestReconcilesFromNothing(t *testing.T) {
	s := startStack(t)
	rec := newCalls()
	cfg := s.workerConfig()
	cfg.LeaseDuration = 30 * time.Second // no expiry on a slow machine: every reconcile counted is one the changes caused
	cfg.Wrap = rec.wrap(nil)
	s.startWorker(cfg)

	const sets, replicas = 10, 3
	for i := range sets {
		s.apply("replicasets", fmt.Sprintf("rs%d", i), map[string]any{"kind": "ReplicaSet",
			"spec": map[string]any{"replicas": replicas, "template": tpl("nginx", 0, 0)}})
	}
	waitFor(t, converge, "the replicasets ready", func() bool {
		for i := range sets {
			r := get[objects.ReplicaSet](s, "replicasets", fmt.Sprintf("rs%d", i))
			if r == nil || r.Status.ReadyReplicas != replicas || r.Status.ObservedGeneration != r.Metadata.Generation {
				return false
			}
		}
		return true
	})
	s.settled(t)
	got := rec.perQueue()
	total := 0
	for i := range sets {
		name := fmt.Sprintf("rs%d", i)
		n := got["replicasets"]["default/"+name]
		pods := s.pods("ReplicaSet", name)
		for p := range pods {
			if c := got["pods"]["default/"+p]; c != 1 {
				t.Errorf("pod %s reconciled %d times, want 1 (Pending -> Running; its own status write is no news to it)", p, c)
			}
			n += got["pods"]["default/"+p]
		}
		t.Logf("%s: %d reconciles of the set, %d in all with its %d pods", name, got["replicasets"]["default/"+name], n, len(pods))
		total += n
	}
	// A set costs 3 reconciles of its pods and at most 5 of its own: its
	// creation, the event of the pods it created, one per pod that starts
	// (fewer when the queue collapses them). Were a controller's own
	// status writes announced back to it, a set would cost at least 9: 6
	// of its pods, and its own final status write coming back to it after
	// the reconciles that followed its creation.
	if per := float64(total) / sets; per > 8 {
		t.Errorf("%.1f reconciles per set of %d pods, want at most 8", per, replicas)
	} else {
		t.Logf("%.1f reconciles per set of %d pods", per, replicas)
	}

	job := map[string]any{"kind": "Job", "spec": map[string]any{"completions": 2, "parallelism": 1, "template": tpl("busybox", 0.2, 0)}}
	s.apply("jobs", "batch", job)
	waitFor(t, converge, "the job complete", func() bool {
		j := get[objects.Job](s, "jobs", "batch")
		return hasCond(j, objects.JobComplete) && j.Status.Succeeded == 2
	})
	s.settled(t)
	got = rec.perQueue()
	jobPods := s.pods("Job", "batch")
	if n := phases(jobPods)[objects.PodSucceeded]; n != 2 || len(jobPods) != 2 {
		t.Errorf("job pods %v, want 2 Succeeded", phases(jobPods))
	}
	for p := range jobPods {
		if c := got["pods"]["default/"+p]; c != 2 {
			t.Errorf("job pod %s reconciled %d times, want 2 (-> Running, then -> Succeeded by its requeue)", p, c)
		}
	}
	t.Logf("job: %d reconciles of the job", got["jobs"]["default/batch"])

	dep := func(image string) map[string]any {
		return map[string]any{"kind": "Deployment", "spec": map[string]any{"replicas": 2, "template": tpl(image, 0, 0),
			"strategy": map[string]any{"maxSurge": 1, "maxUnavailable": 0}}}
	}
	rolledOut := func() bool {
		d := get[objects.Deployment](s, "deployments", "web")
		return d != nil && d.Status.ObservedGeneration == d.Metadata.Generation &&
			d.Status.UpdatedReplicas == 2 && d.Status.ReadyReplicas == 2 && d.Status.Replicas == 2
	}
	s.apply("deployments", "web", dep("nginx:1.27"))
	waitFor(t, converge, "the deployment rolled out", rolledOut)
	s.settled(t)
	before := rec.perQueue()["deployments"]["default/web"]
	s.apply("deployments", "web", dep("nginx:1.28"))
	// Replicas counts the live pods of every ReplicaSet: 2 updated of 2
	// means the old ones are gone.
	waitFor(t, converge, "the new image rolled out", rolledOut)
	s.settled(t)
	t.Logf("deployment: %d reconciles for the first rollout, %d for the image change", before, rec.perQueue()["deployments"]["default/web"]-before)
}
