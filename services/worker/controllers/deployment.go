package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"sort"
	"strconv"

	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
)

// AnnotationRevision orders a Deployment's ReplicaSets: the active one has
// the highest. It decides which old ones revisionHistoryLimit removes first.
const AnnotationRevision = "baton.run/revision"

// DeploymentController keeps a Deployment's active ReplicaSet,
// <deployment>-<template hash>, matching the pod template. A template change
// creates a new ReplicaSet and moves pods to it in a rolling update: never
// more than replicas+maxSurge pods (default maxSurge 1) and never fewer than
// replicas-maxUnavailable Running (default maxUnavailable 0). A change of
// replicas alone scales the active ReplicaSet. Old ReplicaSets stay, scaled
// to 0, up to revisionHistoryLimit (default 10) of them.
//
// Pod counts come from the pods themselves, not from ReplicaSet status, and
// a ReplicaSet counts as max(spec.replicas, live pods): a scaled-down
// ReplicaSet's pods count until they are really gone, so the surge bound
// holds even while the ReplicaSet controller is catching up.
type DeploymentController struct{ d Deps }

// rsState is one ReplicaSet of a Deployment with its pods counted.
type rsState struct {
	item     objects.Item[objects.ReplicaSet]
	rs       *objects.ReplicaSet
	spec     int
	live     int
	ready    int
	revision int
}

// size is what the ReplicaSet occupies towards the surge bound.
func (s *rsState) size() int { return max(s.spec, s.live) }

// rollout is what one reconcile of a Deployment observed: the Deployment,
// its strategy resolved against its replicas, and its ReplicaSets with
// their pods counted.
type rollout struct {
	d           *objects.Deployment
	raw         objects.Raw
	hash        string
	newName     string
	replicas    int
	surge       int
	unavailable int
	newRS       *rsState // nil until the current template has a ReplicaSet
	olds        []*rsState
	maxRev      int
}

// oldSize is what the old ReplicaSets occupy towards the surge bound.
func (r *rollout) oldSize() int {
	n := 0
	for _, o := range r.olds {
		n += o.size()
	}
	return n
}

// Reconcile converges one Deployment, key "namespace/name": observe, then
// bring the current template's ReplicaSet up, take the old ones down within
// the availability budget, prune the history, and report.
func (c *DeploymentController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := parseKey(req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	r, err := c.observe(c.d.Objects.Scope(ctx, req.Key, req.MinRevision), ns, name)
	if err != nil || r == nil {
		return reconcile.Result{}, err
	}
	if err := c.rollNew(ctx, r); err != nil {
		return reconcile.Result{}, err
	}
	if err := c.retireOld(ctx, r); err != nil {
		return reconcile.Result{}, err
	}
	if err := c.cleanup(ctx, r.d, r.olds); err != nil {
		return reconcile.Result{}, err
	}
	st := objects.DeploymentStatus{UpdatedReplicas: r.newRS.live, ObservedGeneration: r.d.Metadata.Generation}
	st.Replicas, st.ReadyReplicas = r.newRS.live, r.newRS.ready
	for _, o := range r.olds {
		st.Replicas += o.live
		st.ReadyReplicas += o.ready
	}
	return reconcile.Result{}, c.d.Objects.UpdateStatusFrom(ctx, r.raw, r.d.Metadata.UID, st)
}

// observe reads the Deployment, its ReplicaSets and their pods. For a
// Deployment gone or being deleted it returns nil: its ReplicaSets, and
// their pods, are the garbage collector's to delete.
func (c *DeploymentController) observe(ctx context.Context, ns, name string) (*rollout, error) {
	st := c.d.Objects
	key := objects.Key(objects.ResourceDeployments, ns, name)
	raw, err := st.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		return nil, nil // its ReplicaSets are the garbage collector's
	}
	if err != nil {
		return nil, err
	}
	d, err := objects.Decode[objects.Deployment](raw)
	if err != nil {
		return nil, reconcile.Terminal(err)
	}
	if d.Metadata.IsDeleting() {
		// Being deleted: its ReplicaSets go with it (the garbage
		// collector), and ReplicaSets made now would race that.
		return nil, nil
	}
	items, err := children[objects.ReplicaSet](ctx, st, childrenOptions{Resource: objects.ResourceReplicaSets, Namespace: ns,
		OwnerKind: objects.KindDeployment, OwnerName: name, OwnerKey: key, OwnerUID: d.Metadata.UID})
	if err != nil {
		return nil, err
	}
	hash, err := TemplateHash(d.Spec.Template)
	if err != nil {
		return nil, reconcile.Terminal(err)
	}
	r := &rollout{d: d, raw: raw, hash: hash, newName: name + "-" + hash, replicas: objects.Or(d.Spec.Replicas, 1)}
	r.surge = d.Spec.Strategy.MaxSurge.Resolve(r.replicas, 1, true)
	r.unavailable = d.Spec.Strategy.MaxUnavailable.Resolve(r.replicas, 0, false)
	if r.surge <= 0 && r.unavailable <= 0 {
		r.surge = 1 // both 0 could never make progress
	}
	pods, err := c.podsOf(ctx, ns, name, items)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		s := &rsState{item: it, rs: it.Object, spec: objects.Or(it.Object.Spec.Replicas, 1)}
		s.revision, _ = strconv.Atoi(it.Object.Metadata.Annotations[AnnotationRevision])
		r.maxRev = max(r.maxRev, s.revision)
		n := count(pods[it.Object.Metadata.UID])
		s.live, s.ready = n.live, n.ready
		if it.Object.Metadata.Name == r.newName {
			r.newRS = s
		} else {
			r.olds = append(r.olds, s)
		}
	}
	return r, nil
}

// podsOf returns the pods of the Deployment name's ReplicaSets rss, by
// ReplicaSet uid, from one read: a ReplicaSet <name>-<hash> names its pods
// <name>-<hash>-<suffix> (docs/design.md), so every one of them is under
// the key prefix of <name>-, whatever their number. (A list per
// ReplicaSet, as before, read the cache once per ReplicaSet in the
// history.) Other objects' pods whose names share the prefix are left
// out by their owner references.
func (c *DeploymentController) podsOf(ctx context.Context, ns, name string, rss []objects.Item[objects.ReplicaSet]) (map[string][]objects.Item[objects.Pod], error) {
	out := make(map[string][]objects.Item[objects.Pod], len(rss))
	if len(rss) == 0 {
		return out, nil
	}
	byName := make(map[string]string, len(rss)) // ReplicaSet name → uid
	for _, it := range rss {
		byName[it.Object.Metadata.Name] = it.Object.Metadata.UID
	}
	pods, err := objects.List[objects.Pod](ctx, c.d.Objects, objects.Prefix(objects.ResourcePods, ns)+name+"-", objects.OwnedBy{})
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		for _, o := range p.Object.Metadata.OwnerReferences {
			if uid, ok := byName[o.Name]; ok && o.Kind == objects.KindReplicaSet && (o.UID == "" || o.UID == uid) {
				out[uid] = append(out[uid], p)
				break
			}
		}
	}
	return out, nil
}

// rollNew creates the current template's ReplicaSet, or scales it towards
// replicas as far as the surge bound allows.
func (c *DeploymentController) rollNew(ctx context.Context, r *rollout) error {
	oldSize := r.oldSize()
	if r.newRS == nil {
		// First ReplicaSet of this template: full size if nothing else
		// runs, otherwise as much as the surge allows.
		size := r.replicas
		if oldSize > 0 {
			size = max(0, min(r.replicas, r.replicas+r.surge-oldSize))
		}
		rs, err := c.createRS(ctx, r.d, newRSOptions{Name: r.newName, TemplateHash: r.hash, Replicas: size, Revision: r.maxRev + 1})
		if err != nil {
			return err
		}
		r.newRS = &rsState{rs: rs, spec: size, revision: r.maxRev + 1}
		return nil
	}
	if r.newRS.revision < r.maxRev {
		// A rollback to an older template: it becomes the newest.
		if err := c.setRevision(ctx, r.newRS, r.maxRev+1); err != nil {
			return err
		}
	}
	target := r.newRS.spec
	switch {
	case oldSize == 0 || r.newRS.spec > r.replicas:
		target = r.replicas // a count change, or a finished rollout
	default:
		if room := r.replicas + r.surge - oldSize - r.newRS.size(); room > 0 {
			target = min(r.replicas, r.newRS.spec+room)
		}
	}
	if target == r.newRS.spec {
		return nil
	}
	return c.scale(ctx, r.d, r.newRS, target)
}

// retireOld scales the old ReplicaSets down, oldest first: their unready
// pods cost no availability; ready ones only as far as
// replicas-maxUnavailable stay Running.
func (c *DeploymentController) retireOld(ctx context.Context, r *rollout) error {
	ready := r.newRS.ready
	for _, o := range r.olds {
		ready += o.ready
	}
	budget := ready - (r.replicas - r.unavailable)
	sort.Slice(r.olds, func(i, j int) bool { return r.olds[i].revision < r.olds[j].revision })
	for _, o := range r.olds {
		if o.spec == 0 {
			continue
		}
		drop := max(0, o.spec-o.ready) // unready
		if budget > 0 {
			take := min(budget, o.spec-drop)
			drop += take
			budget -= take
		}
		if drop > 0 {
			if err := c.scale(ctx, r.d, o, o.spec-drop); err != nil {
				return err
			}
		}
	}
	return nil
}

// newRSOptions says what ReplicaSet createRS makes of a Deployment's
// current template.
type newRSOptions struct {
	// Name is the ReplicaSet's: <deployment>-<TemplateHash>.
	Name string
	// TemplateHash is the template's (TemplateHash), its pods'
	// pod-template-hash label.
	TemplateHash string
	// Replicas is its spec.replicas.
	Replicas int
	// Revision is its revision annotation (AnnotationRevision).
	Revision int
}

// createRS creates the ReplicaSet of d's current template.
func (c *DeploymentController) createRS(ctx context.Context, d *objects.Deployment, o newRSOptions) (*objects.ReplicaSet, error) {
	name, size := o.Name, o.Replicas
	tpl := d.Spec.Template
	tpl.Metadata.Labels = maps.Clone(tpl.Metadata.Labels)
	if tpl.Metadata.Labels == nil {
		tpl.Metadata.Labels = map[string]string{}
	}
	tpl.Metadata.Labels[objects.LabelPodTemplateHash] = o.TemplateHash
	rs := &objects.ReplicaSet{
		Kind: objects.KindReplicaSet,
		Metadata: objects.ObjectMeta{
			Name: name, Namespace: d.Metadata.Namespace, Generation: 1,
			Labels:          maps.Clone(tpl.Metadata.Labels),
			Annotations:     map[string]string{AnnotationRevision: strconv.Itoa(o.Revision)},
			OwnerReferences: []objects.OwnerReference{d.Metadata.Ref(objects.KindDeployment)},
		},
		Spec: objects.ReplicaSetSpec{Replicas: &size, Template: tpl},
	}
	_, err := c.d.Objects.Create(ctx, objects.Key(objects.ResourceReplicaSets, d.Metadata.Namespace, name), rs)
	if errors.Is(err, objects.ErrConflict) {
		// Created by an earlier attempt whose read was stale: the next
		// reconcile (its event) sees it.
		return rs, fmt.Errorf("create replicaset %s: %w", name, err)
	}
	if err == nil {
		c.scaled(d, name, 0, size)
	}
	return rs, err
}

// scale sets a ReplicaSet's spec.replicas (and bumps its generation).
func (c *DeploymentController) scale(ctx context.Context, d *objects.Deployment, s *rsState, n int) error {
	uid := s.rs.Metadata.UID
	from, changed := 0, false
	err := objects.ModifyFrom(ctx, c.d.Objects, s.item.Raw(), func(rs *objects.ReplicaSet) (bool, error) {
		from, changed = objects.Or(rs.Spec.Replicas, 1), false
		if rs.Metadata.UID != uid || from == n {
			return false, nil
		}
		rs.Spec.Replicas = &n
		rs.Metadata.Generation++
		changed = true
		return true, nil
	})
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	s.spec = n
	if err == nil && changed {
		c.scaled(d, s.rs.Metadata.Name, from, n)
	}
	return err
}

// scaled records that d's ReplicaSet rs went from replicas to n, as
// Kubernetes' deployment controller words it.
func (c *DeploymentController) scaled(d *objects.Deployment, rs string, from, n int) {
	dir := "up"
	if n < from {
		dir = "down"
	}
	c.d.Events.Event(d, events.Normal, ReasonScalingReplicaSet, "Scaled %s replica set %s from %d to %d", dir, rs, from, n)
}

// setRevision records that s is the newest ReplicaSet.
func (c *DeploymentController) setRevision(ctx context.Context, s *rsState, rev int) error {
	uid := s.rs.Metadata.UID
	err := objects.ModifyFrom(ctx, c.d.Objects, s.item.Raw(), func(rs *objects.ReplicaSet) (bool, error) {
		if rs.Metadata.UID != uid {
			return false, nil
		}
		if rs.Metadata.Annotations == nil {
			rs.Metadata.Annotations = map[string]string{}
		}
		rs.Metadata.Annotations[AnnotationRevision] = strconv.Itoa(rev)
		return true, nil
	})
	s.revision = rev
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	return err
}

// cleanup deletes the oldest fully scaled-down ReplicaSets beyond
// revisionHistoryLimit. olds is sorted by revision.
func (c *DeploymentController) cleanup(ctx context.Context, d *objects.Deployment, olds []*rsState) error {
	limit := objects.Or(d.Spec.RevisionHistoryLimit, 10)
	var idle []*rsState
	for _, o := range olds {
		if o.spec == 0 && o.live == 0 {
			idle = append(idle, o)
		}
	}
	for _, o := range idle[:max(0, len(idle)-limit)] {
		if err := c.d.Objects.Delete(ctx, o.item.Key, o.item.ModRevision); err != nil && !errors.Is(err, objects.ErrConflict) {
			return err
		}
	}
	return nil
}

// TemplateHash names a pod template: FNV-1a of its JSON encoding (map keys
// sorted), as 8 hex digits. Replicas, strategy and the rest of the spec are
// not part of it, so changing them never makes a new ReplicaSet.
func TemplateHash(t objects.PodTemplate) (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("hash template: %w", err)
	}
	h := fnv.New32a()
	h.Write(b)
	return fmt.Sprintf("%08x", h.Sum32()), nil
}
