package objects

// Status writes: UpdateStatus and UpdateStatusFrom, which write only a
// status that differs, and CreateAllWithStatus, children and their
// owner's status in one transaction.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// UpdateStatus sets the status of the object at key, if it still has uid,
// leaving every other field as stored. It writes nothing when the status is
// already equal (a status write would otherwise wake the controller again
// for nothing), and retries on conflict.
func (s *Client) UpdateStatus(ctx context.Context, key, uid string, st any) error {
	return s.UpdateStatusFrom(ctx, Raw{Key: key}, uid, st)
}

// UpdateStatusFrom is UpdateStatus starting from raw, the object as the
// caller has just read it (from the cache, or etcd), so that the first
// attempt needs no read of its own (a controller reads its object at the
// start of every reconcile). If the object changed since, the write is
// refused and it reads again from etcd, as UpdateStatus does. If raw's
// status already equals st nothing is written, even if the object changed
// since raw was read: any such change announces the key again, and its
// next reconcile writes what is due.
func (s *Client) UpdateStatusFrom(ctx context.Context, raw Raw, uid string, st any) error {
	key := raw.Key
	want, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode status of %s: %w", key, err)
	}
	if want, err = s.admitStatus(ctx, key, want); err != nil {
		return fmt.Errorf("update status of %s: %w", key, err)
	}
	for i := range maxConflictRetries {
		if i > 0 || raw.Value == nil {
			raw, err = s.GetDirect(ctx, key)
			if errors.Is(err, ErrNotFound) {
				return nil // deleted meanwhile: its next reconcile cleans up
			}
			if err != nil {
				return err
			}
		}
		b, err := withStatus(raw, uid, want)
		if b == nil || err != nil {
			return err
		}
		if _, err := s.put(ctx, key, raw.ModRevision, b); !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("update status of %s: gave up after %d conflicts: %w", key, maxConflictRetries, ErrConflict)
}

// withStatus returns raw's object with its status set to the encoded
// status want, or nil when nothing is to be written: its status is already
// want, or it is no longer the object uid names (replaced by a new object
// of the same name; uid "" matches any).
func withStatus(raw Raw, uid string, want []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw.Value, &top); err != nil {
		return nil, fmt.Errorf("decode %s: %w", raw.Key, err)
	}
	var meta ObjectMeta
	if err := json.Unmarshal(top["metadata"], &meta); err != nil {
		return nil, fmt.Errorf("decode metadata of %s: %w", raw.Key, err)
	}
	if uid != "" && meta.UID != uid {
		return nil, nil
	}
	if jsonEqual(top["status"], want) {
		return nil, nil
	}
	top["status"] = want
	b, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", raw.Key, err)
	}
	return b, nil
}

// CreateAllWithStatus is CreateAll of objects (fewer than 100) and
// UpdateStatusFrom(raw, uid, st) in one transaction: one etcd request and
// one revision where the two steps take two, for an owner that creates
// children and reports them in its status in the same reconcile. The
// transaction holds only while raw's object is still at raw.ModRevision
// and every key is free; if either is not so, nothing is written and the
// error is ErrConflict, for the caller to take the two steps, which tell
// the cases apart (a taken name, or an owner that changed since it was
// read). When the status needs no write (already st, or the object is no
// longer uid) it is CreateAll alone.
func (s *Client) CreateAllWithStatus(ctx context.Context, keys []string, vs []Metaobject, raw Raw, uid string, st any) error {
	if len(keys) != len(vs) || len(keys) >= MaxTxnOps || raw.Value == nil {
		return fmt.Errorf("objects: CreateAllWithStatus of %d keys and %d objects (at most %d), with the owner read (%t)",
			len(keys), len(vs), MaxTxnOps-1, raw.Value != nil)
	}
	want, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode status of %s: %w", raw.Key, err)
	}
	if want, err = s.admitStatus(ctx, raw.Key, want); err != nil {
		return fmt.Errorf("update status of %s: %w", raw.Key, err)
	}
	owner, err := withStatus(raw, uid, want)
	if err != nil {
		return err
	}
	if owner == nil {
		return s.CreateAll(ctx, keys, vs)
	}
	cmps, ops, err := s.createOps(ctx, keys, vs)
	if err != nil {
		return err
	}
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(raw.Key), "=", raw.ModRevision))
	ops = append(ops, clientv3.OpPut(raw.Key, string(owner)))
	tctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	resp, err := s.etcd.Txn(tctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("create %d objects and update status of %s: %w", len(keys), raw.Key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("create %d objects and update status of %s: %w", len(keys), raw.Key, ErrConflict)
	}
	s.wrote(ctx, resp.Header.Revision)
	return nil
}
