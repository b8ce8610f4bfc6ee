package objects

// Reads: Get and List through the cache or from etcd, their typed forms
// (Get, List, Decode, Item), OwnerGone, and the count of reads.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadCounts counts a Client's reads.
type ReadCounts struct {
	// Etcd counts reads of etcd itself: GetDirect, ListDirect, OwnerGone,
	// the reads of a Modify or UpdateStatus retried after a conflict, and
	// every read of a Client without a cache.
	Etcd uint64
	// Cache counts reads through the cache.
	Cache uint64
}

// Reads returns the reads this Client has made.
func (s *Client) Reads() ReadCounts {
	return ReadCounts{Etcd: s.etcdReads.Load(), Cache: s.cacheReads.Load()}
}

// Get reads one object through the cache (or etcd).
func (s *Client) Get(ctx context.Context, key string) (Raw, error) {
	if s.cache == nil {
		return s.GetDirect(ctx, key)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	s.cacheReads.Add(1)
	return s.cache.Get(ctx, key, s.readRevision(ctx))
}

// GetDirect reads one object from etcd (linearizable). Later cache reads of
// this Client reflect at least the revision it saw.
func (s *Client) GetDirect(ctx context.Context, key string) (Raw, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	s.etcdReads.Add(1)
	resp, err := s.etcd.Get(ctx, key)
	if err != nil {
		return Raw{}, fmt.Errorf("get %s from etcd: %w", key, err)
	}
	s.wrote(ctx, resp.Header.Revision)
	if len(resp.Kvs) == 0 {
		return Raw{}, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	kv := resp.Kvs[0]
	return Raw{Key: key, Value: kv.Value, ModRevision: kv.ModRevision}, nil
}

// List reads the objects under prefix through the cache (or etcd), only the
// children of owner if owner.Kind is set, in key order.
func (s *Client) List(ctx context.Context, prefix string, owner OwnedBy) ([]Raw, error) {
	if s.cache == nil {
		return s.ListDirect(ctx, prefix, owner)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	s.cacheReads.Add(1)
	return s.cache.List(ctx, prefix, owner, s.readRevision(ctx))
}

// ListDirect is List from etcd; the owner filter is applied here.
func (s *Client) ListDirect(ctx context.Context, prefix string, owner OwnedBy) ([]Raw, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	s.etcdReads.Add(1)
	resp, err := s.etcd.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list %s from etcd: %w", prefix, err)
	}
	out := make([]Raw, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if owner.Kind != "" || owner.UID != "" {
			var o struct {
				Metadata ObjectMeta `json:"metadata"`
			}
			if json.Unmarshal(kv.Value, &o) != nil {
				continue
			}
			ns := owner.Namespace
			if ns == "" {
				ns = o.Metadata.Namespace
			}
			if o.Metadata.Namespace != ns || !o.Metadata.OwnedBy(owner.Kind, owner.Name, owner.UID) {
				continue
			}
		}
		out = append(out, Raw{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision})
	}
	return out, nil
}

// OwnerGone reports, from etcd itself, whether the object at key with uid
// is gone: there is no object at key, or it has another uid (a new object
// of the same name). A controller asks before it deletes children for an
// owner its cache read did not find, or found with another uid, since a
// lagging cache can miss an object etcd has.
func (s *Client) OwnerGone(ctx context.Context, key, uid string) (bool, error) {
	raw, err := s.GetDirect(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	var o struct {
		Metadata ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw.Value, &o); err != nil {
		// Not an object this Client can read: gone as an owner of anything.
		return true, nil
	}
	return o.Metadata.UID != uid, nil
}

// Decode decodes a stored object.
func Decode[T any](r Raw) (*T, error) {
	var v T
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.Key, err)
	}
	return &v, nil
}

// Get reads and decodes one object, with its mod_revision.
func Get[T any](ctx context.Context, s *Client, key string) (*T, int64, error) {
	r, err := s.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	v, err := Decode[T](r)
	return v, r.ModRevision, err
}

// Item is a decoded object with its key and mod_revision.
type Item[T any] struct {
	Key         string
	ModRevision int64
	Object      *T
	// Value is the object as stored, for ModifyFrom.
	Value []byte
}

// Raw returns the item as stored.
func (it Item[T]) Raw() Raw { return Raw{Key: it.Key, Value: it.Value, ModRevision: it.ModRevision} }

// List reads and decodes the objects under prefix (see Client.List).
// Undecodable values are skipped: one corrupt child must not block its
// owner's reconcile forever.
func List[T any](ctx context.Context, s *Client, prefix string, owner OwnedBy) ([]Item[T], error) {
	raws, err := s.List(ctx, prefix, owner)
	if err != nil {
		return nil, err
	}
	out := make([]Item[T], 0, len(raws))
	for _, r := range raws {
		v, err := Decode[T](r)
		if err != nil {
			continue
		}
		out = append(out, Item[T]{Key: r.Key, ModRevision: r.ModRevision, Object: v, Value: r.Value})
	}
	return out, nil
}
