package objects

// The cache a Client reads through (Cache), and the observer's as one.

import (
	"context"
	"errors"
	"fmt"

	observerclient "github.com/batonrun/baton/client/observer"
)

// Cache is what a Client reads through: the observer's (ObserverService Get
// and List), reflecting etcd at least up to minRev.
type Cache interface {
	// Get returns the object at key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key string, minRev int64) (Raw, error)
	// List returns the objects under prefix in key order, only the
	// children of owner if owner.Kind or owner.UID is set.
	List(ctx context.Context, prefix string, owner OwnedBy, minRev int64) ([]Raw, error)
}

// observerCache is the observer's cache as a Client's Cache.
type observerCache struct{ c *observerclient.Client }

func (o observerCache) Get(ctx context.Context, key string, minRev int64) (Raw, error) {
	obj, err := o.c.Get(ctx, key, minRev)
	if errors.Is(err, observerclient.ErrNotFound) {
		return Raw{}, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Raw{}, err
	}
	return Raw(obj), nil
}

func (o observerCache) List(ctx context.Context, prefix string, owner OwnedBy, minRev int64) ([]Raw, error) {
	objs, _, err := o.c.List(ctx, observerclient.ListOptions{Prefix: prefix, MinRevision: minRev,
		Owner: observerclient.Owner{Kind: owner.Kind, Name: owner.Name, Namespace: owner.Namespace, UID: owner.UID}})
	if err != nil {
		return nil, err
	}
	out := make([]Raw, len(objs))
	for i, obj := range objs {
		out[i] = Raw(obj)
	}
	return out, nil
}
