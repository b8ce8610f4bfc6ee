package objects

// Writes, each a compare-and-swap: Create and CreateAll, Modify and
// ModifyFrom (read, change, write, retried on a conflict), and Delete.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxConflictRetries bounds the read-modify-write loop of Modify; a key
// written this often within one reconcile is contended beyond reason, and the
// reconcile is better retried later with backoff.
const maxConflictRetries = 16

// Create stores v at key if the key does not exist (ErrConflict if it does)
// and returns the new mod_revision. It sets metadata.uid and
// metadata.creationTimestamp if they are empty, and metadata.generation to
// 1; an object its kind's schema refuses is not written (ErrInvalid).
func (s *Client) Create(ctx context.Context, key string, v Metaobject) (int64, error) {
	if m := v.Meta(); m.UID == "" {
		m.UID = NewUID()
	}
	if m := v.Meta(); m.CreationTimestamp == "" {
		m.CreationTimestamp = time.Now().UTC().Format(time.RFC3339)
	}
	v.Meta().Generation = 1
	b, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", key, err)
	}
	if b, err = s.admit(ctx, key, nil, b); err != nil {
		return 0, fmt.Errorf("create %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	resp, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("create %s: %w", key, ErrConflict)
	}
	s.wrote(ctx, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// MaxTxnOps is the most operations the Client puts in one transaction
// (CreateAll's batches; CreateAllWithStatus's objects and the owner): it
// keeps a transaction under etcd's default limit of 128 (--max-txn-ops).
const MaxTxnOps = 100

// CreateAll creates several objects, each only if its key does not exist, in
// transactions of up to 100: all of one transaction or none of it
// (ErrConflict if any key exists). One transaction is one etcd revision
// instead of one per object. It sets metadata.uid and creationTimestamp
// where empty.
func (s *Client) CreateAll(ctx context.Context, keys []string, vs []Metaobject) error {
	if len(keys) != len(vs) {
		return fmt.Errorf("objects: CreateAll with %d keys and %d objects", len(keys), len(vs))
	}
	for start := 0; start < len(keys); start += MaxTxnOps {
		end := min(start+MaxTxnOps, len(keys))
		cmps, ops, err := s.createOps(ctx, keys[start:end], vs[start:end])
		if err != nil {
			return err
		}
		tctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		resp, err := s.etcd.Txn(tctx).If(cmps...).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("create %d objects: %w", len(ops), err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("create %d objects: %w", len(ops), ErrConflict)
		}
		s.wrote(ctx, resp.Header.Revision)
	}
	return nil
}

func (s *Client) put(ctx context.Context, key string, modRev int64, b []byte) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	resp, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
		Then(clientv3.OpPut(key, string(b))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("update %s: %w", key, ErrConflict)
	}
	s.wrote(ctx, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// Delete deletes key by DeleteWith's protocol with Background
// propagation (an object with finalizers is marked, not removed), if its
// mod_revision is still modRev (any revision when modRev is 0;
// ErrConflict otherwise). Deleting a missing key is not an error: the goal
// is reached.
func (s *Client) Delete(ctx context.Context, key string, modRev int64) error {
	_, err := s.DeleteWith(ctx, key, DeleteOptions{ModRevision: modRev})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Modify reads key from etcd into a T, calls change, and writes the result
// back if change reports a change, retrying from the read when another
// writer got in between. It returns ErrNotFound if the key is gone. Top-level
// fields of the stored object that T does not know are kept. A change may
// not touch metadata.deletionTimestamp nor add a finalizer to an object
// being deleted (CheckMetaUpdate); one that takes the last finalizer off
// an object being deleted removes the object.
func Modify[T any](ctx context.Context, s *Client, key string, change func(*T) (bool, error)) error {
	return ModifyFrom(ctx, s, Raw{Key: key}, change)
}

// ModifyFrom is Modify starting from raw, the object as the caller has
// read it (from the cache, say), so that the first attempt needs no read
// of its own: if raw is stale the compare-and-swap is refused and it reads
// again from etcd, as Modify does. A raw without a value starts with a
// read.
func ModifyFrom[T any](ctx context.Context, s *Client, raw Raw, change func(*T) (bool, error)) error {
	key := raw.Key
	for i := range maxConflictRetries {
		if i > 0 || raw.Value == nil {
			var err error
			if raw, err = s.GetDirect(ctx, key); err != nil {
				return err
			}
		}
		v, known, err := decodeKnown[T](raw.Value)
		if err != nil {
			return fmt.Errorf("decode %s: %w", key, err)
		}
		before := snapshotMeta(&v)
		changed, err := change(&v)
		if err != nil || !changed {
			return err
		}
		if err := checkModify(key, before, &v); err != nil {
			return err
		}
		if finalized(&v) {
			// The change took the last finalizer off an object being
			// deleted: it goes now (DeleteWith).
			if err := s.removeAt(ctx, key, raw.ModRevision); !errors.Is(err, ErrConflict) {
				return err
			}
			continue
		}
		var b []byte
		if known {
			b, err = json.Marshal(v)
		} else {
			b, err = mergeTop(raw.Value, v)
		}
		if err != nil {
			return fmt.Errorf("encode %s: %w", key, err)
		}
		if b, err = s.admit(ctx, key, raw.Value, b); err != nil {
			return fmt.Errorf("modify %s: %w", key, err)
		}
		if _, err := s.put(ctx, key, raw.ModRevision, b); !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("modify %s: gave up after %d conflicts: %w", key, maxConflictRetries, ErrConflict)
}

// createOps are the comparisons and puts that create vs at keys, each only
// if its key does not exist, setting metadata.uid and creationTimestamp
// where empty and metadata.generation to 1, each object admitted (admit).
func (s *Client) createOps(ctx context.Context, keys []string, vs []Metaobject) ([]clientv3.Cmp, []clientv3.Op, error) {
	now := time.Now().UTC().Format(time.RFC3339)
	cmps := make([]clientv3.Cmp, 0, len(keys)+1)
	ops := make([]clientv3.Op, 0, len(keys)+1)
	for i := range keys {
		m := vs[i].Meta()
		if m.UID == "" {
			m.UID = NewUID()
		}
		if m.CreationTimestamp == "" {
			m.CreationTimestamp = now
		}
		m.Generation = 1
		b, err := json.Marshal(vs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("encode %s: %w", keys[i], err)
		}
		if b, err = s.admit(ctx, keys[i], nil, b); err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", keys[i], err)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0))
		ops = append(ops, clientv3.OpPut(keys[i], string(b)))
	}
	return cmps, ops, nil
}
