package checkpoint

import (
	"slices"
	"sync"

	"github.com/batonrun/baton/services/observer/internal/cache"
)

// Ledger keeps what the known-key record needs for one prefix: a record
// stored with checkpoint C must hold every key that existed under the
// prefix at C. The cache reflects a later revision, so the ledger also
// remembers the keys deleted since the last checkpoint stored (tomb); the
// cache's keys and tomb together hold every key that existed at any
// revision from that checkpoint on. A delete moves a key from one to the
// other, so only a key new to both (an addition) makes the stored record
// stale, and only for checkpoints at or after the revision it may have
// appeared at.
//
// The prefix's informer writes the cache through the Ledger (it is the
// informer's Writer), under the ledger's lock, so a snapshot sees the
// cache and tomb at one moment.
type Ledger struct {
	cache  *cache.Cache
	prefix string

	mu   sync.Mutex
	tomb map[string]int64 // deleted key → revision by which it was gone
	// fresh is the lowest revision an addition since the last snapshot may
	// have appeared at (0: none); held is the same for additions in a
	// snapshot whose record is not known to be stored yet.
	fresh, held int64
	// floor is the revision of the last list: a record cannot be valid
	// below it (keys deleted before a list, after the revision the cache
	// reflected, were never seen).
	floor int64
	// changes counts the keys added and deleted; snapshot is its value at
	// the last KnownKeys, recorded at the last one stored. A prefix whose
	// keys have not changed since keeps its part of the stored record.
	changes, snapshot, recorded uint64
}

func minSet(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	default:
		return min(a, b)
	}
}

// NewLedger returns the ledger of prefix, whose objects are kept in c.
func NewLedger(c *cache.Cache, prefix string) *Ledger { return &Ledger{cache: c, prefix: prefix} }

// Prefix returns the ledger's prefix.
func (l *Ledger) Prefix() string { return l.prefix }

// Put stores obj in the cache and returns the object it replaced; a key
// new to the ledger may have existed from revision since on.
func (l *Ledger) Put(obj *cache.Object, since int64) *cache.Object {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cache.Put(obj)
	if old == nil {
		l.changes++
		if _, ok := l.tomb[obj.Key]; ok {
			delete(l.tomb, obj.Key) // back: it is in the cache's keys again
		} else {
			l.fresh = minSet(l.fresh, since)
		}
	}
	return old
}

// Delete removes key from the cache, remembering it was gone by rev, and
// returns the object removed.
func (l *Ledger) Delete(key string, rev int64) *cache.Object {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cache.Delete(key)
	if old != nil {
		l.changes++
		if l.tomb == nil {
			l.tomb = map[string]int64{}
		}
		l.tomb[key] = rev
	}
	return old
}

// Listed records that a list made the cache equal to etcd at rev: no
// record is valid below it.
func (l *Ledger) Listed(rev int64) {
	l.mu.Lock()
	l.floor = max(l.floor, rev)
	l.mu.Unlock()
}

// KnownKeys returns the keys for a known-key record, sorted: every key in
// the cache under the prefix and every key deleted since the last
// checkpoint stored. A record of them is valid at any revision from
// Floor() up to the revision the cache reflected before the call. Call
// Recorded once the record is stored.
func (l *Ledger) KnownKeys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Sized by what the prefix holds: the cache holds every prefix's
	// objects, and a record asks every prefix for its keys.
	var keys []string
	l.cache.Range(l.prefix, func(o *cache.Object) bool {
		keys = append(keys, o.Key)
		return true
	})
	if len(l.tomb) > 0 {
		gone := make([]string, 0, len(l.tomb))
		for k := range l.tomb {
			gone = append(gone, k)
		}
		slices.Sort(gone)
		keys = mergeSorted(keys, gone)
	}
	l.held, l.fresh = minSet(l.held, l.fresh), 0
	l.snapshot = l.changes
	return keys
}

// Changed reports whether a key was added or deleted since the last
// KnownKeys whose record was stored (or none was): if not, the stored
// record still holds exactly the prefix's keys.
func (l *Ledger) Changed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changes != l.recorded
}

// mergeSorted merges two sorted lists without common elements.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0] < b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// Unrecorded returns the lowest revision an addition not in a stored
// record may have appeared at (0: none). The stored record is valid at a
// revision below it; a checkpoint at or past it needs a new record.
func (l *Ledger) Unrecorded() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return minSet(l.held, l.fresh)
}

// Floor returns the revision of the last list: no record is valid below
// it, so no checkpoint is stored below it.
func (l *Ledger) Floor() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.floor
}

// Recorded tells the ledger that the checkpoint rev is stored, with a
// record of the last KnownKeys if wrote is true (false: the record keeps
// what it held for the prefix, or the checkpoint moved alone). Keys deleted by rev are
// forgotten: no later record needs them.
func (l *Ledger) Recorded(rev int64, wrote bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wrote {
		l.held = 0
		l.recorded = l.snapshot
	}
	for k, d := range l.tomb {
		if d <= rev {
			delete(l.tomb, k)
		}
	}
}
