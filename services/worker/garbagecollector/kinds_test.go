package garbagecollector

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// knows reports whether c knows the kind named name.
func knows(c *Collector, name string) bool {
	_, ok := c.kinds.kind(name)
	return ok
}

// TestCollectorFollowsOnlyTheKindsInForce: the collector learns the kinds
// the observer feeds it, and no other: a declaration the observer refuses
// teaches it nothing, so an object whose owner is of that kind stays,
// until the observer takes the declaration in. A kind whose declaration
// goes is forgotten: a key of it is dropped, and its objects left alone.
func TestCollectorFollowsOnlyTheKindsInForce(t *testing.T) {
	w := newWorld(t)
	obs := &fakeObserver{cli: w.cli}
	w.gc = w.collector(Options{Objects: w.st, Kinds: obs, Etcd: w.cli})
	w.run(w.gc)
	ghost := kinds.Declaration{Queue: "ghosts", For: kinds.Kind{Kind: "Ghost", Resource: "ghosts"}}
	widget := kinds.Declaration{Queue: "widgets", For: kinds.Kind{Kind: "Widget", Resource: "widgets"}}
	obs.refuse(ghost.Key(), true)
	w.publish(ghost)
	w.publish(widget)
	waitUntil(t, "the collector learns Widget", func() bool { return knows(w.gc, "Widget") })
	if knows(w.gc, "Ghost") {
		t.Fatal("the collector learned the kind of a refused declaration")
	}
	w.put(objects.Key("deployments", "default", "haunted"), map[string]any{"kind": "Deployment", "metadata": map[string]any{
		"name": "haunted", "namespace": "default", "uid": objects.NewUID(),
		"ownerReferences": []any{map[string]any{"kind": "Ghost", "name": "spirit", "uid": objects.NewUID()}}},
		"spec": map[string]any{"replicas": 0, "template": template("nginx", 0, 0)}})
	if _, err := w.judge(w.gc, kinds.MustBuiltin(kinds.Deployment), "default/haunted"); !errors.Is(err, errUnknownKind) {
		t.Fatalf("judging a reference to a refused declaration's kind: %v, want errUnknownKind", err)
	}
	if _, ok := w.meta("deployments", "haunted"); !ok {
		t.Fatal("a deployment whose owner's kind the observer refused was deleted")
	}

	// The observer takes the declaration in (another declaration went, say).
	obs.refuse(ghost.Key(), false)
	w.publish(ghost)
	waitUntil(t, "the haunted deployment collected once Ghost is known", func() bool {
		_, ok := w.meta("deployments", "haunted")
		return !ok
	})

	w.put(objects.Key("widgets", "default", "stray"), map[string]any{"kind": "Widget", "metadata": map[string]any{
		"name": "stray", "namespace": "default", "uid": objects.NewUID(),
		"ownerReferences": []any{map[string]any{"kind": "Widget", "name": "gone", "uid": objects.NewUID()}}}})
	w.del(widget.Key())
	waitUntil(t, "the collector forgets Widget", func() bool { return !knows(w.gc, "Widget") })
	calls := obs.calls.Load()
	if _, err := w.judge(w.gc, widget.For, "default/stray"); err != nil {
		t.Errorf("a key of a kind no longer fed: %v, want it dropped", err)
	}
	if obs.calls.Load() == calls {
		t.Error("the collector dropped a key of a kind it did not know without asking the observer again")
	}
	if _, ok := w.meta("widgets", "stray"); !ok {
		t.Error("an object of a kind no longer fed was deleted")
	}
}

// TestCollectorRemovesLegacyDeclarations: the per-kind declarations of
// earlier versions go when the collector starts, and nothing else does.
func TestCollectorRemovesLegacyDeclarations(t *testing.T) {
	w := newWorld(t)
	for _, d := range []kinds.Declaration{
		{Queue: kinds.GarbageCollectorQueuePrefix + "pods", For: kinds.MustBuiltin(kinds.Pod), IgnoreOwnStatus: true},
		{Queue: kinds.GarbageCollectorQueuePrefix + "foos", For: kinds.Kind{Kind: "Foo", Resource: "foos"}, IgnoreOwnStatus: true},
		{Queue: "foos", For: kinds.Kind{Kind: "Foo", Resource: "foos"}},
	} {
		w.publish(d)
	}
	left := func() []string {
		resp, err := w.cli.Get(t.Context(), kinds.DeclarationPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, string(kv.Key))
		}
		return out
	}
	w.run(w.collector(Options{Objects: w.st, Etcd: w.cli}))
	waitUntil(t, "the per-kind declarations gone", func() bool { return slices.Equal(left(), []string{"/baton/rules/foos"}) })
}

// TestCollectorAsksOnceForAFloodOfUnknownKeys: keys of a kind the
// collector does not know make it ask the observer again, but they share
// their asks (at most one every minRefreshGap), and are dropped when the
// kind is not fed; malformed keys fail for good.
func TestCollectorAsksOnceForAFloodOfUnknownKeys(t *testing.T) {
	w := newWorld(t)
	obs := &fakeObserver{cli: w.cli}
	c := w.collector(Options{Objects: w.st, Kinds: obs, Etcd: w.cli})
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			_, err := c.Reconcile(t.Context(), reconcile.Request{Queue: Name, Key: kinds.CollectorKey(kinds.Kind{Resource: "unknowns"}, "default/u"+string(rune('a'+i%26)))})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a key of a kind not fed: %v, want it dropped", err)
		}
	}
	if n := obs.calls.Load(); n < 1 || n > 5 {
		t.Errorf("200 keys of an unknown kind asked the observer %d times, want a few", n)
	}
	for _, bad := range []string{"default/web", "pods", "pods/a/b/c"} {
		_, err := c.Reconcile(t.Context(), reconcile.Request{Queue: Name, Key: bad})
		if err == nil || !reconcile.IsTerminal(err) {
			t.Errorf("key %q: %v, want a terminal error", bad, err)
		}
	}
	// Without a source, the reference kinds are all it knows, and it asks
	// nobody.
	plain := w.collector(Options{Objects: w.st})
	if _, err := plain.Reconcile(t.Context(), reconcile.Request{Queue: Name, Key: "foos/default/x"}); err != nil {
		t.Errorf("a key of a kind a collector without a source does not know: %v", err)
	}
}

// TestCollectorLogsARepeatedFailureOnce: an observer that keeps failing
// makes the collector ask again with a backoff, and log one line of it.
func TestCollectorLogsARepeatedFailureOnce(t *testing.T) {
	w := newWorld(t)
	obs := &fakeObserver{cli: w.cli, fail: errors.New("the observer is unreachable")}
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	w.run(w.collector(Options{Objects: w.st, Kinds: obs, Etcd: w.cli, Log: log}))
	waitUntil(t, "four attempts", func() bool { return obs.calls.Load() >= 4 })
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "following the kinds the observer feeds it failed"); n != 1 {
		t.Errorf("%d lines of the failure, want 1:\n%s", n, buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestCollectorWeighsAFloodOfDeclarationsInFewAsks: declarations written
// as fast as etcd takes them are learned, every one, with at most one ask
// of the observer every minRefreshGap (and a few more to start).
func TestCollectorWeighsAFloodOfDeclarationsInFewAsks(t *testing.T) {
	w := newWorld(t)
	obs := &fakeObserver{cli: w.cli}
	w.gc = w.collector(Options{Objects: w.st, Kinds: obs, Etcd: w.cli})
	w.run(w.gc)
	waitUntil(t, "the first ask", func() bool { return obs.calls.Load() > 0 })
	start := time.Now()
	const n = 200
	for i := range n {
		w.publish(kinds.Declaration{Queue: fmt.Sprintf("flood%03d", i), For: kinds.Kind{Kind: fmt.Sprintf("Flood%03d", i), Resource: fmt.Sprintf("flood%03d", i)}})
	}
	waitUntil(t, "every flooded kind learned", func() bool { return len(w.gc.Kinds()) == len(kinds.Builtin())+n })
	if calls, most := obs.calls.Load(), int64(time.Since(start)/minRefreshGap)+3; calls > most {
		t.Errorf("%d declarations cost %d asks in %v, want at most %d", n, calls, time.Since(start), most)
	}
}

// TestCollectorLooksAgainOnlyAtKeysWaitingForALearnedKind: a key whose
// object names an owner of a kind the collector does not know waits for
// that kind: learning another kind does not look at it again (a kind that
// comes and goes costs the keys waiting for it, no others), learning its
// kind does, at once.
func TestCollectorLooksAgainOnlyAtKeysWaitingForALearnedKind(t *testing.T) {
	w := newWorld(t)
	c := w.collector(Options{Objects: w.st})
	ghost, widget := kinds.Kind{Kind: "Ghost", Resource: "ghosts"}, kinds.Kind{Kind: "Widget", Resource: "widgets"}
	w.put(objects.Key("deployments", "default", "haunted"), map[string]any{"kind": "Deployment", "metadata": map[string]any{
		"name": "haunted", "namespace": "default", "uid": objects.NewUID(),
		"ownerReferences": []any{map[string]any{"kind": "Ghost", "name": "spirit", "uid": objects.NewUID()}}},
		"spec": map[string]any{"replicas": 0, "template": template("nginx", 0, 0)}})
	if _, err := w.judge(c, kinds.MustBuiltin(kinds.Deployment), "default/haunted"); !errors.Is(err, errUnknownKind) || !strings.Contains(err.Error(), "owner kind Ghost") {
		t.Fatalf("judging a reference to an unknown kind: %v", err)
	}
	learn := func(ks ...kinds.Kind) {
		c.kinds.mu.Lock()
		c.kinds.set(ks)
		c.kinds.mu.Unlock()
		c.unblock(t.Context())
	}
	reads := w.st.Reads()
	learn(widget)
	if w.st.Reads() != reads {
		t.Errorf("learning Widget looked again at a key that waits for Ghost (reads %+v, then %+v)", reads, w.st.Reads())
	}
	if _, ok := w.meta("deployments", "haunted"); !ok {
		t.Fatal("the deployment whose owner's kind is unknown was deleted")
	}
	learn(widget, ghost)
	if _, ok := w.meta("deployments", "haunted"); ok {
		t.Error("learning Ghost did not look again at the deployment whose Ghost is gone")
	}
}
