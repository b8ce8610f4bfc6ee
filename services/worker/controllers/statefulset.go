package controllers

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
)

// StatefulSetController keeps pods with stable names <set>-0 … <set>-(n-1):
// it creates them in ordinal order, each only once the one before it is
// Running; removes them highest ordinal first on scale-down; and recreates a
// deleted pod under the same name.
type StatefulSetController struct{ d Deps }

// Reconcile converges one StatefulSet, key "namespace/name".
func (c *StatefulSetController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := parseKey(req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := c.d.Objects
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourceStatefulSets, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // its pods are the garbage collector's
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	set, err := objects.Decode[objects.StatefulSet](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	if set.Metadata.IsDeleting() {
		// Being deleted: its pods go with it (the garbage collector), and
		// pods made now would race that.
		return reconcile.Result{}, nil
	}
	pods, err := children[objects.Pod](ctx, st, childrenOptions{Resource: objects.ResourcePods, Namespace: ns,
		OwnerKind: objects.KindStatefulSet, OwnerName: name, OwnerKey: key, OwnerUID: set.Metadata.UID})
	if err != nil {
		return reconcile.Result{}, err
	}
	byOrdinal := map[int]objects.Item[objects.Pod]{}
	var extra []int
	want := objects.Or(set.Spec.Replicas, 1)
	for _, p := range pods {
		i, ok := ordinal(name, p.Object.Metadata.Name)
		if !ok {
			continue
		}
		byOrdinal[i] = p
		if i >= want {
			extra = append(extra, i)
		}
	}
	// Scale down, highest ordinal first.
	sort.Sort(sort.Reverse(sort.IntSlice(extra)))
	for _, i := range extra {
		// On the mod revision read: a pod of that name made since (by
		// another owner's controller) is not the one to remove.
		switch err := st.Delete(ctx, byOrdinal[i].Key, byOrdinal[i].ModRevision); {
		case err == nil:
			c.deleted(set, byOrdinal[i].Object.Metadata.Name)
		case !errors.Is(err, objects.ErrConflict):
			return reconcile.Result{}, err
		}
		delete(byOrdinal, i)
	}
	// Scale up (or replace), in order: stop at the first pod that is missing
	// (create it) or not yet Running (wait for its event).
	created := false
	for i := range want {
		p, ok := byOrdinal[i]
		if !ok {
			podName := name + "-" + strconv.Itoa(i)
			_, err := st.Create(ctx, objects.Key(objects.ResourcePods, ns, podName),
				newPod(&set.Metadata, objects.KindStatefulSet, podName, set.Spec.Template))
			if err != nil && !errors.Is(err, objects.ErrConflict) {
				if !errors.Is(err, context.Canceled) {
					c.d.Events.Event(set, events.Warning, ReasonFailedCreate, "create Pod %s in StatefulSet %s failed error: %v", podName, name, err)
				}
				return reconcile.Result{}, err
			}
			created = err == nil
			if created {
				c.d.Events.Event(set, events.Normal, ReasonSuccessfulCreate, "create Pod %s in StatefulSet %s successful", podName, name)
			}
			break
		}
		if !objects.Live(p.Object) {
			// A pod that ended is replaced under the same name: delete it
			// now, its deletion brings this set back to create it.
			switch err := st.Delete(ctx, p.Key, p.ModRevision); {
			case err == nil:
				c.deleted(set, p.Object.Metadata.Name)
			case !errors.Is(err, objects.ErrConflict):
				return reconcile.Result{}, err
			}
			delete(byOrdinal, i)
			break
		}
		if p.Object.Status.Phase != objects.PodRunning {
			break
		}
	}
	replicas, ready := 0, 0
	if created {
		replicas++
	}
	for _, p := range byOrdinal {
		replicas++
		if p.Object.Status.Phase == objects.PodRunning {
			ready++
		}
	}
	return reconcile.Result{}, st.UpdateStatusFrom(ctx, raw, set.Metadata.UID, objects.StatefulSetStatus{
		Replicas: replicas, ReadyReplicas: ready, ObservedGeneration: set.Metadata.Generation,
	})
}

// deleted records the deletion of set's pod.
func (c *StatefulSetController) deleted(set *objects.StatefulSet, pod string) {
	c.d.Events.Event(set, events.Normal, ReasonSuccessfulDelete, "delete Pod %s in StatefulSet %s successful", pod, set.Metadata.Name)
}

// ordinal parses <set>-<i>.
func ordinal(set, pod string) (int, bool) {
	s, ok := strings.CutPrefix(pod, set+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || strconv.Itoa(i) != s {
		return 0, false
	}
	return i, true
}
