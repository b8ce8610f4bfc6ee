// Package objects gives reconcilers typed access to the objects Baton keeps
// in etcd (/registry/<resource>/<namespace>/<name>, one JSON object each):
// ReplicaSets, Deployments, Jobs, StatefulSets and Pods.
//
// # Reads
//
// A Client reads through the observer's cache (ObserverService Get and List),
// never loading etcd with the reads of every worker. Each read asks for
// min_revision = the highest of the revision of its own writes (so a
// worker sees its own writes, though the cache lags etcd by a few
// milliseconds) and the revision on the read's context (AtLeast: a
// reconcile puts its lease's min_revision there, so it sees the change that
// announced its key, whichever observer announced it). A reconcile reads
// under Scope, which makes "its own writes" those of its reconciles of its
// key, not every write of the process. A Client built
// without an observer reads etcd itself; GetDirect and ListDirect always
// do. Reads counts both kinds.
//
// A cache read can be stale in one way that matters: it may not yet show an
// object that etcd has (deleted and created again under its name, say).
// Acting on a stale "not found" could delete a live object's children, so
// OwnerGone asks etcd itself before a controller deletes children for an
// owner it did not find, or whose uid is not the one the cache shows.
//
// # Deletes and finalizers
//
// Every delete follows Kubernetes' protocol (DeleteWith): an object that
// holds finalizers (metadata.finalizers), or is deleted with Foreground or
// Orphan propagation, gets metadata.deletionTimestamp and stays until its
// finalizers are gone; whoever removes the last one removes it
// (RemoveFinalizer). Baton's garbage collector deletes the dependents of
// deleted objects (their ownerReferences, by uid), so a controller deletes
// no children of its own when its object goes.
//
// # Writes
//
// Every write goes to etcd as a compare-and-swap: Create succeeds only if the
// key does not exist, Update and Delete only if the key's mod_revision is the
// one read. Modify and UpdateStatus read the object, apply a change and
// write it back, and on a conflict (someone wrote in between, or the read
// was a stale cache's) read again from etcd and retry instead of failing
// the reconcile; ModifyFrom and UpdateStatusFrom start from an object the
// caller has read already, from the cache. A Create that finds no uid sets
// metadata.uid.
//
// The Client owns metadata.generation, as the API server does: a create
// sets it to 1, a write that changes spec (the stored and the new spec
// compared as JSON values) raises the stored one by one, and any other
// write, a status write above all, keeps the stored one, whatever the
// object written says. A controller reports the generation it acted on as
// status.observedGeneration and never raises it itself.
//
// Before every create, update and status write of a kind whose schema it
// knows (a reference kind's, or one a declaration in etcd carries, read
// again when older than SchemaMaxAge), the Client fills in the schema's
// defaults and checks the object (client/schema); an invalid object is
// not written, and the error, ErrInvalid, names every bad field as the API
// server would. An object of a kind whose schema it does not know is
// written as it is; so is anything put into etcd by other means (etcdctl),
// which nothing checks.
//
//	st := objects.NewClient(etcdClient, observerClient)
//	rs, rev, err := objects.Get[objects.ReplicaSet](ctx, st, objects.Key("replicasets", "default", "web"))
//	pods, err := objects.List[objects.Pod](ctx, st, objects.Prefix("pods", "default"),
//		objects.OwnedBy{Namespace: "default", Kind: "ReplicaSet", Name: "web"})
package objects

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerclient "github.com/batonrun/baton/client/observer"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("objects: not found")

// ErrConflict is returned when a compare-and-swap finds the key changed (or,
// for Create, already present).
var ErrConflict = errors.New("objects: conflict")

// maxConflictRetries bounds the read-modify-write loop of Modify; a key
// written this often within one reconcile is contended beyond reason, and the
// reconcile is better retried later with backoff.
const maxConflictRetries = 16

// DefaultOpTimeout bounds one etcd or observer call unless the Client is
// told otherwise, so an unreachable etcd fails a reconcile quickly (and the
// queue retries it with backoff) instead of holding it until the reconcile's
// own timeout.
const DefaultOpTimeout = 5 * time.Second

// Key returns the etcd key of an object.
func Key(resource, namespace, name string) string {
	return kinds.RegistryPrefix + resource + "/" + namespace + "/" + name
}

// Prefix returns the key prefix of a resource's objects in a namespace.
func Prefix(resource, namespace string) string {
	return kinds.RegistryPrefix + resource + "/" + namespace + "/"
}

// SplitKey splits a queue key "namespace/name".
func SplitKey(key string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("objects: key %q is not namespace/name", key)
	}
	return ns, name, nil
}

// Raw is one stored object.
type Raw struct {
	Key         string
	Value       []byte
	ModRevision int64
}

// OwnedBy selects the children of one owner in List.
type OwnedBy struct {
	Namespace, Kind, Name string
	// UID, if set, must match too.
	UID string
}

// Client reads and writes objects. It is safe for concurrent use.
type Client struct {
	etcd  *clientv3.Client
	cache Cache // nil: read etcd
	// minRev is the newest etcd revision this Client has written or read
	// from etcd; cache reads wait for it (read-your-writes, and a child list
	// never older than its owner read from etcd).
	minRev atomic.Int64
	// opTimeout bounds each call (DefaultOpTimeout unless set).
	opTimeout time.Duration

	etcdReads, cacheReads atomic.Uint64

	recentMu sync.Mutex
	recent   map[string]written // by reconciled key (Scope)
	swept    int                // len(recent) after the last sweep

	schemas schemas // the declared kinds' (admit.go)
}

// Cache is what a Client reads through: the observer's (ObserverService Get
// and List), reflecting etcd at least up to minRev.
type Cache interface {
	// Get returns the object at key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key string, minRev int64) (Raw, error)
	// List returns the objects under prefix in key order, only the
	// children of owner if owner.Kind or owner.UID is set.
	List(ctx context.Context, prefix string, owner OwnedBy, minRev int64) ([]Raw, error)
}

// NewClient returns a Client that writes to etcd and reads through observer
// (or from etcd when observer is nil).
func NewClient(etcd *clientv3.Client, observer *observerclient.Client) *Client {
	if observer == nil {
		return NewClientWithCache(etcd, nil)
	}
	return NewClientWithCache(etcd, observerCache{observer})
}

// NewStoreWithCache returns a Client that writes to etcd and reads through
// cache (or from etcd when cache is nil).
func NewClientWithCache(etcd *clientv3.Client, cache Cache) *Client {
	return &Client{etcd: etcd, cache: cache, opTimeout: DefaultOpTimeout}
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

// atLeastKey is the context key of AtLeast's revision.
type atLeastKey struct{}

// AtLeast returns ctx with rev as the lowest etcd revision the Client's
// cache reads under it may reflect (a reconcile passes its lease's
// MinRevision). A lower revision than one already on ctx changes nothing.
func AtLeast(ctx context.Context, rev int64) context.Context {
	if rev <= revisionOf(ctx) {
		return ctx
	}
	return context.WithValue(ctx, atLeastKey{}, rev)
}

func revisionOf(ctx context.Context) int64 {
	rev, _ := ctx.Value(atLeastKey{}).(int64)
	return rev
}

// readRevision is the min_revision of a cache read under ctx: the scope's
// (Scope), or without one the newest revision this Client has written;
// and at least AtLeast's.
func (s *Client) readRevision(ctx context.Context) int64 {
	if sc := scopeOf(ctx); sc != nil {
		return max(sc.rev.Load(), revisionOf(ctx))
	}
	return max(s.minRev.Load(), revisionOf(ctx))
}

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

// SetOpTimeout sets the bound of each etcd or observer call; call it before
// the Client is used.
func (s *Client) SetOpTimeout(d time.Duration) {
	if d > 0 {
		s.opTimeout = d
	}
}

// MinRevision is the revision every cache read of this Client waits for: the
// newest it has written or read from etcd.
func (s *Client) MinRevision() int64 { return s.minRev.Load() }

// wrote notes a revision this Client wrote (or read from etcd) under ctx:
// cache reads without a scope wait for it from now on, and so do those of
// ctx's scope and of later scopes of its key.
func (s *Client) wrote(ctx context.Context, rev int64) {
	raise(&s.minRev, rev)
	if sc := scopeOf(ctx); sc != nil {
		raise(&sc.rev, rev)
		s.remember(sc.key, rev)
	}
}

// raise sets v to rev if rev is higher.
func raise(v *atomic.Int64, rev int64) {
	for {
		cur := v.Load()
		if rev <= cur || v.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// A scope is one reconcile of one key (Scope): the revision its cache
// reads wait for.
type scope struct {
	key string
	rev atomic.Int64
}

type scopeKey struct{}

func scopeOf(ctx context.Context) *scope {
	sc, _ := ctx.Value(scopeKey{}).(*scope)
	return sc
}

// recentFor is how long a Client remembers the revision of its last write
// in a reconcile of a key (Scope): far longer than the observer's cache
// takes to show a write, after which remembering it makes no read wait.
const recentFor = 30 * time.Second

// written is the revision of a key's reconciles' last write, and when.
type written struct {
	rev int64
	at  time.Time
}

// Scope returns ctx for one reconcile of key, the queue key a lease names,
// with minRev the lease's min_revision (reconcile.Request's MinRevision):
// the Client's cache reads under it reflect at least minRev, every write
// made under it, and the writes this Client made in earlier reconciles of
// key (for recentFor), and no other write. Without a scope a cache read
// waits for every write this Client ever made, which on a busy worker is
// always the newest revision, and every read waits for the cache to reach
// it: 30 to 50 ms a reconcile in a cold start of thousands of objects,
// where etcd's own write takes a few.
//
// The earlier reconciles of key matter: a ReplicaSet's reconcile that
// created pods must not be followed by one that lists the pods from a
// cache without them and creates them again. (A reconcile of key in
// another worker process does not know this one's writes; the lease's
// min_revision, the announcement of those writes, covers it once the
// observer has seen them.)
func (s *Client) Scope(ctx context.Context, key string, minRev int64) context.Context {
	sc := &scope{key: key}
	s.recentMu.Lock()
	if w, ok := s.recent[key]; ok {
		sc.rev.Store(w.rev)
	}
	s.recentMu.Unlock()
	return context.WithValue(AtLeast(ctx, minRev), scopeKey{}, sc)
}

// remember notes rev as key's reconciles' last write, and forgets what
// is older than recentFor once the table has grown since the last sweep.
func (s *Client) remember(key string, rev int64) {
	now := time.Now()
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	if s.recent == nil {
		s.recent = map[string]written{}
	}
	if w := s.recent[key]; rev > w.rev {
		s.recent[key] = written{rev: rev, at: now}
	}
	if len(s.recent) < 2*s.swept+1024 {
		return
	}
	for k, w := range s.recent {
		if now.Sub(w.at) > recentFor {
			delete(s.recent, k)
		}
	}
	s.swept = len(s.recent)
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

// Metaobject is an object with metadata: every Object.
type Metaobject interface{ Meta() *ObjectMeta }

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

// decodeKnown decodes stored into a T and reports whether T knows every
// field in it, at every level. Then encoding the T alone loses nothing, and
// mergeTop's two decodes and second encode are saved: for the pod runtime,
// whose one write per reconcile goes through Modify, they were 5% of the
// worker's CPU in the cold start. Otherwise it decodes again leniently.
func decodeKnown[T any](stored []byte) (v T, known bool, err error) {
	d := json.NewDecoder(bytes.NewReader(stored))
	d.DisallowUnknownFields()
	if d.Decode(&v) == nil && !d.More() {
		return v, true, nil
	}
	var zero T
	v = zero
	return v, false, json.Unmarshal(stored, &v)
}

// mergeTop encodes v over the top-level fields of stored.
func mergeTop(stored []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var top, upd map[string]json.RawMessage
	if json.Unmarshal(stored, &top) != nil || top == nil {
		return b, nil
	}
	if err := json.Unmarshal(b, &upd); err != nil {
		return nil, err
	}
	for k, val := range upd {
		top[k] = val
	}
	return json.Marshal(top)
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
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

// NewUID returns a random RFC 4122 version 4 UUID.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// nameAlphabet is Kubernetes' alphabet for generated name suffixes: lowercase
// alphanumerics without vowels and look-alikes, so no words are spelled.
const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// RandomSuffix returns 5 random lowercase alphanumerics.
func RandomSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = nameAlphabet[int(b[i])%len(nameAlphabet)]
	}
	return string(b[:])
}
