package objects

// Deletes and finalizers, as Kubernetes has them: DeleteWith and
// DeleteFrom, propagation, AddFinalizer and RemoveFinalizer, and the
// checks that keep a change from undoing a delete.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The finalizers of the garbage collector, Kubernetes' names: an object
// being deleted that holds one waits for the collector to delete its
// dependents first (foregroundDeletion), or to take its reference out of
// each of them (orphan).
const (
	FinalizerForeground = "foregroundDeletion"
	FinalizerOrphan     = "orphan"
)

// MaxFinalizerBytes bounds a finalizer's name, as Kubernetes bounds a
// qualified name.
const MaxFinalizerBytes = 253

// Propagation says what a delete does to the object's dependents (the
// objects whose ownerReferences name it), as kubectl's --cascade.
type Propagation string

// The propagations. The zero Propagation is Background.
const (
	// Background removes the object at once (unless finalizers hold it);
	// the garbage collector then deletes its dependents.
	Background Propagation = "background"
	// Foreground marks the object deleted with the finalizer
	// foregroundDeletion: the collector deletes its dependents (in the
	// foreground again where they own others) and then the object.
	Foreground Propagation = "foreground"
	// Orphan marks the object deleted with the finalizer orphan: the
	// collector takes the object's reference out of every dependent, which
	// stays, and then removes the object.
	Orphan Propagation = "orphan"
)

// ParsePropagation reads a propagation by its name (kubectl's --cascade
// values); "" is Background.
func ParsePropagation(s string) (Propagation, error) {
	switch p := Propagation(s); p {
	case "":
		return Background, nil
	case Background, Foreground, Orphan:
		return p, nil
	}
	return "", fmt.Errorf("objects: propagation %q is not background, foreground or orphan", s)
}

// finalizer is the finalizer p puts on the object it deletes, or "".
func (p Propagation) finalizer() (string, error) {
	switch p {
	case "", Background:
		return "", nil
	case Foreground:
		return FinalizerForeground, nil
	case Orphan:
		return FinalizerOrphan, nil
	}
	return "", fmt.Errorf("objects: propagation %q is not background, foreground or orphan", string(p))
}

// ErrDeleting is returned when a finalizer would be added to an object
// that is being deleted (its deletionTimestamp is set): a finalizer must
// be in place before the delete it is to hold up.
var ErrDeleting = errors.New("objects: the object is being deleted")

// ErrDeletionTimestamp is returned when a write would set, change or clear
// metadata.deletionTimestamp: only a delete sets it, once.
var ErrDeletionTimestamp = errors.New("objects: metadata.deletionTimestamp is set by a delete, once, and never changes")

// ErrPrecondition is returned when the object at the key is not the one
// the call names by uid (one of the same name was made since).
var ErrPrecondition = errors.New("objects: another object (uid) is at the key")

// IsDeleting reports whether the object is being deleted: its
// deletionTimestamp is set, and it goes once its finalizers are gone.
func (m *ObjectMeta) IsDeleting() bool { return m.DeletionTimestamp != "" }

// HasFinalizer reports whether the object holds the finalizer name.
func (m *ObjectMeta) HasFinalizer(name string) bool { return slices.Contains(m.Finalizers, name) }

// CheckMetaUpdate names what an update of an object's metadata from before
// to after may not do: set, change or clear deletionTimestamp
// (ErrDeletionTimestamp), or add a finalizer to an object being deleted
// (ErrDeleting). Modify and ModifyFrom check every change with it, and so
// does batonctl apply.
func CheckMetaUpdate(before, after *ObjectMeta) error {
	if after.DeletionTimestamp != before.DeletionTimestamp {
		return fmt.Errorf("deletionTimestamp %q → %q: %w", before.DeletionTimestamp, after.DeletionTimestamp, ErrDeletionTimestamp)
	}
	if before.IsDeleting() {
		for _, f := range after.Finalizers {
			if !before.HasFinalizer(f) {
				return fmt.Errorf("finalizer %s added: %w", f, ErrDeleting)
			}
		}
	}
	return nil
}

func checkFinalizerName(name string) error {
	if name == "" || len(name) > MaxFinalizerBytes || strings.ContainsAny(name, " \t\r\n") {
		return fmt.Errorf("objects: finalizer %q: want 1 to %d bytes without spaces", name, MaxFinalizerBytes)
	}
	return nil
}

// DeleteOptions qualify a delete.
type DeleteOptions struct {
	// Propagation is what happens to the object's dependents; zero is
	// Background.
	Propagation Propagation
	// UID, if set, deletes only the object with that uid: another at the
	// key is left alone (ErrPrecondition).
	UID string
	// ModRevision, if set, deletes only the object as it was at that
	// mod_revision: one changed since is left alone (ErrConflict), for a
	// caller whose decision to delete rests on what it read then.
	ModRevision int64
}

// Deletion is what a delete did.
type Deletion int

const (
	// Removed: the key is gone.
	Removed Deletion = iota + 1
	// Marked: the delete set deletionTimestamp (and its propagation's
	// finalizer); the object stays until its finalizers are gone.
	Marked
	// AlreadyDeleting: the object was being deleted already, and the
	// delete changed nothing.
	AlreadyDeleting
)

func (d Deletion) String() string {
	switch d {
	case Removed:
		return "removed"
	case Marked:
		return "marked for deletion"
	case AlreadyDeleting:
		return "already being deleted"
	}
	return "deletion(" + fmt.Sprint(int(d)) + ")"
}

// DeleteWith deletes the object at key by the protocol every deleter of
// the project follows, Kubernetes' own:
//
//   - An object that holds finalizers, or is deleted with Foreground or
//     Orphan propagation, is not removed: it gets metadata.deletionTimestamp
//     (now, RFC 3339) and the propagation's finalizer, in one
//     compare-and-swap (Marked). Whoever removes its last finalizer removes
//     it (RemoveFinalizer; Modify too), and the garbage collector removes
//     any it finds so.
//   - An object already being deleted keeps its deletionTimestamp and
//     finalizers: a later delete writes nothing (AlreadyDeleting), unless
//     its finalizers are all gone, when it removes it.
//   - Any other object is removed (Removed); the collector then deletes its
//     dependents.
//
// ErrNotFound when there is no object at key; ErrPrecondition when
// o.UID names another. A conflicting write in between makes it read again
// and decide anew.
func (s *Client) DeleteWith(ctx context.Context, key string, o DeleteOptions) (Deletion, error) {
	return s.DeleteFrom(ctx, Raw{Key: key}, o)
}

// DeleteFrom is DeleteWith starting from raw, the object as the caller
// read it (from the cache, say): when it holds no finalizers, the delete
// is one compare-and-swap on its mod_revision, with no read. If raw is
// stale the swap is refused and DeleteFrom reads etcd and decides again,
// as DeleteWith does. An object gone meanwhile counts as Removed.
func (s *Client) DeleteFrom(ctx context.Context, raw Raw, o DeleteOptions) (Deletion, error) {
	fin, err := o.Propagation.finalizer()
	if err != nil {
		return 0, err
	}
	key := raw.Key
	for i := range maxConflictRetries {
		if i > 0 || raw.Value == nil {
			if raw, err = s.GetDirect(ctx, key); err != nil {
				return 0, err
			}
		}
		if o.ModRevision > 0 && raw.ModRevision != o.ModRevision {
			return 0, fmt.Errorf("delete %s: at revision %d, not %d: %w", key, raw.ModRevision, o.ModRevision, ErrConflict)
		}
		m, decoded := decodeMeta(raw.Value)
		if o.UID != "" && (!decoded || m.UID != o.UID) {
			return 0, fmt.Errorf("delete %s: uid %s, not %s: %w", key, m.UID, o.UID, ErrPrecondition)
		}
		finalizers := m.Finalizers
		switch {
		case m.IsDeleting() && len(finalizers) > 0:
			return AlreadyDeleting, nil
		case !m.IsDeleting() && fin != "" && !slices.Contains(finalizers, fin):
			finalizers = append(slices.Clone(finalizers), fin)
		}
		if len(finalizers) == 0 {
			// A value that is not an object has no finalizers either.
			err = s.removeAt(ctx, key, raw.ModRevision)
			if err == nil {
				return Removed, nil
			}
		} else {
			var b []byte
			b, err = withMeta(raw.Value, func(meta map[string]json.RawMessage) error {
				meta["deletionTimestamp"], _ = json.Marshal(time.Now().UTC().Format(time.RFC3339))
				meta["finalizers"], _ = json.Marshal(finalizers)
				return nil
			})
			if err != nil {
				return 0, fmt.Errorf("delete %s: %w", key, err)
			}
			if _, err = s.put(ctx, key, raw.ModRevision, b); err == nil {
				return Marked, nil
			}
		}
		if !errors.Is(err, ErrConflict) {
			return 0, err
		}
		if o.ModRevision > 0 {
			return 0, err
		}
	}
	return 0, fmt.Errorf("delete %s: gave up after %d conflicts: %w", key, maxConflictRetries, ErrConflict)
}

// removeAt removes key if it is still at modRev: nil when it is gone
// (removed now, or before), ErrConflict when it changed.
func (s *Client) removeAt(ctx context.Context, key string, modRev int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	resp, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses) > 0 && resp.Responses[0].GetResponseRange().GetCount() == 0 {
			return nil // already gone
		}
		return fmt.Errorf("delete %s: %w", key, ErrConflict)
	}
	s.wrote(ctx, resp.Header.Revision)
	return nil
}

// AddFinalizer adds the finalizer name to the object at key, if it still
// has uid ("" matches any) and lacks it. ErrDeleting when the object is
// being deleted, ErrNotFound when it is gone, ErrPrecondition when another
// object (uid) is at key. See Example_finalizer.
func (s *Client) AddFinalizer(ctx context.Context, key, uid, name string) error {
	return s.AddFinalizerFrom(ctx, Raw{Key: key}, uid, name)
}

// AddFinalizerFrom is AddFinalizer starting from raw, the object as the
// caller read it: the first attempt needs no read of its own.
func (s *Client) AddFinalizerFrom(ctx context.Context, raw Raw, uid, name string) error {
	if err := checkFinalizerName(name); err != nil {
		return err
	}
	return s.finalize(ctx, raw, uid, func(m *ObjectMeta) ([]string, error) {
		switch {
		case m.HasFinalizer(name):
			return nil, nil
		case m.IsDeleting():
			return nil, fmt.Errorf("add finalizer %s to %s: %w", name, raw.Key, ErrDeleting)
		}
		return append(slices.Clone(m.Finalizers), name), nil
	}, true)
}

// RemoveFinalizer takes the finalizer name off the object at key, if it
// still has uid ("" matches any). If the object is being deleted and that
// was its last finalizer, it removes the object, in the same
// compare-and-swap. An object gone, another at key or one without the
// finalizer is no error: there is nothing left to do.
func (s *Client) RemoveFinalizer(ctx context.Context, key, uid, name string) error {
	return s.RemoveFinalizerFrom(ctx, Raw{Key: key}, uid, name)
}

// RemoveFinalizerFrom is RemoveFinalizer starting from raw, the object as
// the caller read it.
func (s *Client) RemoveFinalizerFrom(ctx context.Context, raw Raw, uid, name string) error {
	return s.finalize(ctx, raw, uid, func(m *ObjectMeta) ([]string, error) {
		if !m.HasFinalizer(name) {
			return nil, nil
		}
		out := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == name })
		if out == nil {
			out = []string{}
		}
		return out, nil
	}, false)
}

// finalize sets the finalizers of the object raw names to what change
// returns (nil: nothing to do), retrying on conflict. With strict, a
// missing object or another uid is an error; otherwise nothing to do. An
// object being deleted left without finalizers is removed instead.
func (s *Client) finalize(ctx context.Context, raw Raw, uid string, change func(*ObjectMeta) ([]string, error), strict bool) error {
	key := raw.Key
	var err error
	for i := range maxConflictRetries {
		if i > 0 || raw.Value == nil {
			raw, err = s.GetDirect(ctx, key)
			if errors.Is(err, ErrNotFound) && !strict {
				return nil
			}
			if err != nil {
				return err
			}
		}
		m, decoded := decodeMeta(raw.Value)
		if !decoded {
			return fmt.Errorf("finalizers of %s: the stored value is not an object", key)
		}
		if uid != "" && m.UID != uid {
			if strict {
				return fmt.Errorf("finalizers of %s: uid %s, not %s: %w", key, m.UID, uid, ErrPrecondition)
			}
			return nil
		}
		finalizers, err := change(&m)
		if err != nil || finalizers == nil {
			return err
		}
		if m.IsDeleting() && len(finalizers) == 0 {
			err = s.removeAt(ctx, key, raw.ModRevision)
		} else {
			var b []byte
			b, err = withMeta(raw.Value, func(meta map[string]json.RawMessage) error {
				if len(finalizers) == 0 {
					delete(meta, "finalizers")
					return nil
				}
				var merr error
				meta["finalizers"], merr = json.Marshal(finalizers)
				return merr
			})
			if err != nil {
				return fmt.Errorf("finalizers of %s: %w", key, err)
			}
			_, err = s.put(ctx, key, raw.ModRevision, b)
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("finalizers of %s: gave up after %d conflicts: %w", key, maxConflictRetries, ErrConflict)
}

// decodeMeta reads the metadata of a stored value; false when the value
// is not an object with metadata this package reads.
func decodeMeta(value []byte) (ObjectMeta, bool) {
	var o struct {
		Metadata ObjectMeta `json:"metadata"`
	}
	if json.Unmarshal(value, &o) != nil {
		return ObjectMeta{}, false
	}
	return o.Metadata, true
}

// withMeta returns value with its metadata changed by change, every other
// member (of the object and of its metadata) kept as stored.
func withMeta(value []byte, change func(meta map[string]json.RawMessage) error) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(value, &top); err != nil || top == nil {
		return nil, fmt.Errorf("the stored value is not an object: %v", err)
	}
	meta := map[string]json.RawMessage{}
	if m, ok := top["metadata"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil || meta == nil {
			return nil, fmt.Errorf("its metadata is not an object: %v", err)
		}
	}
	if err := change(meta); err != nil {
		return nil, err
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	top["metadata"] = b
	return json.Marshal(top)
}

// metaOf returns the metadata of v if v is an object (a Metaobject), or
// nil.
func metaOf(v any) *ObjectMeta {
	if mo, ok := v.(Metaobject); ok {
		return mo.Meta()
	}
	return nil
}

// snapshotMeta copies what CheckMetaUpdate compares, of v if it is an
// object: Modify compares it with the changed object.
func snapshotMeta(v any) *ObjectMeta {
	m := metaOf(v)
	if m == nil {
		return nil
	}
	return &ObjectMeta{DeletionTimestamp: m.DeletionTimestamp, Finalizers: slices.Clone(m.Finalizers)}
}

// checkModify is CheckMetaUpdate of one Modify's change of the object at
// key, before (snapshotMeta) to v.
func checkModify(key string, before *ObjectMeta, v any) error {
	after := metaOf(v)
	if before == nil || after == nil {
		return nil
	}
	if err := CheckMetaUpdate(before, after); err != nil {
		return fmt.Errorf("modify %s: %w", key, err)
	}
	return nil
}

// finalized reports whether v is an object being deleted without
// finalizers left: it is not written but removed.
func finalized(v any) bool {
	m := metaOf(v)
	return m != nil && m.IsDeleting() && len(m.Finalizers) == 0
}
