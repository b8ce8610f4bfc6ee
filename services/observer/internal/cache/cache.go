// Package cache is the observer's copy of the watched objects: every key
// under the watched prefixes with its value and mod revision, ordered by key,
// indexed by owner (uid, and kind/namespace/name), and the revision each
// prefix's watch has reached. Readers can wait until a prefix has reached a
// revision (read-your-writes for workers that just wrote to etcd).
//
// Objects are immutable once stored: a change replaces the *Object, so a
// reader may keep one without copying.
package cache

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonrun/baton/services/observer/internal/object"
	"github.com/google/btree"
)

// Object is one cached etcd value. Never modify it.
type Object struct {
	Key         string
	Value       []byte
	ModRevision int64
	Meta        object.Meta
	// Namespace is the object's namespace as the owner index uses it.
	Namespace string
}

// Owner selects children in List.
type Owner struct {
	// UID matches ownerReferences[].uid.
	UID string
	// Kind and Name match ownerReferences[].kind and .name, together.
	Kind, Name string
	// Namespace, with Kind and Name, also requires the child (and so the
	// owner) to be in it; empty means any.
	Namespace string
}

func (o Owner) empty() bool { return o.UID == "" && o.Kind == "" && o.Name == "" }

type set map[string]struct{}

// Cache is safe for concurrent use.
type Cache struct {
	mu      sync.RWMutex
	tree    *btree.BTreeG[*Object]
	byUID   map[string]set // owner uid → child keys
	byOwner map[string]set // owner kind \x00 name → child keys
	revs    map[string]int64
	changed chan struct{} // closed and replaced whenever a revision advances
}

// New returns an empty cache for the given watched prefixes, each at
// revision 0.
func New(prefixes []string) *Cache {
	c := &Cache{
		tree:    btree.NewG(32, func(a, b *Object) bool { return a.Key < b.Key }),
		byUID:   map[string]set{},
		byOwner: map[string]set{},
		revs:    map[string]int64{},
		changed: make(chan struct{}),
	}
	for _, p := range prefixes {
		c.revs[p] = 0
	}
	return c
}

// AddPrefix starts keeping prefix (at revision 0, like New's); a prefix
// already kept is left as it is.
func (c *Cache) AddPrefix(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.revs[prefix]; !ok {
		c.revs[prefix] = 0
	}
}

// RemovePrefix stops keeping prefix: its objects and its revision go (its
// watch has stopped). It returns the objects removed.
func (c *Cache) RemovePrefix(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var gone []*Object
	c.tree.AscendGreaterOrEqual(&Object{Key: prefix}, func(o *Object) bool {
		if !strings.HasPrefix(o.Key, prefix) {
			return false
		}
		gone = append(gone, o)
		return true
	})
	for _, o := range gone {
		c.tree.Delete(o)
		c.unindex(o)
	}
	delete(c.revs, prefix)
	// A read waiting for it waits no more: it holds nothing now.
	close(c.changed)
	c.changed = make(chan struct{})
	return len(gone)
}

func ownerIndexKey(kind, name string) string { return kind + "\x00" + name }

// Put stores obj (replacing any object at its key) and returns the one it
// replaced.
func (c *Cache) Put(obj *Object) (old *Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, _ = c.tree.ReplaceOrInsert(obj)
	if old != nil {
		c.unindex(old)
	}
	c.index(obj)
	return old
}

// Delete removes the object at key and returns it (nil if absent).
func (c *Cache) Delete(key string) (old *Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, _ = c.tree.Delete(&Object{Key: key})
	if old != nil {
		c.unindex(old)
	}
	return old
}

func (c *Cache) index(o *Object) {
	for _, r := range o.Meta.Owners {
		add(c.byOwner, ownerIndexKey(r.Kind, r.Name), o.Key)
		if r.UID != "" {
			add(c.byUID, r.UID, o.Key)
		}
	}
}

func (c *Cache) unindex(o *Object) {
	for _, r := range o.Meta.Owners {
		remove(c.byOwner, ownerIndexKey(r.Kind, r.Name), o.Key)
		if r.UID != "" {
			remove(c.byUID, r.UID, o.Key)
		}
	}
}

func add(idx map[string]set, k, v string) {
	s := idx[k]
	if s == nil {
		s = set{}
		idx[k] = s
	}
	s[v] = struct{}{}
}

func remove(idx map[string]set, k, v string) {
	if s := idx[k]; s != nil {
		delete(s, v)
		if len(s) == 0 {
			delete(idx, k)
		}
	}
}

// Get returns the object at key.
func (c *Cache) Get(key string) (*Object, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.tree.Get(&Object{Key: key})
}

// Len returns the number of cached objects.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.tree.Len()
}

// Range calls fn for every object under prefix, in key order, until fn
// returns false. It holds a read lock: fn must not call back into c.
func (c *Cache) Range(prefix string, fn func(*Object) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	c.tree.AscendGreaterOrEqual(&Object{Key: prefix}, func(o *Object) bool {
		if !strings.HasPrefix(o.Key, prefix) {
			return false
		}
		return fn(o)
	})
}

// Snapshot returns the objects under prefix, in key order.
func (c *Cache) Snapshot(prefix string) []*Object {
	var out []*Object
	c.Range(prefix, func(o *Object) bool { out = append(out, o); return true })
	return out
}

// List returns up to limit objects under prefix whose key is after `after`
// (empty: from the start), in key order, restricted to the children of
// owner unless owner is empty; more reports whether objects follow.
func (c *Cache) List(prefix string, owner Owner, after string, limit int) (items []*Object, more bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if owner.empty() {
		start := prefix
		if after >= start {
			start = after + "\x00"
		}
		c.tree.AscendGreaterOrEqual(&Object{Key: start}, func(o *Object) bool {
			if !strings.HasPrefix(o.Key, prefix) {
				return false
			}
			if len(items) == limit {
				more = true
				return false
			}
			items = append(items, o)
			return true
		})
		return items, more
	}
	// Children come from the smallest index that applies, then every
	// condition is checked on the object itself.
	var cand set
	if owner.UID != "" {
		cand = c.byUID[owner.UID]
	} else {
		cand = c.byOwner[ownerIndexKey(owner.Kind, owner.Name)]
	}
	keys := make([]string, 0, len(cand))
	for k := range cand {
		if strings.HasPrefix(k, prefix) && k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		o, ok := c.tree.Get(&Object{Key: k})
		if !ok || !owns(owner, o) {
			continue
		}
		if len(items) == limit {
			return items, true
		}
		items = append(items, o)
	}
	return items, false
}

func owns(owner Owner, o *Object) bool {
	if owner.Namespace != "" && o.Namespace != owner.Namespace {
		return false
	}
	for _, r := range o.Meta.Owners {
		if (owner.UID == "" || r.UID == owner.UID) &&
			(owner.Kind == "" || r.Kind == owner.Kind) &&
			(owner.Name == "" || r.Name == owner.Name) {
			return true
		}
	}
	return false
}

// Prefixes returns the watched prefixes, sorted.
func (c *Cache) Prefixes() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.revs))
	for p := range c.revs {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// PrefixOf returns the watched prefix holding key.
func (c *Cache) PrefixOf(key string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for p := range c.revs {
		if strings.HasPrefix(key, p) {
			return p, true
		}
	}
	return "", false
}

// Covering returns the watched prefixes whose keys can lie under prefix
// (those inside it, or the one containing it).
func (c *Cache) Covering(prefix string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for p := range c.revs {
		if strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// SetRevision records that the cache reflects etcd up to rev for prefix.
// Revisions only move forward; a lower one is ignored.
func (c *Cache) SetRevision(prefix string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.revs[prefix]; !ok || rev <= cur {
		return
	}
	c.revs[prefix] = rev
	close(c.changed)
	c.changed = make(chan struct{})
}

// Revision returns the lowest revision reached by the given prefixes (all
// watched prefixes when none are given), those no longer kept left out:
// the cache reflects etcd at least up to it for all of them.
func (c *Cache) Revision(prefixes ...string) int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.revisionLocked(prefixes)
}

func (c *Cache) revisionLocked(prefixes []string) int64 {
	if len(prefixes) == 0 {
		for p := range c.revs {
			prefixes = append(prefixes, p)
		}
	}
	var low int64 = -1
	for _, p := range prefixes {
		if r, ok := c.revs[p]; ok && (low < 0 || r < low) {
			low = r
		}
	}
	return max(low, 0)
}

// reachedLocked reports whether every given prefix still kept (every one
// when none are given) has reached rev. A prefix removed meanwhile holds
// nothing to wait for: a read over many prefixes (a List of /registry/)
// must not wait for one whose declaration went while it waited.
func (c *Cache) reachedLocked(rev int64, prefixes []string) bool {
	if len(prefixes) == 0 {
		return c.revisionLocked(nil) >= rev
	}
	for _, p := range prefixes {
		if r, ok := c.revs[p]; ok && r < rev {
			return false
		}
	}
	return true
}

// Wait blocks until every given prefix still kept has reached rev, or ctx
// ends (its error is returned). While waiting it calls nudge, if set, at
// once and then every NudgeInterval: the informers then ask etcd for a
// progress notification, so an idle prefix catches up without waiting for
// the periodic one (etcd ignores a request while a watch is catching up,
// hence the repeats).
func (c *Cache) Wait(ctx context.Context, rev int64, nudge func(), prefixes ...string) error {
	var tick <-chan time.Time
	for {
		c.mu.RLock()
		reached := c.reachedLocked(rev, prefixes)
		ch := c.changed
		c.mu.RUnlock()
		if reached {
			return nil
		}
		if nudge != nil && tick == nil {
			nudge()
			t := time.NewTicker(NudgeInterval)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-tick:
			nudge()
		}
	}
}

// NudgeInterval is how often Wait repeats its nudge.
const NudgeInterval = 200 * time.Millisecond
