package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/ratelog"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Name is the collector's name among baton-worker's controllers
// (--controllers), kube-controller-manager's, and its queue's.
const Name = kinds.GarbageCollectorQueue

// foregroundRecheck is how soon an object deleted in the foreground is
// looked at again while dependents remain: the collector does not hear of
// a dependent's deletion under its owner's key, so it polls, as long as
// the wait lasts.
const foregroundRecheck = time.Second

// maxBlocked bounds the keys the collector remembers as waiting for a kind
// it does not know (an owner reference to an undeclared kind), to look at
// them again at once when the kind is declared. Past it they wait for the
// queue's retry.
const maxBlocked = 10000

// errUnknownKind says that an object's owner references name a kind the
// collector does not know (no rule in force names it): whether the owner
// lives cannot be told, so the object is left alone and looked at again.
var errUnknownKind = errors.New("an owner reference names a kind no declaration in force names")

// unknownKindsError is errUnknownKind with the kinds it names.
type unknownKindsError struct {
	obj   string
	kinds []string
}

func (e *unknownKindsError) Error() string {
	return fmt.Sprintf("%s: owner kind %s: %v", e.obj, strings.Join(e.kinds, ", "), errUnknownKind)
}

func (e *unknownKindsError) Is(target error) bool { return target == errUnknownKind }

// Options are what a Collector needs.
type Options struct {
	// Objects reads and writes the objects (etcd, through the observer's
	// cache). Required.
	Objects *objects.Client
	// Log receives the collector's decisions; nil discards. Failures that
	// repeat are logged once per cause per ratelog.DefaultInterval.
	Log *slog.Logger
	// Kinds says which kinds the observer feeds the collector's queue
	// (ObserverKinds); nil: the reference kinds alone, which is all a
	// worker without an observer can know.
	Kinds KindSource
	// Etcd is where Run deletes the per-kind declarations of earlier
	// versions and watches the declarations, to ask Kinds again when they
	// change. Required with Kinds; nil (without Kinds): Run does neither.
	Etcd *clientv3.Client
}

// Collector is the garbage collector: a reconcile.Reconciler of
// kinds.GarbageCollectorQueue, whose Run follows the kinds it collects.
type Collector struct {
	o        Options
	log      *slog.Logger
	failures *ratelog.Logger
	kinds    *table

	mu      sync.Mutex
	blocked map[string][]string // keys waiting for kinds it does not know → those kinds
	learned chan struct{}       // kinds were added: look at blocked again
}

var _ reconcile.Reconciler = (*Collector)(nil)

// New returns a collector that knows the reference kinds.
func New(o Options) (*Collector, error) {
	switch {
	case o.Objects == nil:
		return nil, errors.New("garbagecollector: Options.Objects is nil")
	case o.Kinds != nil && o.Etcd == nil:
		return nil, errors.New("garbagecollector: Options.Kinds needs Options.Etcd, to hear of the declarations' changes")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Collector{o: o, log: log, failures: ratelog.New(log, 0), kinds: newTable(o.Kinds), blocked: map[string][]string{}, learned: make(chan struct{}, 1)}
	c.kinds.onChange = c.kindsChanged
	c.kinds.onLearning = func() {
		select {
		case c.learned <- struct{}{}:
		default:
		}
	}
	return c, nil
}

// Kinds returns the kinds the collector knows: the reference kinds, then
// those the observer feeds it, in its order.
func (c *Collector) Kinds() []kinds.Kind { return c.kinds.all() }

// Run deletes the per-kind declarations of earlier versions, then follows
// the kinds the observer feeds the collector, and looks again at the keys
// that waited for a kind whenever it learns one, until ctx is done; then it
// returns nil. Without Options.Etcd it deletes and follows nothing.
func (c *Collector) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.learned:
				c.unblock(ctx)
			}
		}
	})
	if c.o.Etcd == nil || !c.removeLegacy(ctx) || c.o.Kinds == nil {
		<-ctx.Done()
		return nil
	}
	c.follow(ctx)
	return nil
}

// The pauses of Run between failed attempts (removing the old
// declarations, following the kinds).
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 10 * time.Second
)

// pause waits d or until ctx is done, and returns the next pause.
func pause(ctx context.Context, d time.Duration) time.Duration {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return min(2*d, backoffMax)
}

// removeLegacy deletes every declaration under
// /baton/rules/garbagecollector-, those of the per-kind controllers of
// earlier versions, trying until it succeeds; false when ctx ended first.
func (c *Collector) removeLegacy(ctx context.Context) bool {
	prefix := kinds.DeclarationPrefix + kinds.GarbageCollectorQueuePrefix
	wait := backoffMin
	for {
		dctx, cancel := context.WithTimeout(ctx, objects.DefaultOpTimeout)
		resp, err := c.o.Etcd.Delete(dctx, prefix, clientv3.WithPrefix())
		cancel()
		if err == nil {
			if resp.Deleted > 0 {
				c.log.Info("garbage collector: deleted the per-kind declarations of an earlier version", "prefix", prefix, "deleted", resp.Deleted)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.failures.Warn(cause("legacy", err), "garbage collector: deleting the per-kind declarations of an earlier version failed; trying again", "prefix", prefix, "err", err, "retry_in", wait)
		wait = pause(ctx, wait)
	}
}

// Reconcile judges the object a key of kinds.GarbageCollectorQueue names
// (kinds.CollectorKey).
func (c *Collector) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	res, qk, err := kinds.SplitCollectorKey(req.Key)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	ns, name, err := objects.SplitKey(qk)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	k, ok := c.kinds.byResource(res)
	if !ok {
		// The observer fed it, so the kind was in force: ask again what it
		// feeds, with an answer no older than this key's lease.
		if err := c.kinds.freshSince(ctx, start); err != nil {
			return reconcile.Result{}, fmt.Errorf("learn the kind of %s: %w", req.Key, err)
		}
		if k, ok = c.kinds.byResource(res); !ok {
			// No longer fed (its declaration went): when it is again,
			// the observer announces every object of it anew.
			c.log.Debug("garbage collector: a key of a kind the observer no longer feeds it; dropped", "key", req.Key)
			return reconcile.Result{}, nil
		}
	}
	ctx = c.o.Objects.Scope(ctx, req.Queue+" "+req.Key, req.MinRevision)
	result, err := c.collect(ctx, k, ns, name)
	c.block(req.Key, err)
	return result, err
}

// block remembers key as waiting for the kinds err names, if it is an
// unknownKindsError.
func (c *Collector) block(key string, err error) {
	var uk *unknownKindsError
	if !errors.As(err, &uk) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.blocked[key]; ok || len(c.blocked) < maxBlocked {
		c.blocked[key] = uk.kinds
	}
}

// unblock looks again at every key that waited for a kind the collector
// knows now (a kind that comes and goes makes it look again only at the
// keys that wait for it).
func (c *Collector) unblock(ctx context.Context) {
	c.mu.Lock()
	var keys []string
	for key, waits := range c.blocked {
		if slices.ContainsFunc(waits, func(name string) bool { _, ok := c.kinds.kind(name); return ok }) {
			keys = append(keys, key)
			delete(c.blocked, key)
		}
	}
	c.mu.Unlock()
	for _, key := range keys {
		res, qk, err := kinds.SplitCollectorKey(key)
		if err != nil {
			continue
		}
		k, ok := c.kinds.byResource(res)
		ns, name, err := objects.SplitKey(qk)
		if !ok || err != nil {
			continue
		}
		_, err = c.collect(c.o.Objects.Scope(ctx, Name+" "+key, 0), k, ns, name)
		c.block(key, err)
		if err != nil && !errors.Is(err, errUnknownKind) && ctx.Err() == nil {
			c.log.Info("garbage collector: looking again at an object that waited for a kind failed; its queue retries it", "key", key, "err", err)
		}
	}
}
