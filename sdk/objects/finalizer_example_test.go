package objects_test

import (
	"context"
	"errors"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
)

// A Backup's controller keeps copies outside etcd, which must go before
// the Backup does: it holds a finalizer on every Backup, and when one is
// being deleted it removes the copies, then its finalizer (which removes
// the Backup). The garbage collector needs nothing of it: dependents that
// name the Backup in their ownerReferences are deleted once it is gone.
func Example_finalizer() {
	const finalizer = "example.com/copies"
	type Backup = objects.Object[struct{ Source string }, struct{ Copies int }]
	var (
		st           *objects.Client // objects.NewClient(etcd, observer)
		removeCopies = func(ctx context.Context, b *Backup) error { return nil }
	)
	reconcileBackup := func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		ns, name, err := objects.SplitKey(req.Key)
		if err != nil {
			return reconcile.Result{}, reconcile.Terminal(err)
		}
		ctx = st.Scope(ctx, req.Key, req.MinRevision)
		key := objects.Key("backups", ns, name)
		raw, err := st.Get(ctx, key)
		if errors.Is(err, objects.ErrNotFound) {
			return reconcile.Result{}, nil // gone: its finalizer saw to the copies
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		b, err := objects.Decode[Backup](raw)
		if err != nil {
			return reconcile.Result{}, reconcile.Terminal(err)
		}
		if b.Metadata.IsDeleting() {
			if !b.Metadata.HasFinalizer(finalizer) {
				return reconcile.Result{}, nil
			}
			if err := removeCopies(ctx, b); err != nil {
				return reconcile.Result{}, err // retried: the Backup waits
			}
			return reconcile.Result{}, st.RemoveFinalizerFrom(ctx, raw, b.Metadata.UID, finalizer)
		}
		if !b.Metadata.HasFinalizer(finalizer) {
			// Before the first copy is made, so that no delete can miss it.
			if err := st.AddFinalizerFrom(ctx, raw, b.Metadata.UID, finalizer); err != nil {
				return reconcile.Result{}, err
			}
		}
		// … make the copies, write the status …
		return reconcile.Result{}, nil
	}
	_ = reconcile.Func(reconcileBackup)
}
