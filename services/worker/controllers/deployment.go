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

	"github.com/batonrun/baton/services/worker/objects"
	"github.com/batonrun/baton/services/worker/reconcile"
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

// Reconcile converges one Deployment, key "namespace/name".
func (c *DeploymentController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := parseKey(req.Key)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := c.d.Store
	key := objects.Key(objects.ResourceDeployments, ns, name)
	raw, err := st.GetDirect(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		// The ReplicaSet controller then deletes the pods of each.
		_, err := deleteChildren(ctx, st, objects.ResourceReplicaSets, ns, objects.KindDeployment, name)
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	d, err := objects.Decode[objects.Deployment](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	items, err := children[objects.ReplicaSet](ctx, st, objects.ResourceReplicaSets, ns, objects.KindDeployment, name, d.Metadata.UID)
	if err != nil {
		return reconcile.Result{}, err
	}
	hash, err := TemplateHash(d.Spec.Template)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	newName := name + "-" + hash
	replicas := objects.Or(d.Spec.Replicas, 1)
	surge := d.Spec.Strategy.MaxSurge.Resolve(replicas, 1, true)
	unavailable := d.Spec.Strategy.MaxUnavailable.Resolve(replicas, 0, false)
	if surge <= 0 && unavailable <= 0 {
		surge = 1 // both 0 could never make progress
	}

	var newRS *rsState
	var olds []*rsState
	maxRev := 0
	for _, it := range items {
		s := &rsState{item: it, rs: it.Object, spec: objects.Or(it.Object.Spec.Replicas, 1)}
		s.revision, _ = strconv.Atoi(it.Object.Metadata.Annotations[AnnotationRevision])
		maxRev = max(maxRev, s.revision)
		pods, err := objects.List[objects.Pod](ctx, st, objects.Prefix(objects.ResourcePods, ns),
			objects.OwnedBy{Namespace: ns, Kind: objects.KindReplicaSet, Name: it.Object.Metadata.Name})
		if err != nil {
			return reconcile.Result{}, err
		}
		n := count(pods)
		s.live, s.ready = n.live, n.ready
		if it.Object.Metadata.Name == newName {
			newRS = s
		} else {
			olds = append(olds, s)
		}
	}
	oldSize := 0
	for _, o := range olds {
		oldSize += o.size()
	}

	if newRS == nil {
		// First ReplicaSet of this template: full size if nothing else
		// runs, otherwise as much as the surge allows.
		size := replicas
		if oldSize > 0 {
			size = max(0, min(replicas, replicas+surge-oldSize))
		}
		rs, err := c.createRS(ctx, d, newName, hash, size, maxRev+1)
		if err != nil {
			return reconcile.Result{}, err
		}
		newRS = &rsState{rs: rs, spec: size, revision: maxRev + 1}
	} else {
		if newRS.revision < maxRev {
			// A rollback to an older template: it becomes the newest.
			if err := c.setRevision(ctx, newRS, maxRev+1); err != nil {
				return reconcile.Result{}, err
			}
		}
		target := newRS.spec
		switch {
		case oldSize == 0 || newRS.spec > replicas:
			target = replicas // a count change, or a finished rollout
		default:
			if room := replicas + surge - oldSize - newRS.size(); room > 0 {
				target = min(replicas, newRS.spec+room)
			}
		}
		if target != newRS.spec {
			if err := c.scale(ctx, newRS, target); err != nil {
				return reconcile.Result{}, err
			}
		}
	}

	// Scale old ReplicaSets down: their unready pods cost no availability;
	// ready ones only as far as replicas-maxUnavailable stay Running.
	ready := newRS.ready
	for _, o := range olds {
		ready += o.ready
	}
	budget := ready - (replicas - unavailable)
	sort.Slice(olds, func(i, j int) bool { return olds[i].revision < olds[j].revision })
	for _, o := range olds {
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
			if err := c.scale(ctx, o, o.spec-drop); err != nil {
				return reconcile.Result{}, err
			}
		}
	}

	if err := c.cleanup(ctx, d, olds); err != nil {
		return reconcile.Result{}, err
	}

	st2 := objects.DeploymentStatus{UpdatedReplicas: newRS.live, ObservedGeneration: d.Metadata.Generation}
	st2.Replicas, st2.ReadyReplicas = newRS.live, newRS.ready
	for _, o := range olds {
		st2.Replicas += o.live
		st2.ReadyReplicas += o.ready
	}
	return reconcile.Result{}, st.UpdateStatusFrom(ctx, raw, d.Metadata.UID, st2)
}

// createRS creates the ReplicaSet of the current template.
func (c *DeploymentController) createRS(ctx context.Context, d *objects.Deployment, name, hash string, size, revision int) (*objects.ReplicaSet, error) {
	tpl := d.Spec.Template
	tpl.Metadata.Labels = maps.Clone(tpl.Metadata.Labels)
	if tpl.Metadata.Labels == nil {
		tpl.Metadata.Labels = map[string]string{}
	}
	tpl.Metadata.Labels[objects.LabelPodTemplateHash] = hash
	rs := &objects.ReplicaSet{
		Kind: objects.KindReplicaSet,
		Metadata: objects.ObjectMeta{
			Name: name, Namespace: d.Metadata.Namespace, Generation: 1,
			Labels:          maps.Clone(tpl.Metadata.Labels),
			Annotations:     map[string]string{AnnotationRevision: strconv.Itoa(revision)},
			OwnerReferences: []objects.OwnerReference{d.Metadata.Ref(objects.KindDeployment)},
		},
		Spec: objects.ReplicaSetSpec{Replicas: &size, Template: tpl},
	}
	_, err := c.d.Store.Create(ctx, objects.Key(objects.ResourceReplicaSets, d.Metadata.Namespace, name), rs)
	if errors.Is(err, objects.ErrConflict) {
		// Created by an earlier attempt whose read was stale: the next
		// reconcile (its event) sees it.
		return rs, fmt.Errorf("create replicaset %s: %w", name, err)
	}
	return rs, err
}

// scale sets a ReplicaSet's spec.replicas (and bumps its generation).
func (c *DeploymentController) scale(ctx context.Context, s *rsState, n int) error {
	uid := s.rs.Metadata.UID
	err := objects.Modify(ctx, c.d.Store, s.item.Key, func(rs *objects.ReplicaSet) (bool, error) {
		if rs.Metadata.UID != uid || objects.Or(rs.Spec.Replicas, 1) == n {
			return false, nil
		}
		rs.Spec.Replicas = &n
		rs.Metadata.Generation++
		return true, nil
	})
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	s.spec = n
	return err
}

// setRevision records that s is the newest ReplicaSet.
func (c *DeploymentController) setRevision(ctx context.Context, s *rsState, rev int) error {
	uid := s.rs.Metadata.UID
	err := objects.Modify(ctx, c.d.Store, s.item.Key, func(rs *objects.ReplicaSet) (bool, error) {
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
		if err := c.d.Store.Delete(ctx, o.item.Key, o.item.ModRevision); err != nil && !errors.Is(err, objects.ErrConflict) {
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
