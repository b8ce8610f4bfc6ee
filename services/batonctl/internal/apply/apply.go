// Package apply writes manifests to etcd the way the design (docs/design.md)
// asks every client to: the object's metadata.uid is set when absent,
// metadata.generation is bumped when spec changes, the stored status is kept
// as it is (status has one writer, the controller), and every write is a
// compare-and-swap on the key's mod_revision, retried on conflict with a
// fresh read, so an apply never overwrites a controller's concurrent status
// update.
package apply

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Outcome says what an apply did, in kubectl's words.
type Outcome string

// Outcomes.
const (
	Created    Outcome = "created"
	Configured Outcome = "configured"
	Unchanged  Outcome = "unchanged"
)

// ErrUIDMismatch is returned when a manifest names a uid other than the
// stored object's: it describes a different object that had the same name.
var ErrUIDMismatch = errors.New("apply: metadata.uid does not match the stored object")

// ErrFinalizerOnDeleting is returned when a manifest adds a finalizer to
// an object being deleted: it would hold back a deletion already under way
// (Kubernetes refuses it too).
var ErrFinalizerOnDeleting = errors.New("apply: a finalizer cannot be added to an object being deleted")

// ErrNotFound is returned by Delete when there is no object at the key.
var ErrNotFound = errors.New("not found")

// maxAttempts bounds the compare-and-swap retries of one apply. Conflicts
// come from controllers writing status; a handful of rounds always wins.
const maxAttempts = 50

// Apply stores desired at key: it creates the object, or updates the stored
// one's metadata and spec, keeping its status. now stamps
// metadata.creationTimestamp on creation.
func Apply(ctx context.Context, kv clientv3.KV, key string, desired map[string]any, now time.Time) (Outcome, error) {
	return mergeCAS(ctx, kv, key, now, "applying", func(map[string]any, bool) (map[string]any, error) {
		return desired, nil
	})
}

// Update changes the stored object at key as change says, and stores it as
// Apply would store the result: metadata.generation bumped when spec
// changed, the status kept, in a compare-and-swap on the revision read,
// retried (change called again on a fresh read) when another write came in
// between. It returns ErrNotFound when there is no object at key, and
// change's error as it is, nothing written.
func Update(ctx context.Context, kv clientv3.KV, key string, now time.Time, change func(obj map[string]any) error) (Outcome, error) {
	return mergeCAS(ctx, kv, key, now, "updating", func(stored map[string]any, exists bool) (map[string]any, error) {
		if !exists {
			return nil, ErrNotFound
		}
		desired := deepCopy(stored)
		if err := change(desired); err != nil {
			return nil, err
		}
		return desired, nil
	})
}

// mergeCAS is Apply's and Update's loop: read the object at key, ask
// desiredOf for what to store over it (stored is nil when exists is
// false; its error is returned as it is), Merge, and write the result in
// a compare-and-swap on the revision read, again on a fresh read after a
// short, growing pause while another write wins (a controller writing
// status), at most maxAttempts times. doing names the operation in the
// conflict error.
func mergeCAS(ctx context.Context, kv clientv3.KV, key string, now time.Time, doing string, desiredOf func(stored map[string]any, exists bool) (map[string]any, error)) (Outcome, error) {
	var lastErr error
	for attempt := range maxAttempts {
		if attempt > 0 {
			// A short, growing pause lets the controller's write finish.
			t := time.NewTimer(time.Duration(attempt) * 5 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", errors.Join(lastErr, ctx.Err())
			case <-t.C:
			}
		}
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return "", fmt.Errorf("get %s: %w", key, err)
		}
		var (
			stored map[string]any
			cmp    = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		)
		exists := len(resp.Kvs) > 0
		if exists {
			if stored, err = Decode(resp.Kvs[0].Value); err != nil {
				return "", fmt.Errorf("stored object at %s: %w", key, err)
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		desired, err := desiredOf(stored, exists)
		if err != nil {
			return "", err
		}
		merged, outcome, err := Merge(stored, desired, now)
		if err != nil {
			return "", err
		}
		if outcome == Unchanged {
			return Unchanged, nil
		}
		val, err := json.Marshal(merged)
		if err != nil {
			return "", fmt.Errorf("encode %s: %w", key, err)
		}
		txn, err := kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return "", fmt.Errorf("write %s: %w", key, err)
		}
		if txn.Succeeded {
			return outcome, nil
		}
		lastErr = fmt.Errorf("write %s: conflict: the object changed while %s", key, doing)
	}
	return "", fmt.Errorf("%w (gave up after %d attempts)", lastErr, maxAttempts)
}

// Merge computes the object to store when applying desired over stored (nil
// when there is none). desired's status is ignored; the stored status is
// kept. metadata fields the manifest does not set (ownerReferences a
// controller wrote, the uid, the creation time) are kept too.
func Merge(stored, desired map[string]any, now time.Time) (map[string]any, Outcome, error) {
	out := deepCopy(desired)
	delete(out, "status")
	meta, _ := out["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		out["metadata"] = meta
	}
	// metadata.deletionTimestamp is the delete protocol's alone: a
	// manifest neither sets it nor clears it (one read with get -o yaml
	// carries the stored value, which is kept as it is).
	delete(meta, "deletionTimestamp")
	if stored == nil {
		if _, ok := meta["uid"]; !ok {
			meta["uid"] = newUID()
		}
		meta["generation"] = json.Number("1")
		if _, ok := meta["creationTimestamp"]; !ok {
			meta["creationTimestamp"] = now.UTC().Format(time.RFC3339)
		}
		return out, Created, nil
	}

	oldMeta, _ := stored["metadata"].(map[string]any)
	if uid, ok := meta["uid"]; ok && oldMeta != nil && oldMeta["uid"] != nil && uid != oldMeta["uid"] {
		return nil, "", fmt.Errorf("%w (manifest %v, stored %v)", ErrUIDMismatch, uid, oldMeta["uid"])
	}
	if deleting, _ := oldMeta["deletionTimestamp"].(string); deleting != "" {
		if f := addedFinalizers(oldMeta["finalizers"], meta["finalizers"]); len(f) > 0 {
			return nil, "", fmt.Errorf("%w (it is being deleted since %s; adding %v)", ErrFinalizerOnDeleting, deleting, f)
		}
	}
	merged := deepCopy(oldMeta)
	if merged == nil {
		merged = map[string]any{}
	}
	maps.Copy(merged, meta)
	if merged["uid"] == nil {
		merged["uid"] = newUID()
	}
	gen := generation(oldMeta)
	if !reflect.DeepEqual(normalize(stored["spec"]), normalize(out["spec"])) || gen == 0 {
		gen++
	}
	merged["generation"] = json.Number(fmt.Sprint(gen))
	out["metadata"] = merged
	if st, ok := stored["status"]; ok {
		out["status"] = deepCopy(map[string]any{"s": st})["s"]
	}
	if reflect.DeepEqual(normalize(out), normalize(stored)) {
		return stored, Unchanged, nil
	}
	return out, Configured, nil
}

// Cascade says what a delete does to the objects that name the deleted
// one as owner (kubectl's --cascade; the design's propagation).
type Cascade string

// The cascades. The garbage collector carries out the last two, by the
// finalizers of sdk/objects' protocol.
const (
	// Background removes the object at once; the collector then deletes
	// what it owns.
	Background Cascade = "background"
	// Foreground marks the object deleted with the finalizer
	// foregroundDeletion: the collector deletes what it owns first, then
	// the object.
	Foreground Cascade = "foreground"
	// Orphan marks the object deleted with the finalizer orphan: the
	// collector takes its references out of what it owns, which stays,
	// then removes the object.
	Orphan Cascade = "orphan"
)

// ParseCascade reads --cascade's value.
func ParseCascade(s string) (Cascade, error) {
	switch c := Cascade(s); c {
	case Background, Foreground, Orphan:
		return c, nil
	}
	return "", fmt.Errorf("--cascade must be background, foreground or orphan, not %q", s)
}

// finalizer is the finalizer c puts on the object it deletes, or "".
func (c Cascade) finalizer() string {
	switch c {
	case Foreground:
		return "foregroundDeletion"
	case Orphan:
		return "orphan"
	}
	return ""
}

// Deletion is what Delete did.
type Deletion string

// Deletions.
const (
	// Removed: the key is gone.
	Removed Deletion = "deleted"
	// Marked: the object got metadata.deletionTimestamp (and the
	// cascade's finalizer) and stays until its finalizers are gone.
	Marked Deletion = "marked for deletion"
	// AlreadyDeleting: the object was being deleted already; nothing
	// was written.
	AlreadyDeleting Deletion = "already being deleted"
)

// Delete deletes the object at key by the protocol every deleter follows
// (docs/design.md, "Deleting, finalizers and the garbage collector";
// sdk/objects.DeleteWith is the same for controllers): an object that
// holds finalizers, or is deleted with cascade Foreground or Orphan, is
// not removed but gets metadata.deletionTimestamp and the cascade's
// finalizer; one already being deleted is left as it is; any other is
// removed. ErrNotFound if there is no object. A non-empty uid is a
// precondition: an object at key with another uid (one re-created under
// the same name since the manifest was written) is left alone and
// ErrUIDMismatch returned. Like every write, the delete is a
// compare-and-swap on the mod_revision it read.
func Delete(ctx context.Context, kv clientv3.KV, key, uid string, cascade Cascade) (Deletion, error) {
	if _, err := ParseCascade(string(cascade)); err != nil {
		return "", err
	}
	fin := cascade.finalizer()
	for range maxAttempts {
		resp, err := kv.Get(ctx, key)
		if err != nil {
			return "", fmt.Errorf("get %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			return "", ErrNotFound
		}
		rev := resp.Kvs[0].ModRevision
		stored, decodeErr := Decode(resp.Kvs[0].Value)
		meta, _ := stored["metadata"].(map[string]any)
		if uid != "" {
			if decodeErr != nil {
				return "", fmt.Errorf("stored object at %s: %w", key, decodeErr)
			}
			if got, _ := meta["uid"].(string); got != uid {
				return "", fmt.Errorf("%w (manifest %s, stored %s)", ErrUIDMismatch, uid, got)
			}
		}
		deleting, _ := meta["deletionTimestamp"].(string)
		var finalizers []any
		if f, ok := meta["finalizers"].([]any); ok {
			finalizers = f
		}
		switch {
		case stored == nil:
			// Not an object: it holds no finalizers, and its key goes.
		case deleting != "" && len(finalizers) > 0:
			return AlreadyDeleting, nil
		case deleting == "" && fin != "" && !slices.Contains(finalizers, any(fin)):
			finalizers = append(slices.Clone(finalizers), fin)
		}
		var txn *clientv3.TxnResponse
		outcome := Removed
		if len(finalizers) == 0 {
			// A value that is not an object has no finalizers either.
			txn, err = kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpDelete(key)).Commit()
		} else {
			if meta == nil {
				meta = map[string]any{}
				stored["metadata"] = meta
			}
			meta["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339)
			meta["finalizers"] = finalizers
			b, merr := json.Marshal(stored)
			if merr != nil {
				return "", fmt.Errorf("encode %s: %w", key, merr)
			}
			outcome = Marked
			txn, err = kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, string(b))).Commit()
		}
		if err != nil {
			return "", fmt.Errorf("delete %s: %w", key, err)
		}
		if txn.Succeeded {
			return outcome, nil
		}
	}
	return "", fmt.Errorf("delete %s: conflict: the object kept changing (gave up after %d attempts)", key, maxAttempts)
}

// Decode parses a stored object, keeping numbers exact.
func Decode(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

func generation(meta map[string]any) int64 {
	if meta == nil {
		return 0
	}
	switch g := meta["generation"].(type) {
	case json.Number:
		n, _ := g.Int64()
		return n
	case float64:
		return int64(g)
	}
	return 0
}

// normalize makes two values that encode to the same JSON compare equal
// (e.g. json.Number("3") from a manifest and from etcd).
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	_ = dec.Decode(&out)
	return out
}

func deepCopy(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := normalize(m).(map[string]any)
	return out
}

// newUID returns a random (version 4) UUID.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// addedFinalizers returns the finalizers in desired that stored does not
// hold (both metadata.finalizers as decoded; anything but a list holds
// none).
func addedFinalizers(stored, desired any) []any {
	have, _ := stored.([]any)
	want, _ := desired.([]any)
	var added []any
	for _, f := range want {
		if !slices.Contains(have, f) {
			added = append(added, f)
		}
	}
	return added
}
