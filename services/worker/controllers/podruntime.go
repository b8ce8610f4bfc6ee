package controllers

import (
	"context"
	"errors"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
)

// PodRuntime stands in for a node agent: it starts pods (Pending → Running)
// and ends job pods after template.spec.durationSeconds, Succeeded when
// exitCode is 0 and Failed otherwise. Pods of other owners run until
// deleted. The duration is timed with Result.RequeueAfter, so no goroutine
// or timer outlives a reconcile.
type PodRuntime struct{ d Deps }

// Reconcile advances one pod, key "namespace/name".
func (c *PodRuntime) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := parseKey(req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := c.d.Objects
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourcePods, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // deleted: nothing runs
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	var requeue reconcile.Result
	err = objects.ModifyFrom(ctx, st, raw, func(p *objects.Pod) (bool, error) {
		requeue = reconcile.Result{}
		isJobPod := hasOwnerKind(&p.Metadata, objects.KindJob)
		now := c.d.Now()
		switch p.Status.Phase {
		case "", objects.PodPending:
			p.Status.Phase = objects.PodRunning
			p.Status.StartTime = &now
			p.Status.ObservedGeneration = p.Metadata.Generation
			if isJobPod {
				requeue.RequeueAfter = max(p.Spec.Duration(), 1)
			}
			return true, nil
		case objects.PodRunning:
			if !isJobPod {
				return false, nil
			}
			start := now
			if p.Status.StartTime != nil {
				start = *p.Status.StartTime
			}
			if left := start.Add(p.Spec.Duration()).Sub(now); left > 0 {
				requeue.RequeueAfter = left
				return false, nil
			}
			p.Status.Phase = objects.PodSucceeded
			if p.Spec.ExitCode != 0 {
				p.Status.Phase = objects.PodFailed
			}
			p.Status.ObservedGeneration = p.Metadata.Generation
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // deleted: nothing runs
	}
	return requeue, err
}

func hasOwnerKind(m *objects.ObjectMeta, kind string) bool {
	for _, o := range m.OwnerReferences {
		if o.Kind == kind {
			return true
		}
	}
	return false
}
