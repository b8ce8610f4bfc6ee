package garbagecollector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/services/worker/controllers"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// world is a real embedded etcd with every reference controller and the
// garbage collector, driven by hand: pass reconciles every key of every
// resource (and every key ever seen, so deleted owners get cleaned up)
// until a whole pass writes nothing. It tests the collector's decisions
// without queue or observer; baton-worker's service tests run it through
// both.
type world struct {
	t     *testing.T
	cli   *clientv3.Client
	st    *objects.Client
	ctrls map[string]reconcile.Reconciler
	gc    *Collector

	seen map[string]map[string]bool // resource → keys
}

func newWorld(t *testing.T) *world {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	w := &world{t: t, cli: cli, st: objects.NewClient(cli, nil), ctrls: map[string]reconcile.Reconciler{}, seen: map[string]map[string]bool{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range controllers.Names {
		if n == controllers.GarbageCollectorName {
			continue
		}
		r, err := controllers.New(n, controllers.Deps{Objects: w.st, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		w.ctrls[n] = r
	}
	w.gc = w.collector(Options{Objects: w.st})
	return w
}

// collector returns a new Collector of o.
func (w *world) collector(o Options) *Collector {
	w.t.Helper()
	c, err := New(o)
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// run runs c.Run until the test ends.
func (w *world) run(c *Collector) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("Run: %v", err)
		}
	})
}

func (w *world) rev() int64 {
	resp, err := w.cli.Get(w.t.Context(), "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		w.t.Fatal(err)
	}
	return resp.Header.Revision
}

// judge reconciles the key of kind k's object ns/name in the collector's
// queue with c.
func (w *world) judge(c *Collector, k kinds.Kind, qk string) (reconcile.Result, error) {
	return c.Reconcile(w.t.Context(), reconcile.Request{Queue: Name, Key: kinds.CollectorKey(k, qk)})
}

// pass reconciles every key once per reference controller, and then every
// key of each kind the collector knows; it returns whether etcd changed.
func (w *world) pass() bool {
	w.t.Helper()
	before := w.rev()
	for _, res := range controllers.Names {
		if res == controllers.GarbageCollectorName {
			continue
		}
		for _, k := range w.keys(res) {
			if _, err := w.ctrls[res].Reconcile(w.t.Context(), reconcile.Request{Queue: res, Key: k}); err != nil {
				w.t.Fatalf("reconcile %s %s: %v", res, k, err)
			}
		}
	}
	for _, kind := range w.gc.Kinds() {
		for _, k := range w.keys(kind.Resource) {
			if _, err := w.judge(w.gc, kind, k); err != nil {
				w.t.Fatalf("collect %s %s: %v", kind.Resource, k, err)
			}
		}
	}
	return w.rev() != before
}

// keys returns every key of resource there is or ever was, sorted.
func (w *world) keys(res string) []string {
	w.t.Helper()
	resp, err := w.cli.Get(w.t.Context(), "/registry/"+res+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		w.t.Fatal(err)
	}
	if w.seen[res] == nil {
		w.seen[res] = map[string]bool{}
	}
	for _, kv := range resp.Kvs {
		w.seen[res][strings.TrimPrefix(string(kv.Key), "/registry/"+res+"/")] = true
	}
	var keys []string
	for k := range w.seen[res] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// converge runs passes until nothing changes.
func (w *world) converge() {
	w.t.Helper()
	for i := 0; w.pass(); i++ {
		if i > 200 {
			w.t.Fatal("did not converge in 200 passes")
		}
	}
}

func (w *world) put(key string, obj any) {
	w.t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.cli.Put(w.t.Context(), key, string(b)); err != nil {
		w.t.Fatal(err)
	}
}

// apply writes an object as batonctl would: uid kept, generation bumped.
func (w *world) apply(resource, ns, name string, obj map[string]any) {
	w.t.Helper()
	key := objects.Key(resource, ns, name)
	meta := obj["metadata"].(map[string]any)
	meta["name"], meta["namespace"] = name, ns
	if raw, err := w.st.GetDirect(w.t.Context(), key); err == nil {
		var old struct {
			Metadata objects.ObjectMeta `json:"metadata"`
		}
		json.Unmarshal(raw.Value, &old)
		meta["uid"], meta["generation"] = old.Metadata.UID, old.Metadata.Generation+1
	} else {
		meta["uid"], meta["generation"] = objects.NewUID(), 1
	}
	w.put(key, obj)
}

func (w *world) del(key string) {
	w.t.Helper()
	if _, err := w.cli.Delete(w.t.Context(), key); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) pods(ownerKind, ownerName string) []*objects.Pod {
	w.t.Helper()
	items, err := objects.List[objects.Pod](w.t.Context(), w.st, objects.Prefix("pods", "default"), objects.OwnedBy{Namespace: "default", Kind: ownerKind, Name: ownerName})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []*objects.Pod
	for _, it := range items {
		out = append(out, it.Object)
	}
	return out
}

// podsOf lists the pods that name ownerKind/ownerName with uid as owner.
func (w *world) podsOf(ownerKind, ownerName, uid string) []*objects.Pod {
	var out []*objects.Pod
	for _, p := range w.pods(ownerKind, ownerName) {
		if p.Metadata.OwnedBy(ownerKind, ownerName, uid) {
			out = append(out, p)
		}
	}
	return out
}

// names lists the names of the objects of resource in default.
func (w *world) names(resource string) []string {
	w.t.Helper()
	raws, err := w.st.ListDirect(w.t.Context(), objects.Prefix(resource, "default"), objects.OwnedBy{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, r := range raws {
		out = append(out, strings.TrimPrefix(r.Key, objects.Prefix(resource, "default")))
	}
	return out
}

// meta returns the metadata of resource/name in default, if it is there.
func (w *world) meta(resource, name string) (objects.ObjectMeta, bool) {
	w.t.Helper()
	raw, err := w.st.GetDirect(w.t.Context(), objects.Key(resource, "default", name))
	if errors.Is(err, objects.ErrNotFound) {
		return objects.ObjectMeta{}, false
	}
	if err != nil {
		w.t.Fatal(err)
	}
	m, err := decodeMeta(raw)
	if err != nil {
		w.t.Fatal(err)
	}
	return m, true
}

// deletions returns the revision at which each key under /registry/ was
// removed after rev, from etcd's history.
func (w *world) deletions(rev int64) map[string]int64 {
	w.t.Helper()
	end := w.rev()
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	out := map[string]int64{}
	for resp := range w.cli.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			w.t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				out[string(ev.Kv.Key)] = ev.Kv.ModRevision
			}
		}
		if resp.Header.Revision >= end {
			return out
		}
	}
	w.t.Fatal("the watch of the history ended early")
	return nil
}

// publish writes declaration d at its key.
func (w *world) publish(d kinds.Declaration) {
	w.t.Helper()
	b, err := d.Marshal()
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.cli.Put(w.t.Context(), d.Key(), string(b)); err != nil {
		w.t.Fatal(err)
	}
}

func template(image string, duration float64, exit int) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
		"spec":     map[string]any{"image": image, "durationSeconds": duration, "exitCode": exit},
	}
}

// deployment is a Deployment of n pods, as a test applies it.
func deployment(n int) map[string]any {
	return map[string]any{"kind": "Deployment", "metadata": map[string]any{}, "spec": map[string]any{"replicas": n, "template": template("nginx", 0, 0)}}
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: not %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeObserver is the observer's word on the kinds it feeds the collector,
// made from etcd: the kinds of every declaration under /baton/rules/ that
// parses and is not in refused, at the revision it read them. It stands
// for the observer's Status (whose checks the observer's tests cover) at
// the collector's boundary.
type fakeObserver struct {
	cli *clientv3.Client

	mu      sync.Mutex
	refused map[string]bool // declaration keys the observer refuses
	calls   atomic.Int64
	fail    error // answered instead, when set
}

func (f *fakeObserver) refuse(key string, refused bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused == nil {
		f.refused = map[string]bool{}
	}
	f.refused[key] = refused
}

func (f *fakeObserver) FedKinds(ctx context.Context) ([]kinds.Kind, int64, error) {
	f.calls.Add(1)
	f.mu.Lock()
	fail := f.fail
	refused := maps.Clone(f.refused)
	f.mu.Unlock()
	if fail != nil {
		return nil, 0, fail
	}
	resp, err := f.cli.Get(ctx, kinds.DeclarationPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	var out []kinds.Kind
	for _, kv := range resp.Kvs {
		d, err := kinds.Parse(kv.Value)
		if err != nil || refused[string(kv.Key)] {
			continue
		}
		out = append(out, append([]kinds.Kind{d.For}, d.Owns...)...)
	}
	return out, resp.Header.Revision, nil
}

// laggingCache is a cache that lags etcd, as the observer's can: each
// resource's objects are read from etcd as they were at a revision of its
// own (etcd keeps that history), or at the head for a resource not pinned;
// a List that spans resources reads each at its own. It is the observer's
// cache at its worst, made of etcd's real history rather than of invented
// answers.
type laggingCache struct {
	cli *clientv3.Client
	mu  sync.Mutex
	at  map[string]int64 // resource → the revision its reads see
}

func (c *laggingCache) pin(resource string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[resource] = rev
}

// pinned returns the revision of the resource key is under (0: the head).
func (c *laggingCache) pinned(key string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for res, rev := range c.at {
		if strings.HasPrefix(key, "/registry/"+res+"/") {
			return rev
		}
	}
	return 0
}

func (c *laggingCache) Get(ctx context.Context, key string, _ int64) (objects.Raw, error) {
	resp, err := c.cli.Get(ctx, key, clientv3.WithRev(c.pinned(key)))
	if err != nil {
		return objects.Raw{}, err
	}
	if len(resp.Kvs) == 0 {
		return objects.Raw{}, fmt.Errorf("get %s: %w", key, objects.ErrNotFound)
	}
	return objects.Raw{Key: key, Value: resp.Kvs[0].Value, ModRevision: resp.Kvs[0].ModRevision}, nil
}

func (c *laggingCache) List(ctx context.Context, prefix string, owner objects.OwnedBy, _ int64) ([]objects.Raw, error) {
	resp, err := c.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	kvs := slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return c.pinned(string(kv.Key)) != 0 })
	c.mu.Lock()
	pins := maps.Clone(c.at)
	c.mu.Unlock()
	for res, rev := range pins {
		p := "/registry/" + res + "/"
		if !strings.HasPrefix(p, prefix) && !strings.HasPrefix(prefix, p) {
			continue
		}
		from := max(prefix, p)
		old, err := c.cli.Get(ctx, from, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, old.Kvs...)
	}
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return strings.Compare(string(a.Key), string(b.Key)) })
	var out []objects.Raw
	for _, kv := range kvs {
		var o struct {
			Metadata objects.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(kv.Value, &o) != nil {
			continue
		}
		if owner.Namespace != "" && o.Metadata.Namespace != owner.Namespace {
			continue
		}
		if (owner.Kind != "" || owner.UID != "") && !o.Metadata.OwnedBy(owner.Kind, owner.Name, owner.UID) {
			continue
		}
		out = append(out, objects.Raw{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision})
	}
	return out, nil
}
