package controllers

import (
	"context"
	"errors"

	"github.com/batonrun/baton/services/worker/objects"
	"github.com/batonrun/baton/services/worker/reconcile"
)

// JobController runs a Job's pods until spec.completions (default 1) of them
// have succeeded, at most spec.parallelism (default 1) at a time, replacing
// failed pods until more than spec.backoffLimit (default 6) have failed. It
// then sets the Complete or Failed condition. Finished pods stay until the
// Job is deleted.
type JobController struct{ d Deps }

// Reconcile converges one Job, key "namespace/name".
func (c *JobController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := parseKey(req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := c.d.Store
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourceJobs, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		_, err := deleteChildren(ctx, st, objects.ResourcePods, ns, objects.KindJob, name, key)
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	job, err := objects.Decode[objects.Job](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	pods, err := children[objects.Pod](ctx, st, objects.ResourcePods, ns, objects.KindJob, name, key, job.Metadata.UID)
	if err != nil {
		return reconcile.Result{}, err
	}
	n := count(pods)
	live := livePods(pods)
	completions := objects.Or(job.Spec.Completions, 1)
	parallelism := objects.Or(job.Spec.Parallelism, 1)
	backoffLimit := objects.Or(job.Spec.BackoffLimit, 6)

	conds := job.Status.Conditions
	finished := hasCondition(conds, objects.JobComplete) || hasCondition(conds, objects.JobFailed)
	if !finished {
		switch {
		case n.succeeded >= completions:
			conds = append(conds, objects.Condition{Type: objects.JobComplete, Status: "True"})
			finished = true
		case n.failed > backoffLimit:
			conds = append(conds, objects.Condition{Type: objects.JobFailed, Status: "True"})
			finished = true
		}
	}
	want := 0
	if !finished {
		want = min(parallelism, completions-n.succeeded)
	}
	status := objects.JobStatus{
		Active: want, Succeeded: n.succeeded, Failed: n.failed,
		Conditions: conds, ObservedGeneration: job.Metadata.Generation,
	}
	switch {
	case len(live) < want:
		// One write for the new pods and the status that counts them.
		return reconcile.Result{}, createPodsWithStatus(ctx, st, raw, &job.Metadata, objects.KindJob, job.Spec.Template, want-len(live), status)
	case len(live) > want:
		// A finished Job (or lowered parallelism) stops its extra pods.
		deletionOrder(live)
		for _, p := range live[:len(live)-want] {
			if err := st.Delete(ctx, p.Key, 0); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	return reconcile.Result{}, st.UpdateStatusFrom(ctx, raw, job.Metadata.UID, status)
}

func hasCondition(conds []objects.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ && c.Status == "True" {
			return true
		}
	}
	return false
}
