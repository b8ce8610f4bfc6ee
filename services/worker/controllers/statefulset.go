package controllers

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/batonrun/baton/services/worker/objects"
	"github.com/batonrun/baton/services/worker/reconcile"
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
	st := c.d.Store
	ctx = st.Scope(ctx, req.Key, req.MinRevision)
	key := objects.Key(objects.ResourceStatefulSets, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		_, err := deleteChildren(ctx, st, objects.ResourcePods, ns, objects.KindStatefulSet, name, key)
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	set, err := objects.Decode[objects.StatefulSet](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	pods, err := children[objects.Pod](ctx, st, objects.ResourcePods, ns, objects.KindStatefulSet, name, key, set.Metadata.UID)
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
		if err := st.Delete(ctx, byOrdinal[i].Key, byOrdinal[i].ModRevision); err != nil && !errors.Is(err, objects.ErrConflict) {
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
				return reconcile.Result{}, err
			}
			created = err == nil
			break
		}
		if !objects.Live(p.Object) {
			// A pod that ended is replaced under the same name: delete it
			// now, its deletion brings this set back to create it.
			if err := st.Delete(ctx, p.Key, p.ModRevision); err != nil && !errors.Is(err, objects.ErrConflict) {
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
