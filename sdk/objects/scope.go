package objects

// Read-your-writes: the revision each cache read waits for (AtLeast on a
// context, the Client's own writes, and a reconcile's Scope), and what a
// Client remembers of its writes to make it.

import (
	"context"
	"sync/atomic"
	"time"
)

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
