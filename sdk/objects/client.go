package objects

// The Client: what it holds, how it is made and configured, the errors
// its calls return, and the types every call takes (Raw, OwnedBy,
// Metaobject).

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	observerclient "github.com/batonrun/baton/client/observer"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("objects: not found")

// ErrConflict is returned when a compare-and-swap finds the key changed (or,
// for Create, already present).
var ErrConflict = errors.New("objects: conflict")

// DefaultOpTimeout bounds one etcd or observer call unless the Client is
// told otherwise, so an unreachable etcd fails a reconcile quickly (and the
// queue retries it with backoff) instead of holding it until the reconcile's
// own timeout.
const DefaultOpTimeout = 5 * time.Second

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

// NewClient returns a Client that writes to etcd and reads through observer
// (or from etcd when observer is nil).
func NewClient(etcd *clientv3.Client, observer *observerclient.Client) *Client {
	if observer == nil {
		return NewClientWithCache(etcd, nil)
	}
	return NewClientWithCache(etcd, observerCache{observer})
}

// NewClientWithCache returns a Client that writes to etcd and reads through
// cache (or from etcd when cache is nil).
func NewClientWithCache(etcd *clientv3.Client, cache Cache) *Client {
	return &Client{etcd: etcd, cache: cache, opTimeout: DefaultOpTimeout}
}

// SetOpTimeout sets the bound of each etcd or observer call; call it before
// the Client is used.
func (s *Client) SetOpTimeout(d time.Duration) {
	if d > 0 {
		s.opTimeout = d
	}
}

// Metaobject is an object with metadata: every Object.
type Metaobject interface{ Meta() *ObjectMeta }
