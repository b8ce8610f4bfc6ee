package controllers

import (
	"context"
	"errors"

	"github.com/batonrun/baton/services/worker/objects"
	"github.com/batonrun/baton/services/worker/reconcile"
)

// ReplicaSetController keeps the number of live pods owned by each
// ReplicaSet equal to spec.replicas (default 1).
type ReplicaSetController struct{ d Deps }

// Reconcile converges one ReplicaSet, key "namespace/name".
func (c *ReplicaSetController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := parseKey(req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := c.d.Store
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourceReplicaSets, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		n, err := deleteChildren(ctx, st, objects.ResourcePods, ns, objects.KindReplicaSet, name, key)
		if n > 0 {
			c.d.Log.Info("replicaset gone, deleted its pods", "key", req.Key, "pods", n)
		}
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	rs, err := objects.Decode[objects.ReplicaSet](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	pods, err := children[objects.Pod](ctx, st, objects.ResourcePods, ns, objects.KindReplicaSet, name, key, rs.Metadata.UID)
	if err != nil {
		return reconcile.Result{}, err
	}
	live := livePods(pods)
	want := objects.Or(rs.Spec.Replicas, 1)
	status := func(live []objects.Item[objects.Pod]) objects.ReplicaSetStatus {
		ready := 0
		for _, p := range live {
			if p.Object.Status.Phase == objects.PodRunning {
				ready++
			}
		}
		return objects.ReplicaSetStatus{Replicas: want, ReadyReplicas: ready, ObservedGeneration: rs.Metadata.Generation}
	}
	switch {
	case len(live) < want:
		// The new pods are not running yet: the status counts them in
		// replicas only, and goes in the same write as they do.
		if err := createPodsWithStatus(ctx, st, raw, &rs.Metadata, objects.KindReplicaSet, rs.Spec.Template, want-len(live), status(live)); err != nil {
			return reconcile.Result{}, err
		}
		c.d.Log.Debug("created pods", "key", req.Key, "count", want-len(live))
		return reconcile.Result{}, nil
	case len(live) > want:
		deletionOrder(live)
		n := len(live) - want
		for _, p := range live[:n] {
			if err := st.Delete(ctx, p.Key, 0); err != nil {
				return reconcile.Result{}, err
			}
		}
		live = live[n:]
		c.d.Log.Debug("deleted pods", "key", req.Key, "count", n)
	}
	return reconcile.Result{}, st.UpdateStatusFrom(ctx, raw, rs.Metadata.UID, status(live))
}
