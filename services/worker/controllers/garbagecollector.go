package controllers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GarbageCollectorName is the garbage collector's name among the
// controllers (--controllers), kube-controller-manager's.
const GarbageCollectorName = "garbagecollector"

// foregroundRecheck is how soon an object deleted in the foreground is
// looked at again while dependents remain: the collector does not hear of
// a dependent's deletion under its owner's key (its declarations own
// nothing, so that a pod's every status change does not cost its owner a
// reconcile), so it polls, as long as the wait lasts.
const foregroundRecheck = time.Second

// maxBlocked bounds the keys the collector remembers as waiting for a kind
// it does not know (an owner reference to an undeclared kind), to look at
// them again at once when the kind is declared. Past it they wait for the
// queue's retry.
const maxBlocked = 10000

// errUnknownKind says that an object's owner references name a kind the
// collector does not know (no declaration names it yet): whether the owner
// lives cannot be told, so the object is left alone and looked at again.
var errUnknownKind = errors.New("an owner reference names a kind no declaration names yet")

// GarbageCollector keeps one invariant: no object outlives its owners. An
// object whose every owner reference is dangling (it names, by uid, no
// live object of that kind, name and namespace) is deleted, and a
// reference that dangles beside a live owner is taken out. It also carries
// out what a delete asked for: it deletes the dependents of an object
// being deleted in the foreground (foregroundDeletion), then takes its
// finalizer off, so the owner goes last; it takes an orphaned object's
// references out of its dependents (orphan), then the finalizer; and it
// removes objects being deleted whose finalizers are all gone.
//
// It runs one controller per kind, on the queue GarbageCollectorQueue, whose
// declaration is the kind alone (For, ignoring status-only changes): the
// collector hears of every object's creation, change and deletion. It
// knows the reference kinds from the start and learns every kind a
// declaration names while it runs (Learn). It keeps no scan of its own:
// the observer announces every object of a kind to a rule new on its
// prefix, so a kind's first collector looks at each of its objects once,
// and the queue keeps what was announced while no collector ran.
//
// A stale cache must never make it delete a live owner's dependents: an
// owner the cache does not show, or shows with another uid, is looked up
// in etcd before a reference to it counts as dangling, and every delete is
// conditional on the dependent's uid and on its mod revision as read.
type GarbageCollector struct {
	d Deps

	mu      sync.Mutex
	known   []kinds.Kind          // every kind it collects, in the order learned
	byKind  map[string]kinds.Kind // by Kind
	blocked map[gcKey]bool        // keys waiting for an undeclared kind
}

// gcKey names one object to the collector: its kind and queue key.
type gcKey struct {
	kind string
	key  string
}

// NewGarbageCollector returns a collector that knows the reference kinds.
func NewGarbageCollector(d Deps) *GarbageCollector {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	gc := &GarbageCollector{d: d, byKind: map[string]kinds.Kind{}, blocked: map[gcKey]bool{}}
	gc.learn(kinds.Builtin())
	return gc
}

// GarbageCollectorQueue is the queue of the collector's controller for
// kind k: garbagecollector-<resource> (kinds.GarbageCollectorQueuePrefix),
// or, for a resource too long for a queue name, its first letters and a
// hash of it.
func GarbageCollectorQueue(k kinds.Kind) string {
	q := kinds.GarbageCollectorQueuePrefix + k.Resource
	if limits.CheckQueueName(q) == nil {
		return q
	}
	h := fnv.New32a()
	h.Write([]byte(k.Resource))
	const hashLen = 1 + 8
	return fmt.Sprintf("%s-%08x", q[:limits.MaxQueueNameBytes-hashLen], h.Sum32())
}

// Kinds returns the kinds the collector knows, in the order it learned
// them (the reference kinds first).
func (gc *GarbageCollector) Kinds() []kinds.Kind {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return slices.Clone(gc.known)
}

// Declaration is what the collector's controller for k declares: k alone,
// its status-only changes ignored (an object's status says nothing of its
// owners, finalizers or deletion).
func (gc *GarbageCollector) Declaration(k kinds.Kind) kinds.Declaration {
	return kinds.Declaration{Queue: GarbageCollectorQueue(k), For: k, IgnoreOwnStatus: true}
}

// learn adds the kinds of ks it does not know (by kind name or resource)
// and returns them.
func (gc *GarbageCollector) learn(ks []kinds.Kind) []kinds.Kind {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	var added []kinds.Kind
	for _, k := range ks {
		if gc.knowsLocked(k) || k.Validate() != nil {
			continue
		}
		gc.known = append(gc.known, k)
		gc.byKind[k.Kind] = k
		added = append(added, k)
	}
	return added
}

// knowsLocked reports whether a kind of k's name or resource is known;
// gc.mu is held.
func (gc *GarbageCollector) knowsLocked(k kinds.Kind) bool {
	if _, ok := gc.byKind[k.Kind]; ok {
		return true
	}
	return slices.ContainsFunc(gc.known, func(o kinds.Kind) bool { return o.Resource == k.Resource })
}

// The pauses of Learn between failed reads of the declarations.
const (
	learnBackoffMin = 100 * time.Millisecond
	learnBackoffMax = 10 * time.Second
)

// Learn keeps the collector's kinds in step with the declarations in etcd
// (kinds.DeclarationPrefix) until ctx is done, and then returns nil. For
// each kind a declaration names (For or Owns) that the collector does not
// know, it calls add, which starts the kind's controller (its declaration
// is Declaration), and only once add succeeds counts the kind known: from
// then on references to it are judged, and objects that waited for it are
// looked at again at once. It lists the declarations and watches them from
// the list's revision; a failure (etcd unreachable, history compacted, add
// failing) makes it list again after a pause. A kind stays known when its
// declaration goes: its objects do not go with it.
func (gc *GarbageCollector) Learn(ctx context.Context, etcd *clientv3.Client, add func(kinds.Kind) error) error {
	pause := learnBackoffMin
	for {
		rev, err := gc.learnListed(ctx, etcd, add)
		if err == nil {
			pause = learnBackoffMin
			err = gc.learnWatched(ctx, etcd, rev, add)
		}
		if ctx.Err() != nil {
			return nil
		}
		gc.d.Log.Warn("garbage collector: following the declarations failed; reading them again", "err", err, "pause", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, learnBackoffMax)
	}
}

// learnListed learns the kinds of every declaration in etcd and returns
// the revision it read them at.
func (gc *GarbageCollector) learnListed(ctx context.Context, etcd *clientv3.Client, add func(kinds.Kind) error) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, objects.DefaultOpTimeout)
	resp, err := etcd.Get(lctx, kinds.DeclarationPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list the declarations: %w", err)
	}
	var ks []kinds.Kind
	for _, kv := range resp.Kvs {
		ks = append(ks, declaredKinds(kv.Key, kv.Value)...)
	}
	return resp.Header.Revision, gc.adopt(ctx, ks, add)
}

// learnWatched learns the kinds of every declaration written after rev,
// until the watch fails or ctx is done.
func (gc *GarbageCollector) learnWatched(ctx context.Context, etcd *clientv3.Client, rev int64, add func(kinds.Kind) error) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range etcd.Watch(wctx, kinds.DeclarationPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch the declarations: %w", err)
		}
		var ks []kinds.Kind
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				ks = append(ks, declaredKinds(ev.Kv.Key, ev.Kv.Value)...)
			}
		}
		if err := gc.adopt(ctx, ks, add); err != nil {
			return err
		}
	}
	return errors.New("the watch of the declarations ended")
}

// declaredKinds are the kinds the declaration stored at key names: none
// when it does not parse or is not at its own key (the observer ignores
// it then too).
func declaredKinds(key, value []byte) []kinds.Kind {
	d, err := kinds.Parse(value)
	if err != nil || d.Key() != string(key) {
		return nil
	}
	return append([]kinds.Kind{d.For}, d.Owns...)
}

// adopt starts a controller (add) for each kind of ks the collector does
// not know, then knows it; once any is known it looks again at the
// objects that waited for a kind.
func (gc *GarbageCollector) adopt(ctx context.Context, ks []kinds.Kind, add func(kinds.Kind) error) error {
	added := 0
	for _, k := range ks {
		gc.mu.Lock()
		known := gc.knowsLocked(k)
		gc.mu.Unlock()
		if known || k.Validate() != nil {
			continue
		}
		if err := add(k); err != nil {
			return fmt.Errorf("start the collector of kind %s: %w", k.Kind, err)
		}
		if len(gc.learn([]kinds.Kind{k})) > 0 {
			added++
			gc.d.Log.Info("garbage collector: collecting a declared kind", "kind", k.Kind, "queue", GarbageCollectorQueue(k))
		}
	}
	if added > 0 {
		gc.unblock(ctx)
	}
	return nil
}

func (gc *GarbageCollector) kind(name string) (kinds.Kind, bool) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	k, ok := gc.byKind[name]
	return k, ok
}

// Reconciler returns the collector's reconciler of kind k's queue, whose
// keys are namespace/name.
func (gc *GarbageCollector) Reconciler(k kinds.Kind) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		ns, name, err := parseKey(req.Key)
		if err != nil {
			return reconcile.Result{}, err
		}
		ctx = gc.d.Objects.Scope(ctx, req.Queue+" "+req.Key, req.MinRevision)
		res, err := gc.collect(ctx, k, ns, name)
		if errors.Is(err, errUnknownKind) {
			gc.block(gcKey{k.Kind, req.Key})
		}
		return res, err
	})
}

// block remembers key as waiting for a kind to be declared.
func (gc *GarbageCollector) block(key gcKey) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if len(gc.blocked) < maxBlocked {
		gc.blocked[key] = true
	}
}

// unblock looks again at every key that waited for a kind, now that a
// kind was declared.
func (gc *GarbageCollector) unblock(ctx context.Context) {
	gc.mu.Lock()
	keys := make([]gcKey, 0, len(gc.blocked))
	for k := range gc.blocked {
		keys = append(keys, k)
	}
	clear(gc.blocked)
	gc.mu.Unlock()
	for _, key := range keys {
		k, ok := gc.kind(key.kind)
		ns, name, err := objects.SplitKey(key.key)
		if !ok || err != nil {
			continue
		}
		_, err = gc.collect(gc.d.Objects.Scope(ctx, GarbageCollectorQueue(k)+" "+key.key, 0), k, ns, name)
		switch {
		case errors.Is(err, errUnknownKind):
			gc.block(key)
		case err != nil && ctx.Err() == nil:
			gc.d.Log.Info("garbage collector: looking again at an object that waited for a kind failed; its queue retries it", "kind", key.kind, "key", key.key, "err", err)
		}
	}
}

// collect brings the object of kind k at ns/name in line with the
// invariant: its dependents if it is gone, what its deletion asks for if
// it is being deleted, and itself if its owners are gone.
func (gc *GarbageCollector) collect(ctx context.Context, k kinds.Kind, ns, name string) (reconcile.Result, error) {
	raw, err := gc.d.Objects.Get(ctx, k.Key(ns, name))
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, gc.ownerGone(ctx, newResolver(gc), k, ns, name)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return gc.collectRaw(ctx, k, raw)
}

// collectRaw is collect of an object read as raw.
func (gc *GarbageCollector) collectRaw(ctx context.Context, k kinds.Kind, raw objects.Raw) (reconcile.Result, error) {
	m, err := decodeMeta(raw)
	if err != nil {
		return reconcile.Result{}, nil // not an object: it owns nothing and names no owner
	}
	obj := item{kind: k, raw: raw, meta: m}
	r := newResolver(gc)
	if m.IsDeleting() {
		return gc.finish(ctx, r, obj)
	}
	return reconcile.Result{}, gc.attemptToDelete(ctx, r, obj)
}

// item is one object the collector looks at: its kind, as read, and its
// metadata.
type item struct {
	kind kinds.Kind
	raw  objects.Raw
	meta objects.ObjectMeta
}

func (it item) String() string {
	return it.kind.Singular() + " " + it.meta.Namespace + "/" + it.meta.Name
}

func decodeMeta(raw objects.Raw) (objects.ObjectMeta, error) {
	o, err := objects.Decode[metaOnly](raw)
	if err != nil {
		return objects.ObjectMeta{}, err
	}
	return o.Metadata, nil
}

// metaOnly is an object as the collector changes it: its metadata, the
// rest kept as stored (objects.ModifyFrom).
type metaOnly struct {
	Metadata objects.ObjectMeta `json:"metadata"`
}

// Meta makes it an objects.Metaobject, so that its changes are checked.
func (o *metaOnly) Meta() *objects.ObjectMeta { return &o.Metadata }

// The state of an object's owner, as a reference names it.
type ownerState int

const (
	// solid: the owner lives (being deleted or not, unless in the
	// foreground).
	solid ownerState = iota
	// waiting: the owner is being deleted in the foreground and waits for
	// its dependents to go.
	waiting
	// dangling: no object of that kind, name, namespace and uid lives.
	dangling
	// unknownKind: no declaration names the reference's kind yet.
	unknownKind
)

// resolver finds owners, each at most once through the cache and once in
// etcd within one look at an object and its dependents.
type resolver struct {
	gc   *GarbageCollector
	seen map[string]*owner // by etcd key
}

// owner is what the resolver found at an owner's key: through the cache,
// and, once asked, in etcd.
type owner struct {
	cached, live   *objects.ObjectMeta // nil: not there
	askedEtcd      bool
	cacheRead      bool
	cacheErr, eErr error
}

func newResolver(gc *GarbageCollector) *resolver {
	return &resolver{gc: gc, seen: map[string]*owner{}}
}

// state tells the state of the owner ref names, for an object in ns.
func (r *resolver) state(ctx context.Context, ns string, ref objects.OwnerReference) (ownerState, error) {
	k, ok := r.gc.kind(ref.Kind)
	if !ok {
		return unknownKind, nil
	}
	key := k.Key(ns, ref.Name)
	o := r.seen[key]
	if o == nil {
		o = &owner{}
		r.seen[key] = o
	}
	if !o.cacheRead {
		o.cacheRead = true
		raw, err := r.gc.d.Objects.Get(ctx, key)
		switch {
		case err == nil:
			if m, err := decodeMeta(raw); err == nil {
				o.cached = &m
			}
		case errors.Is(err, objects.ErrNotFound), status.Code(err) == codes.InvalidArgument:
			// Not shown, or a prefix the observer does not watch: etcd
			// decides below.
		default:
			o.cacheErr = err
		}
	}
	if o.cacheErr != nil {
		return 0, o.cacheErr
	}
	if o.cached != nil && sameOwner(ref, o.cached) {
		return stateOf(o.cached), nil
	}
	// The cache does not show this owner: before the reference counts as
	// dangling, etcd itself must say so (a lagging cache may not show an
	// owner deleted and created again under its name).
	if !o.askedEtcd {
		o.askedEtcd = true
		raw, err := r.gc.d.Objects.GetDirect(ctx, key)
		switch {
		case err == nil:
			if m, err := decodeMeta(raw); err == nil {
				o.live = &m
			}
		case !errors.Is(err, objects.ErrNotFound):
			o.eErr = err
		}
	}
	if o.eErr != nil {
		return 0, o.eErr
	}
	if o.live != nil && sameOwner(ref, o.live) {
		return stateOf(o.live), nil
	}
	return dangling, nil
}

// sameOwner reports whether ref names the object m describes: by uid, or
// by name alone when the reference has no uid.
func sameOwner(ref objects.OwnerReference, m *objects.ObjectMeta) bool {
	return ref.UID == "" || ref.UID == m.UID
}

func stateOf(m *objects.ObjectMeta) ownerState {
	if m.IsDeleting() && m.HasFinalizer(objects.FinalizerForeground) {
		return waiting
	}
	return solid
}

// attemptToDelete judges obj (not being deleted) by its owners, as
// Kubernetes' garbage collector does: with a live owner it stays, and its
// references to dangling owners and to owners waiting for it in the
// foreground are taken out; with none it is deleted, in the foreground
// when an owner waits for it in the foreground and it has dependents of
// its own, otherwise as its own finalizers say (orphan, foreground) or in
// the background. An owner of a kind no declaration names yet leaves it
// alone (errUnknownKind) unless another owner lives.
//
// obj may be older than etcd's copy (read through the cache, or listed as
// a dependent): when its delete meets a newer revision it is read again
// from etcd and judged again, up to maxRejudge times, and past that the
// error makes the queue retry. It cannot leave the newer copy to be
// judged under its own key: a change of status alone is not announced to
// the collector (its declarations ignore status), so nothing else would
// look at the object again.
func (gc *GarbageCollector) attemptToDelete(ctx context.Context, r *resolver, obj item) error {
	for range maxRejudge {
		err := gc.judge(ctx, r, obj)
		if !errors.Is(err, errChanged) {
			return err
		}
		fresh, same, err := gc.reread(ctx, obj)
		if err != nil || !same {
			return err // gone, or replaced: a creation is announced and judged on its own
		}
		obj = fresh
	}
	return fmt.Errorf("%s changed %d times while it was judged: %w", obj, maxRejudge, errChanged)
}

// reread reads obj again from etcd. same is false when it is gone or
// another object (another uid, or not an object) is at its key.
func (gc *GarbageCollector) reread(ctx context.Context, obj item) (fresh item, same bool, err error) {
	raw, err := gc.d.Objects.GetDirect(ctx, obj.raw.Key)
	if errors.Is(err, objects.ErrNotFound) {
		return item{}, false, nil
	}
	if err != nil {
		return item{}, false, err
	}
	m, err := decodeMeta(raw)
	if err != nil || m.UID != obj.meta.UID {
		return item{}, false, nil
	}
	return item{kind: obj.kind, raw: raw, meta: m}, true, nil
}

// maxRejudge bounds how often attemptToDelete reads an object again that
// changed while it was judged, before it leaves it to the queue's retry.
const maxRejudge = 3

// errChanged says that an object changed between its read and a
// conditional write of the collector.
var errChanged = errors.New("the object changed since it was read")

// judge is one look of attemptToDelete at obj as read.
func (gc *GarbageCollector) judge(ctx context.Context, r *resolver, obj item) error {
	if len(obj.meta.OwnerReferences) == 0 || obj.meta.IsDeleting() {
		return nil
	}
	var live, dead, waitingFor []objects.OwnerReference
	unknown := 0
	for _, ref := range obj.meta.OwnerReferences {
		st, err := r.state(ctx, obj.meta.Namespace, ref)
		if err != nil {
			return err
		}
		switch st {
		case solid:
			live = append(live, ref)
		case waiting:
			waitingFor = append(waitingFor, ref)
		case dangling:
			dead = append(dead, ref)
		case unknownKind:
			unknown++
		}
	}
	switch {
	case len(live) > 0:
		if len(dead)+len(waitingFor) == 0 {
			return nil
		}
		gone := append(dead, waitingFor...)
		gc.d.Log.Info("garbage collector: an owner is gone; the object stays with its live owners", "object", obj.String(), "references_removed", len(gone))
		return gc.removeReferences(ctx, obj, func(ref objects.OwnerReference) bool {
			return slices.ContainsFunc(gone, func(g objects.OwnerReference) bool { return g == ref || sameRef(g, ref) })
		})
	case unknown > 0:
		return fmt.Errorf("%s: %w", obj, errUnknownKind)
	}
	prop := objects.Background
	switch {
	case len(waitingFor) > 0:
		deps, err := gc.dependents(ctx, obj.kind, obj.meta.Namespace, obj.meta.Name, obj.meta.UID)
		if err != nil {
			return err
		}
		if len(deps) > 0 {
			prop = objects.Foreground
			// A dependent of its own that waits in the foreground too is
			// a cycle of owners: it must not wait for this object, nor
			// this object for it, or neither would ever go. Kubernetes
			// breaks it the same way.
			// Once the references say so (a write that makes the delete
			// below meet a newer revision, and the change brings the
			// object back), it is deleted.
			if slices.ContainsFunc(deps, func(d item) bool { return stateOf(&d.meta) == waiting }) {
				if err := gc.unblockOwners(ctx, obj); err != nil {
					return err
				}
			}
		}
	case obj.meta.HasFinalizer(objects.FinalizerOrphan):
		prop = objects.Orphan
	case obj.meta.HasFinalizer(objects.FinalizerForeground):
		prop = objects.Foreground
	}
	return gc.delete(ctx, obj, prop)
}

// sameRef reports whether two references name the same owner.
func sameRef(a, b objects.OwnerReference) bool {
	return a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID
}

// delete deletes obj with propagation prop, only as it was read: if it
// changed since, it answers errChanged, for its caller to judge it again
// (the change may be one of status alone, which the collector's queues do
// not hear of).
func (gc *GarbageCollector) delete(ctx context.Context, obj item, prop objects.Propagation) error {
	d, err := gc.d.Objects.DeleteFrom(ctx, obj.raw, objects.DeleteOptions{Propagation: prop, UID: obj.meta.UID, ModRevision: obj.raw.ModRevision})
	switch {
	case errors.Is(err, objects.ErrConflict):
		return fmt.Errorf("delete %s: %w", obj, errChanged)
	case errors.Is(err, objects.ErrPrecondition), errors.Is(err, objects.ErrNotFound):
		// Replaced or gone since it was read: a new object under its name
		// is announced as created, and judged on its own.
		return nil
	case err != nil:
		return err
	}
	gc.d.Log.Debug("garbage collector: deleted an object whose owners are gone", "object", obj.String(), "propagation", string(prop), "outcome", d.String())
	return nil
}

// removeReferences takes the references drop selects out of obj, if it is
// still the object read (its uid).
func (gc *GarbageCollector) removeReferences(ctx context.Context, obj item, drop func(objects.OwnerReference) bool) error {
	uid := obj.meta.UID
	err := objects.ModifyFrom(ctx, gc.d.Objects, obj.raw, func(o *metaOnly) (bool, error) {
		if o.Metadata.UID != uid {
			return false, nil
		}
		n := len(o.Metadata.OwnerReferences)
		o.Metadata.OwnerReferences = slices.DeleteFunc(o.Metadata.OwnerReferences, drop)
		return len(o.Metadata.OwnerReferences) != n, nil
	})
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	return err
}

// unblockOwners says in each of obj's references that its owner need not
// wait for it (blockOwnerDeletion: false).
func (gc *GarbageCollector) unblockOwners(ctx context.Context, obj item) error {
	uid := obj.meta.UID
	no := false
	gc.d.Log.Info("garbage collector: a cycle of owners waiting in the foreground; the object stops blocking its owners", "object", obj.String())
	err := objects.ModifyFrom(ctx, gc.d.Objects, obj.raw, func(o *metaOnly) (bool, error) {
		if o.Metadata.UID != uid {
			return false, nil
		}
		changed := false
		for i, ref := range o.Metadata.OwnerReferences {
			if ref.BlockOwnerDeletion == nil || *ref.BlockOwnerDeletion {
				o.Metadata.OwnerReferences[i].BlockOwnerDeletion = &no
				changed = true
			}
		}
		return changed, nil
	})
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	return err
}

// finish carries out what obj's deletion asks for: it removes obj when no
// finalizer is left, takes obj's references out of its dependents for the
// orphan finalizer, and deletes its dependents for the foregroundDeletion
// finalizer, taking each finalizer off once its work is done.
func (gc *GarbageCollector) finish(ctx context.Context, r *resolver, obj item) (reconcile.Result, error) {
	st := gc.d.Objects
	m := obj.meta
	orphan, foreground := m.HasFinalizer(objects.FinalizerOrphan), m.HasFinalizer(objects.FinalizerForeground)
	switch {
	case len(m.Finalizers) == 0:
		// Someone took the last finalizer off without removing it.
		return reconcile.Result{}, gc.delete(ctx, obj, objects.Background)
	case !orphan && !foreground:
		return reconcile.Result{}, nil // others' finalizers: theirs to take off
	}
	// What is decided next rests on the dependents there are: read obj
	// from etcd first, so that the cache's lists reflect at least this
	// moment (the Client's reads wait for what it read from etcd).
	obj, same, err := gc.reread(ctx, obj)
	if err != nil || !same || !obj.meta.IsDeleting() {
		return reconcile.Result{}, err // gone or replaced: the new object is announced on its own
	}
	raw, m := obj.raw, obj.meta
	deps, err := gc.dependents(ctx, obj.kind, m.Namespace, m.Name, m.UID)
	if err != nil {
		return reconcile.Result{}, err
	}
	if m.HasFinalizer(objects.FinalizerOrphan) {
		for _, d := range deps {
			if err := gc.removeReferences(ctx, d, func(ref objects.OwnerReference) bool {
				return ref.Kind == obj.kind.Kind && ref.Name == m.Name && (ref.UID == m.UID || ref.UID == "")
			}); err != nil {
				return reconcile.Result{}, err
			}
		}
		gc.d.Log.Info("garbage collector: orphaned the dependents of a deleted object", "object", obj.String(), "dependents", len(deps))
		return reconcile.Result{}, st.RemoveFinalizerFrom(ctx, raw, m.UID, objects.FinalizerOrphan)
	}
	// Foreground: every dependent goes first. Those whose reference says
	// blockOwnerDeletion: false are not waited for (a broken cycle).
	var blocking []item
	for _, d := range deps {
		if blocks(d.meta, obj.kind.Kind, m.Name, m.UID) {
			blocking = append(blocking, d)
		}
	}
	if len(blocking) == 0 {
		gc.d.Log.Debug("garbage collector: the dependents of an object deleted in the foreground are gone", "object", obj.String())
		return reconcile.Result{}, st.RemoveFinalizerFrom(ctx, raw, m.UID, objects.FinalizerForeground)
	}
	var errs []error
	for _, d := range blocking {
		if d.meta.IsDeleting() {
			continue // on its way; its own deletion is seen to under its key
		}
		if err := gc.attemptToDelete(ctx, r, d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: foregroundRecheck}, nil
}

// blocks reports whether the object m describes holds up the foreground
// deletion of its owner kind/name/uid: it names that owner and does not
// say blockOwnerDeletion: false. (Kubernetes waits only for references
// that say true; Baton waits for every dependent unless told not to.)
func blocks(m objects.ObjectMeta, kind, name, uid string) bool {
	for _, ref := range m.OwnerReferences {
		if ref.Kind == kind && ref.Name == name && (ref.UID == uid || ref.UID == "") {
			if ref.BlockOwnerDeletion == nil || *ref.BlockOwnerDeletion {
				return true
			}
		}
	}
	return false
}

// ownerGone judges every dependent of the gone object of kind k at
// ns/name (of any uid: objects of the same name before it too).
func (gc *GarbageCollector) ownerGone(ctx context.Context, r *resolver, k kinds.Kind, ns, name string) error {
	deps, err := gc.dependents(ctx, k, ns, name, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range deps {
		if d.meta.IsDeleting() {
			continue // its own deletion is seen to under its key
		}
		if err := gc.attemptToDelete(ctx, r, d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(deps) > 0 {
		gc.d.Log.Debug("garbage collector: judged the dependents of a gone object", "owner", k.Singular()+" "+ns+"/"+name, "dependents", len(deps))
	}
	return errors.Join(errs...)
}

// dependents lists, through the cache, the objects of every kind it knows
// in ns that name the owner of kind owner, name and uid ("": any), the
// owner itself left out. A kind whose prefix the observer does not watch
// (its declaration refused, say) has none it can see.
func (gc *GarbageCollector) dependents(ctx context.Context, owner kinds.Kind, ns, name, uid string) ([]item, error) {
	var out []item
	for _, k := range gc.Kinds() {
		raws, err := gc.d.Objects.List(ctx, k.NamespacePrefix(ns), objects.OwnedBy{Namespace: ns, Kind: owner.Kind, Name: name, UID: uid})
		if status.Code(err) == codes.InvalidArgument {
			gc.d.Log.Debug("garbage collector: the observer does not watch a kind's prefix; its dependents are not seen", "kind", k.Kind, "err", err)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, raw := range raws {
			m, err := decodeMeta(raw)
			if err != nil || (k.Kind == owner.Kind && m.Name == name && (uid == "" || m.UID == uid)) {
				continue
			}
			out = append(out, item{kind: k, raw: raw, meta: m})
		}
	}
	return out, nil
}
