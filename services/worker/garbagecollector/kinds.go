package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerclient "github.com/batonrun/baton/client/observer"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/sdk/objects"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
)

// A KindSource says which kinds the observer feeds the collector's queue.
type KindSource interface {
	// FedKinds returns them, and the etcd revision up to which they
	// reflect every change of the declarations (under
	// kinds.DeclarationPrefix).
	FedKinds(ctx context.Context) (fed []kinds.Kind, revision int64, err error)
}

// ObserverKinds is the observer's word on what it feeds the collector: its
// Status for the collector's queue (the rules of that queue, each with its
// kind, and the declarations' revision), a reply whose size follows the
// kinds in force however many declarations etcd holds.
func ObserverKinds(c *observerclient.Client) KindSource { return observerKinds{c} }

type observerKinds struct{ c *observerclient.Client }

// errNoRevision: the observer has not listed the declarations yet, or is
// older than the collector's one queue.
var errNoRevision = errors.New("the observer reports no revision of the declarations: it has not listed them yet, or it is older than this worker and feeds the garbage collector nothing")

func (o observerKinds) FedKinds(ctx context.Context) ([]kinds.Kind, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, objects.DefaultOpTimeout)
	defer cancel()
	st, err := o.c.Raw().Status(ctx, &observerv1.StatusRequest{Queue: Name})
	if err != nil {
		return nil, 0, fmt.Errorf("the observer's status: %w", err)
	}
	if st.GetDeclarationsRevision() == 0 {
		return nil, 0, errNoRevision
	}
	var out []kinds.Kind
	for _, r := range st.GetRules() {
		res, ok := strings.CutPrefix(r.GetPrefix(), kinds.RegistryPrefix)
		res, slash := strings.CutSuffix(res, "/")
		if r.GetQueue() != Name || !r.GetResourceKeys() || !ok || !slash {
			continue
		}
		out = append(out, kinds.Kind{Kind: r.GetKind(), Resource: res})
	}
	return out, st.GetDeclarationsRevision(), nil
}

// table is the kinds the collector knows, and how they are refreshed.
type table struct {
	src KindSource // nil: the reference kinds alone

	mu         sync.Mutex
	known      []kinds.Kind
	byKind     map[string]kinds.Kind
	byRes      map[string]kinds.Kind
	rev        int64     // the revision of the kinds fed, as last applied
	lastStart  time.Time // when the newest refresh that succeeded began
	lastBegun  time.Time // when the newest refresh began
	inflight   *refresh  // a refresh for freshSince, running
	onChange   func(added []kinds.Kind, removed, total int)
	onLearning func() // kinds were added
}

// refresh is one refresh for freshSince, which others wait for.
type refresh struct {
	start time.Time
	done  chan struct{}
	err   error
}

// minRefreshGap is the least time between two refreshes asked for by
// reconciles of keys of kinds the collector does not know (a flood of
// them costs the observer ten Status calls a second at most).
const minRefreshGap = 100 * time.Millisecond

func newTable(src KindSource) *table {
	t := &table{src: src}
	t.set(nil)
	return t
}

// set makes the kinds known the reference kinds and those of fed, the
// first of a kind name or resource winning (the reference kinds first),
// and returns what changed; t.mu is held, or t is new.
func (t *table) set(fed []kinds.Kind) (added []kinds.Kind, removed int) {
	byKind, byRes := map[string]kinds.Kind{}, map[string]kinds.Kind{}
	var known []kinds.Kind
	for _, k := range append(kinds.Builtin(), fed...) {
		_, dupKind := byKind[k.Kind]
		_, dupRes := byRes[k.Resource]
		if dupKind || dupRes || k.Validate() != nil {
			continue
		}
		byKind[k.Kind], byRes[k.Resource] = k, k
		known = append(known, k)
		if old, ok := t.byRes[k.Resource]; !ok || old.Kind != k.Kind {
			added = append(added, k)
		}
	}
	for _, k := range t.known {
		if n, ok := byRes[k.Resource]; !ok || n.Kind != k.Kind {
			removed++
		}
	}
	t.known, t.byKind, t.byRes = known, byKind, byRes
	return added, removed
}

func (t *table) all() []kinds.Kind {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.known)
}

func (t *table) byResource(res string) (kinds.Kind, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.byRes[res]
	return k, ok
}

func (t *table) kind(name string) (kinds.Kind, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.byKind[name]
	return k, ok
}

// refresh asks the source what it feeds and makes it known; it returns
// the revision of the declarations the answer reflects.
func (t *table) refresh(ctx context.Context) (int64, error) {
	start := time.Now()
	t.mu.Lock()
	t.lastBegun = start
	t.mu.Unlock()
	fed, rev, err := t.src.FedKinds(ctx)
	if err != nil {
		return 0, err
	}
	t.mu.Lock()
	if start.After(t.lastStart) {
		t.lastStart = start
	}
	if rev < t.rev {
		// An answer older than one applied (another observer, behind).
		t.mu.Unlock()
		return rev, nil
	}
	t.rev = rev
	added, removed := t.set(fed)
	total := len(t.known)
	onChange, onLearning := t.onChange, t.onLearning
	t.mu.Unlock()
	if (len(added) > 0 || removed > 0) && onChange != nil {
		onChange(added, removed, total)
	}
	if len(added) > 0 && onLearning != nil {
		onLearning()
	}
	return rev, nil
}

// freshSince returns once the kinds known come from a refresh that began
// at since or later: a key leased at since of a kind fed then is known
// after it, unless the observer stopped feeding the kind meanwhile.
// Callers share one refresh, at most one every minRefreshGap.
func (t *table) freshSince(ctx context.Context, since time.Time) error {
	if t.src == nil {
		return nil
	}
	for {
		t.mu.Lock()
		if !t.lastStart.Before(since) {
			t.mu.Unlock()
			return nil
		}
		if r := t.inflight; r != nil {
			t.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if r.err != nil && !r.start.Before(since) {
				return r.err
			}
			continue
		}
		start := time.Now()
		if next := t.lastBegun.Add(minRefreshGap); next.After(start) {
			start = next
		}
		r := &refresh{start: start, done: make(chan struct{})}
		t.inflight = r
		t.mu.Unlock()
		if d := time.Until(r.start); d > 0 {
			sleep(ctx, d)
		}
		if r.err = ctx.Err(); r.err == nil {
			_, r.err = t.refresh(ctx)
		}
		t.mu.Lock()
		t.inflight = nil
		t.mu.Unlock()
		close(r.done)
		if r.err != nil {
			return r.err
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// The polls of await, while the observer has not weighed a change of the
// declarations yet: it does within milliseconds, unless it lags.
const (
	awaitPollMin = 20 * time.Millisecond
	awaitPollMax = time.Second
)

// follow keeps the kinds known in step with what the observer feeds the
// collector until ctx is done: it asks the observer, watches the
// declarations in etcd from the revision the answer reflects, and after
// each change asks again until the observer has weighed it. A failure
// (the observer or etcd unreachable, history compacted) makes it start
// again after a pause.
func (c *Collector) follow(ctx context.Context) {
	wait := backoffMin
	for ctx.Err() == nil {
		progressed, err := c.followOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			wait = backoffMin
		}
		c.failures.Warn(cause("follow", err), "garbage collector: following the kinds the observer feeds it failed; asking again", "err", err, "retry_in", wait)
		wait = pause(ctx, wait)
	}
}

// followOnce is one round of follow; progressed says that the observer
// answered.
func (c *Collector) followOnce(ctx context.Context) (progressed bool, err error) {
	rev, err := c.kinds.refresh(ctx)
	if err != nil {
		return false, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	watch := c.o.Etcd.Watch(wctx, kinds.DeclarationPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		// Every change that has arrived is weighed with one ask: a flood
		// of declarations costs the observer a few asks a second.
		changed, err := nextChanges(ctx, watch)
		if err != nil {
			return true, fmt.Errorf("watch the declarations from revision %d: %w", rev+1, err)
		}
		if err := c.await(ctx, changed); err != nil {
			return true, err
		}
	}
}

// nextChanges waits for a change under kinds.DeclarationPrefix on watch,
// then takes what else has arrived, and returns the newest revision
// changed.
func nextChanges(ctx context.Context, watch clientv3.WatchChan) (int64, error) {
	var changed int64
	take := func(resp clientv3.WatchResponse, ok bool) error {
		switch {
		case !ok && ctx.Err() != nil:
			return ctx.Err()
		case !ok:
			return errors.New("the watch ended")
		case resp.Err() != nil:
			return resp.Err()
		}
		for _, ev := range resp.Events {
			changed = max(changed, ev.Kv.ModRevision)
		}
		return nil
	}
	for changed == 0 {
		resp, ok := <-watch
		if err := take(resp, ok); err != nil {
			return 0, err
		}
	}
	for {
		select {
		case resp, ok := <-watch:
			if err := take(resp, ok); err != nil {
				return 0, err
			}
		default:
			return changed, nil
		}
	}
}

// await asks the observer until its answer reflects the declarations at
// revision rev, at most once every minRefreshGap.
func (c *Collector) await(ctx context.Context, rev int64) error {
	poll := awaitPollMin
	for {
		c.kinds.mu.Lock()
		next := c.kinds.lastBegun.Add(minRefreshGap)
		c.kinds.mu.Unlock()
		if d := time.Until(next); d > 0 {
			sleep(ctx, d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		got, err := c.kinds.refresh(ctx)
		if err != nil {
			return err
		}
		if got >= rev {
			return nil
		}
		sleep(ctx, poll)
		poll = min(2*poll, awaitPollMax)
	}
}

// kindsChanged logs a change of the kinds known (once per
// ratelog.DefaultInterval while they churn).
func (c *Collector) kindsChanged(added []kinds.Kind, removed, total int) {
	var names []string
	for _, k := range added[:min(len(added), 10)] {
		names = append(names, k.Kind)
	}
	c.failures.Info("kinds", "garbage collector: the kinds it collects changed", "kinds", total, "added", len(added), "removed", removed, "first_added", strings.Join(names, ","))
}

// cause names a failure for the log (ratelog): what failed and the gRPC
// code of the call, if any.
func cause(what string, err error) string { return what + " " + status.Code(err).String() }
