package controllers

import (
	"context"
	"errors"

	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
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
	st := c.d.Objects
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourceJobs, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // its pods are the garbage collector's
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	job, err := objects.Decode[objects.Job](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	if job.Metadata.IsDeleting() {
		// Being deleted: its pods go with it (the garbage collector), and
		// pods made now would race that.
		return reconcile.Result{}, nil
	}
	pods, err := children[objects.Pod](ctx, st, childrenOptions{Resource: objects.ResourcePods, Namespace: ns,
		OwnerKind: objects.KindJob, OwnerName: name, OwnerKey: key, OwnerUID: job.Metadata.UID})
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
	// ended records how the Job ended, once the status saying so is
	// written.
	ended := func() {}
	if !finished {
		switch {
		case n.succeeded >= completions:
			conds = append(conds, objects.Condition{Type: objects.JobComplete, Status: "True"})
			finished = true
			ended = func() { c.d.Events.Event(job, events.Normal, ReasonCompleted, "Job completed") }
		case n.failed > backoffLimit:
			conds = append(conds, objects.Condition{Type: objects.JobFailed, Status: "True"})
			finished = true
			ended = func() {
				c.d.Events.Event(job, events.Warning, ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
			}
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
		created, err := createPodsWithStatus(ctx, st, podsOptions{Owner: &job.Metadata, OwnerKind: objects.KindJob,
			Template: job.Spec.Template, Count: want - len(live)}, raw, status)
		recordCreated(c.d.Events, job, created)
		if err != nil && len(created) < want-len(live) {
			recordFailedCreate(c.d.Events, job, err)
		}
		return reconcile.Result{}, err
	case len(live) > want:
		// A finished Job (or lowered parallelism) stops its extra pods.
		deletionOrder(live)
		for _, p := range live[:len(live)-want] {
			if err := st.Delete(ctx, p.Key, 0); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	if err := st.UpdateStatusFrom(ctx, raw, job.Metadata.UID, status); err != nil {
		return reconcile.Result{}, err
	}
	ended()
	return reconcile.Result{}, nil
}

func hasCondition(conds []objects.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ && c.Status == "True" {
			return true
		}
	}
	return false
}
