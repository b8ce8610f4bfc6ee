// Package controllers holds Baton's reference controllers, one invariant
// each, as the design (docs/design.md) specifies them:
//
//   - replicasets: the live pods owned by a ReplicaSet number spec.replicas.
//   - deployments: the active ReplicaSet matches the pod template; a template
//     change rolls out a new ReplicaSet bounded by maxSurge/maxUnavailable, a
//     count change scales the active one.
//   - jobs: spec.completions pods have succeeded; failed pods are replaced up
//     to spec.backoffLimit.
//   - statefulsets: pods <set>-0 … <set>-(n-1), created in order (each
//     Running before the next) and removed highest ordinal first.
//   - pods: the pod runtime, standing in for a node agent: Pending → Running,
//     and job pods Succeeded or Failed after their simulated duration.
//   - garbagecollector: no object outlives its owners, for every kind, the
//     declared ones included: an object whose owner references name, by
//     uid, no live object is deleted, and a delete's propagation
//     (background, foreground, orphan) is carried out. It is one controller
//     for every kind, in a package of its own (services/worker/
//     garbagecollector); this package names it among the controllers.
//
// Every controller is level-based: it reads its object and its children
// through the observer's cache, at least at the revision of the change that
// announced its key (objects.AtLeast with the request's MinRevision) and of
// its own last write, compares desired with observed, acts, and writes
// status with observedGeneration only when the status changed. Writes are
// compare-and-swaps on etcd, so one made from a stale read is refused and
// retried from etcd. A reconcile that creates pods writes them and its
// status in one transaction (createPodsWithStatus).
//
// No controller deletes the children of an object that is gone: each
// child names its owner by uid, and the garbage collector deletes what no
// live owner holds, for every kind alike, as Kubernetes divides the work.
// Nor does a controller act on an object being deleted (its
// deletionTimestamp set): the collector is taking its children away, and
// new ones would race it.
//
// Deletes are the one decision a stale read could make wrong: a cache that
// lags may not show an owner that etcd has (deleted and created again under
// its name), or show the old one, and its children would be taken for
// orphans. So the collector looks an owner up in etcd itself before a
// reference to it counts as dangling, and deletes a dependent only as it
// read it. A controller that finds children naming another uid of its
// owner's name (an earlier owner's, the collector's to delete) first asks
// etcd whether its owner is the live one, and stops if not (errStale): its
// cache is behind. Otherwise no reconcile reads etcd.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
)

// GarbageCollectorName is the garbage collector's name among the
// controllers (--controllers), kube-controller-manager's, and its queue's:
// one queue for every kind, which the observer feeds (package
// garbagecollector).
const GarbageCollectorName = kinds.GarbageCollectorQueue

// Names lists every reference controller, in the order --controllers=all
// starts them. A controller is named like its queue, the queue of its
// declaration in client/kinds (BuiltinDeclarations); the garbage collector
// (GarbageCollectorName), last, declares nothing.
var Names = func() []string {
	var out []string
	for _, d := range kinds.BuiltinDeclarations() {
		out = append(out, d.Queue)
	}
	return append(out, GarbageCollectorName)
}()

// Declaration returns what the reference controller called name watches:
// its declaration among kinds.BuiltinDeclarations.
func Declaration(name string) (kinds.Declaration, error) {
	for _, d := range kinds.BuiltinDeclarations() {
		if d.Queue == name {
			return d, nil
		}
	}
	return kinds.Declaration{}, fmt.Errorf("controllers: unknown controller %q", name)
}

// Deps are what every controller needs.
type Deps struct {
	// Objects reads and writes the objects (etcd, through the
	// observer's cache).
	Objects *objects.Client
	// Log receives the controllers' decisions; nil discards.
	Log *slog.Logger
	// Now is the clock of the pod runtime; nil means time.Now.
	Now func() time.Time
	// Events records what the controllers do to their objects (events.go);
	// nil records nothing. New gives each controller its own component,
	// Component of its kind.
	Events *events.Recorder
}

// New returns the reference controller called name.
func New(name string, d Deps) (reconcile.Reconciler, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if name == GarbageCollectorName {
		return nil, errors.New("controllers: the garbage collector is package garbagecollector's (garbagecollector.New)")
	}
	decl, err := Declaration(name)
	if err != nil {
		return nil, err
	}
	d.Events = d.Events.WithComponent(Component(decl.For.Kind))
	switch decl.For.Kind {
	case kinds.ReplicaSet:
		return &ReplicaSetController{d}, nil
	case kinds.Deployment:
		return &DeploymentController{d}, nil
	case kinds.Job:
		return &JobController{d}, nil
	case kinds.StatefulSet:
		return &StatefulSetController{d}, nil
	case kinds.Pod:
		return &PodRuntime{d}, nil
	}
	return nil, fmt.Errorf("controllers: no reconciler for kind %s", decl.For.Kind)
}

// parseKey splits a queue key; a malformed key can never succeed, so it is a
// terminal error.
func parseKey(key string) (ns, name string, err error) {
	ns, name, err = objects.SplitKey(key)
	if err != nil {
		return "", "", reconcile.Terminal(err)
	}
	return ns, name, nil
}

// errStale says that the cache showed an owner that etcd has replaced by
// another of the same name: the reconcile stops before it acts on that
// view. The new owner's creation is announced once the cache has it.
var errStale = errors.New("the cache shows an owner etcd has replaced")

// childrenOptions says whose children children lists: an owner read from
// the cache, and the resource of its children.
type childrenOptions struct {
	// Resource is the children's (objects.ResourcePods, say).
	Resource string
	// Namespace is the owner's, and its children's.
	Namespace string
	// OwnerKind and OwnerName name the owner, as its children's
	// ownerReferences do.
	OwnerKind, OwnerName string
	// OwnerKey is the owner's etcd key, where etcd is asked whether the
	// owner read is the live one.
	OwnerKey string
	// OwnerUID is the uid of the owner read; empty, every child is
	// returned, whatever uid it names.
	OwnerUID string
}

// children lists the objects of o.Resource in o.Namespace that name
// o.OwnerKind/o.OwnerName with o.OwnerUID as owner, the owner read from the
// cache at o.OwnerKey. Children whose reference names another uid belong
// to an earlier owner of the same name (the garbage collector deletes
// them) and are left out; seeing them, children first makes sure in etcd
// that the owner at o.OwnerKey is the one with o.OwnerUID. If etcd has
// another, the cache is behind: it returns errStale, and the caller acts
// on nothing it read. With o.OwnerUID empty, every child is returned.
func children[T any](ctx context.Context, st *objects.Client, o childrenOptions) ([]objects.Item[T], error) {
	ns, kind, name, uid := o.Namespace, o.OwnerKind, o.OwnerName, o.OwnerUID
	items, err := objects.List[T](ctx, st, objects.Prefix(o.Resource, ns), objects.OwnedBy{Namespace: ns, Kind: kind, Name: name})
	if err != nil {
		return nil, err
	}
	if uid == "" {
		return items, nil
	}
	out := items[:0]
	leftovers := 0
	for _, it := range items {
		m := any(it.Object).(objects.Metaobject).Meta()
		if m.OwnedBy(kind, name, uid) {
			out = append(out, it)
		} else {
			leftovers++
		}
	}
	if leftovers == 0 {
		return out, nil
	}
	gone, err := st.OwnerGone(ctx, o.OwnerKey, uid)
	if err != nil {
		return nil, err
	}
	if gone {
		return nil, fmt.Errorf("%s %s/%s: %w", kind, ns, name, errStale)
	}
	return out, nil
}

// newPod builds a pod named name from an owner's template.
func newPod(owner *objects.ObjectMeta, kind, name string, t objects.PodTemplate) *objects.Pod {
	return &objects.Pod{
		Kind: objects.KindPod,
		Metadata: objects.ObjectMeta{
			Name: name, Namespace: owner.Namespace, Generation: 1,
			Labels:          maps.Clone(t.Metadata.Labels),
			OwnerReferences: []objects.OwnerReference{owner.Ref(kind)},
		},
		Spec:   t.Spec,
		Status: objects.PodStatus{Phase: objects.PodPending},
	}
}

// podsOptions says which pods createPods and createPodsWithStatus make.
type podsOptions struct {
	// Owner is the metadata of the pods' owner, and OwnerKind its kind:
	// each pod is named after it, in its namespace, and names it in its
	// ownerReferences.
	Owner     *objects.ObjectMeta
	OwnerKind string
	// Template is what each pod is made from.
	Template objects.PodTemplate
	// Count is how many pods to make.
	Count int
}

// createPods creates o.Count pods named <owner>-<5 random alphanumerics>,
// in one etcd transaction per 100 (one revision, one round trip), drawing
// fresh names for a transaction that found a name taken (it wrote
// nothing). It returns the names of the pods it created, those of a
// failed call too.
func createPods(ctx context.Context, st *objects.Client, o podsOptions) ([]string, error) {
	var created []string
	n := o.Count
	for n > 0 {
		batch := min(n, objects.MaxTxnOps)
		var err error
		for range 5 {
			keys, pods := newPods(o.Owner, o.OwnerKind, o.Template, batch)
			if err = st.CreateAll(ctx, keys, pods); err == nil {
				created = append(created, podNames(pods)...)
			}
			if !errors.Is(err, objects.ErrConflict) {
				break
			}
		}
		if err != nil {
			return created, err
		}
		n -= batch
	}
	return created, nil
}

// podNames returns the names of pods.
func podNames(pods []objects.Metaobject) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Meta().Name
	}
	return out
}

// newPods returns n new pods of owner, named <owner>-<5 random
// alphanumerics>, and their keys.
func newPods(owner *objects.ObjectMeta, kind string, t objects.PodTemplate, n int) ([]string, []objects.Metaobject) {
	keys := make([]string, n)
	pods := make([]objects.Metaobject, n)
	for i := range n {
		name := owner.Name + "-" + objects.RandomSuffix()
		keys[i] = objects.Key(objects.ResourcePods, owner.Namespace, name)
		pods[i] = newPod(owner, kind, name, t)
	}
	return keys, pods
}

// createPodsWithStatus creates the pods o says of the owner read as raw,
// as createPods does, and writes its status (with UpdateStatusFrom's
// rules) in the same etcd transaction when it can: a first reconcile then
// writes once, not twice. When the transaction is refused (a name taken,
// or the owner changed since raw was read) or o.Count is too many for
// one, it takes the two steps, which sort those out. It returns the names
// of the pods it created, those of a failed call too.
func createPodsWithStatus(ctx context.Context, st *objects.Client, o podsOptions, raw objects.Raw, status any) ([]string, error) {
	if o.Count < objects.MaxTxnOps { // the owner takes one operation too
		keys, pods := newPods(o.Owner, o.OwnerKind, o.Template, o.Count)
		err := st.CreateAllWithStatus(ctx, keys, pods, raw, o.Owner.UID, status)
		if err == nil {
			return podNames(pods), nil
		}
		if !errors.Is(err, objects.ErrConflict) {
			return nil, err
		}
	}
	created, err := createPods(ctx, st, o)
	if err != nil {
		return created, err
	}
	return created, st.UpdateStatusFrom(ctx, raw, o.Owner.UID, status)
}

// podCounts are the pods of one owner by phase.
type podCounts struct {
	live, ready, succeeded, failed int
}

func count(pods []objects.Item[objects.Pod]) podCounts {
	var c podCounts
	for _, p := range pods {
		switch p.Object.Status.Phase {
		case objects.PodSucceeded:
			c.succeeded++
		case objects.PodFailed:
			c.failed++
		case objects.PodRunning:
			c.live++
			c.ready++
		default:
			c.live++
		}
	}
	return c
}

// deletionOrder sorts live pods so that the cheapest to lose come first: not
// yet running before running, then the most recently changed first (as
// Kubernetes' ReplicaSet prefers unready and younger pods).
func deletionOrder(pods []objects.Item[objects.Pod]) {
	sort.SliceStable(pods, func(i, j int) bool {
		ri := pods[i].Object.Status.Phase == objects.PodRunning
		rj := pods[j].Object.Status.Phase == objects.PodRunning
		if ri != rj {
			return !ri
		}
		return pods[i].ModRevision > pods[j].ModRevision
	})
}

// livePods returns the pods that count as replicas.
func livePods(pods []objects.Item[objects.Pod]) []objects.Item[objects.Pod] {
	var out []objects.Item[objects.Pod]
	for _, p := range pods {
		if objects.Live(p.Object) {
			out = append(out, p)
		}
	}
	return out
}
