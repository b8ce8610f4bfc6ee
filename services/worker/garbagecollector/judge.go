package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// collect brings the object of kind k at ns/name in line with the
// invariant: its dependents if it is gone, what its deletion asks for if
// it is being deleted, and itself if its owners are gone.
func (c *Collector) collect(ctx context.Context, k kinds.Kind, ns, name string) (reconcile.Result, error) {
	raw, err := c.o.Objects.Get(ctx, k.Key(ns, name))
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, c.ownerGone(ctx, newResolver(c), k, ns, name)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return c.collectRaw(ctx, k, raw)
}

// collectRaw is collect of an object read as raw.
func (c *Collector) collectRaw(ctx context.Context, k kinds.Kind, raw objects.Raw) (reconcile.Result, error) {
	m, err := decodeMeta(raw)
	if err != nil {
		return reconcile.Result{}, nil // not an object: it owns nothing and names no owner
	}
	obj := item{kind: k, raw: raw, meta: m}
	r := newResolver(c)
	if m.IsDeleting() {
		return c.finish(ctx, r, obj)
	}
	return reconcile.Result{}, c.attemptToDelete(ctx, r, obj)
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
	// unknownKind: no rule in force names the reference's kind.
	unknownKind
)

// resolver finds owners, each at most once through the cache and once in
// etcd within one look at an object and its dependents.
type resolver struct {
	c    *Collector
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

func newResolver(c *Collector) *resolver {
	return &resolver{c: c, seen: map[string]*owner{}}
}

// state tells the state of the owner ref names, for an object in ns.
func (r *resolver) state(ctx context.Context, ns string, ref objects.OwnerReference) (ownerState, error) {
	k, ok := r.c.kinds.kind(ref.Kind)
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
		raw, err := r.c.o.Objects.Get(ctx, key)
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
		raw, err := r.c.o.Objects.GetDirect(ctx, key)
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
// the background. An owner of a kind no rule in force names leaves it
// alone (errUnknownKind) unless another owner lives.
//
// obj may be older than etcd's copy (read through the cache, or listed as
// a dependent): when its delete meets a newer revision it is read again
// from etcd and judged again, up to maxRejudge times, and past that the
// error makes the queue retry. It cannot leave the newer copy to be
// judged under its own key: a change of status alone is not announced to
// the collector (its rules ignore status), so nothing else would
// look at the object again.
func (c *Collector) attemptToDelete(ctx context.Context, r *resolver, obj item) error {
	for range maxRejudge {
		err := c.judge(ctx, r, obj)
		if !errors.Is(err, errChanged) {
			return err
		}
		fresh, same, err := c.reread(ctx, obj)
		if err != nil || !same {
			return err // gone, or replaced: a creation is announced and judged on its own
		}
		obj = fresh
	}
	return fmt.Errorf("%s changed %d times while it was judged: %w", obj, maxRejudge, errChanged)
}

// reread reads obj again from etcd. same is false when it is gone or
// another object (another uid, or not an object) is at its key.
func (c *Collector) reread(ctx context.Context, obj item) (fresh item, same bool, err error) {
	raw, err := c.o.Objects.GetDirect(ctx, obj.raw.Key)
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
func (c *Collector) judge(ctx context.Context, r *resolver, obj item) error {
	if len(obj.meta.OwnerReferences) == 0 || obj.meta.IsDeleting() {
		return nil
	}
	var live, dead, waitingFor []objects.OwnerReference
	var unknown []string
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
			unknown = append(unknown, ref.Kind)
		}
	}
	switch {
	case len(live) > 0:
		if len(dead)+len(waitingFor) == 0 {
			return nil
		}
		gone := append(dead, waitingFor...)
		c.log.Info("garbage collector: an owner is gone; the object stays with its live owners", "object", obj.String(), "references_removed", len(gone))
		return c.removeReferences(ctx, obj, func(ref objects.OwnerReference) bool {
			return slices.ContainsFunc(gone, func(g objects.OwnerReference) bool { return g == ref || sameRef(g, ref) })
		})
	case len(unknown) > 0:
		return &unknownKindsError{obj: obj.String(), kinds: unknown}
	}
	prop := objects.Background
	switch {
	case len(waitingFor) > 0:
		deps, err := c.dependents(ctx, obj.kind, obj.meta.Namespace, obj.meta.Name, obj.meta.UID)
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
				if err := c.unblockOwners(ctx, obj); err != nil {
					return err
				}
			}
		}
	case obj.meta.HasFinalizer(objects.FinalizerOrphan):
		prop = objects.Orphan
	case obj.meta.HasFinalizer(objects.FinalizerForeground):
		prop = objects.Foreground
	}
	return c.delete(ctx, obj, prop)
}

// sameRef reports whether two references name the same owner.
func sameRef(a, b objects.OwnerReference) bool {
	return a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID
}

// delete deletes obj with propagation prop, only as it was read: if it
// changed since, it answers errChanged, for its caller to judge it again
// (the change may be one of status alone, which the collector's queue does
// not hear of).
func (c *Collector) delete(ctx context.Context, obj item, prop objects.Propagation) error {
	d, err := c.o.Objects.DeleteFrom(ctx, obj.raw, objects.DeleteOptions{Propagation: prop, UID: obj.meta.UID, ModRevision: obj.raw.ModRevision})
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
	c.log.Debug("garbage collector: deleted an object whose owners are gone", "object", obj.String(), "propagation", string(prop), "outcome", d.String())
	return nil
}

// removeReferences takes the references drop selects out of obj, if it is
// still the object read (its uid).
func (c *Collector) removeReferences(ctx context.Context, obj item, drop func(objects.OwnerReference) bool) error {
	uid := obj.meta.UID
	err := objects.ModifyFrom(ctx, c.o.Objects, obj.raw, func(o *metaOnly) (bool, error) {
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
func (c *Collector) unblockOwners(ctx context.Context, obj item) error {
	uid := obj.meta.UID
	no := false
	c.log.Info("garbage collector: a cycle of owners waiting in the foreground; the object stops blocking its owners", "object", obj.String())
	err := objects.ModifyFrom(ctx, c.o.Objects, obj.raw, func(o *metaOnly) (bool, error) {
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
func (c *Collector) finish(ctx context.Context, r *resolver, obj item) (reconcile.Result, error) {
	st := c.o.Objects
	m := obj.meta
	orphan, foreground := m.HasFinalizer(objects.FinalizerOrphan), m.HasFinalizer(objects.FinalizerForeground)
	switch {
	case len(m.Finalizers) == 0:
		// Someone took the last finalizer off without removing it.
		return reconcile.Result{}, c.delete(ctx, obj, objects.Background)
	case !orphan && !foreground:
		return reconcile.Result{}, nil // others' finalizers: theirs to take off
	}
	// What is decided next rests on the dependents there are: read obj
	// from etcd first, so that the cache's lists reflect at least this
	// moment (the Client's reads wait for what it read from etcd).
	obj, same, err := c.reread(ctx, obj)
	if err != nil || !same || !obj.meta.IsDeleting() {
		return reconcile.Result{}, err // gone or replaced: the new object is announced on its own
	}
	raw, m := obj.raw, obj.meta
	deps, err := c.dependents(ctx, obj.kind, m.Namespace, m.Name, m.UID)
	if err != nil {
		return reconcile.Result{}, err
	}
	if m.HasFinalizer(objects.FinalizerOrphan) {
		for _, d := range deps {
			if err := c.removeReferences(ctx, d, func(ref objects.OwnerReference) bool {
				return ref.Kind == obj.kind.Kind && ref.Name == m.Name && (ref.UID == m.UID || ref.UID == "")
			}); err != nil {
				return reconcile.Result{}, err
			}
		}
		c.log.Info("garbage collector: orphaned the dependents of a deleted object", "object", obj.String(), "dependents", len(deps))
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
		c.log.Debug("garbage collector: the dependents of an object deleted in the foreground are gone", "object", obj.String())
		return reconcile.Result{}, st.RemoveFinalizerFrom(ctx, raw, m.UID, objects.FinalizerForeground)
	}
	var errs []error
	for _, d := range blocking {
		if d.meta.IsDeleting() {
			continue // on its way; its own deletion is seen to under its key
		}
		if err := c.attemptToDelete(ctx, r, d); err != nil {
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
func (c *Collector) ownerGone(ctx context.Context, r *resolver, k kinds.Kind, ns, name string) error {
	deps, err := c.dependents(ctx, k, ns, name, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range deps {
		if d.meta.IsDeleting() {
			continue // its own deletion is seen to under its key
		}
		if err := c.attemptToDelete(ctx, r, d); err != nil {
			errs = append(errs, err)
		}
	}
	if len(deps) > 0 {
		c.log.Debug("garbage collector: judged the dependents of a gone object", "owner", k.Singular()+" "+ns+"/"+name, "dependents", len(deps))
	}
	return errors.Join(errs...)
}

// dependents lists, through the cache, the objects of every kind it knows
// in ns that name the owner of kind owner, name and uid ("": any), the
// owner itself left out: one List of every object under /registry/ by
// owner, which the observer answers from its owner index, whatever the
// number of kinds. An object of a kind the collector does not know (no
// rule in force names it) is left out.
func (c *Collector) dependents(ctx context.Context, owner kinds.Kind, ns, name, uid string) ([]item, error) {
	raws, err := c.o.Objects.List(ctx, kinds.RegistryPrefix, objects.OwnedBy{Namespace: ns, Kind: owner.Kind, Name: name, UID: uid})
	if err != nil {
		return nil, err
	}
	var out []item
	for _, raw := range raws {
		res, _, _ := strings.Cut(strings.TrimPrefix(raw.Key, kinds.RegistryPrefix), "/")
		k, ok := c.kinds.byResource(res)
		if !ok {
			continue
		}
		m, err := decodeMeta(raw)
		if err != nil || (k.Kind == owner.Kind && m.Name == name && (uid == "" || m.UID == uid)) {
			continue
		}
		out = append(out, item{kind: k, raw: raw, meta: m})
	}
	return out, nil
}
