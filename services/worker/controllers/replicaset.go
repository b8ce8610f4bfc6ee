package controllers

import (
	"context"
	"errors"

	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
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
	st := c.d.Objects
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourceReplicaSets, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // its pods are the garbage collector's
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	rs, err := objects.Decode[objects.ReplicaSet](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	if rs.Metadata.IsDeleting() {
		// Being deleted: its pods go with it (the garbage collector), and
		// pods made now would race that.
		return reconcile.Result{}, nil
	}
	pods, err := children[objects.Pod](ctx, st, childrenOptions{Resource: objects.ResourcePods, Namespace: ns,
		OwnerKind: objects.KindReplicaSet, OwnerName: name, OwnerKey: key, OwnerUID: rs.Metadata.UID})
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
		created, err := createPodsWithStatus(ctx, st, podsOptions{Owner: &rs.Metadata, OwnerKind: objects.KindReplicaSet,
			Template: rs.Spec.Template, Count: want - len(live)}, raw, status(live))
		recordCreated(c.d.Events, rs, created)
		if err != nil {
			if len(created) < want-len(live) {
				recordFailedCreate(c.d.Events, rs, err)
			}
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
			c.d.Events.Event(rs, events.Normal, ReasonSuccessfulDelete, "Deleted pod: %s", p.Object.Metadata.Name)
		}
		live = live[n:]
		c.d.Log.Debug("deleted pods", "key", req.Key, "count", n)
	}
	return reconcile.Result{}, st.UpdateStatusFrom(ctx, raw, rs.Metadata.UID, status(live))
}
