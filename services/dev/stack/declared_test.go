package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// toyGreeting is the kind the toy controller declares: no part of the stack
// knows it before the declaration.
var toyGreeting = kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}}

type (
	toySpec struct {
		Name string `json:"name"`
		// Quiet Greetings get no status: the toy writes nothing to them,
		// so nothing but a change of an object they own announces them
		// again.
		Quiet bool `json:"quiet,omitempty"`
	}
	toyStatus struct {
		Message            string `json:"message"`
		ObservedGeneration int64  `json:"observedGeneration"`
	}
	toyObject = objects.Object[toySpec, toyStatus]
)

// toy reconciles Greetings and remembers, per key, how often and whether it
// saw a pod that names the Greeting as owner.
type toy struct {
	store *objects.Client

	mu         sync.Mutex
	reconciles map[string]int
	sawPod     map[string]bool
}

func (g *toy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := objects.SplitKey(req.Key)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	key := toyGreeting.Key(ns, name)
	obj, _, err := objects.Get[toyObject](ctx, g.store, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	pods, err := objects.List[objects.Pod](ctx, g.store, objects.Prefix(objects.ResourcePods, ns),
		objects.OwnedBy{Namespace: ns, Kind: toyGreeting.Kind, Name: name})
	if err != nil {
		return reconcile.Result{}, err
	}
	g.mu.Lock()
	g.reconciles[req.Key]++
	g.sawPod[req.Key] = g.sawPod[req.Key] || len(pods) > 0
	g.mu.Unlock()
	if obj.Spec.Quiet {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, g.store.UpdateStatus(ctx, key, obj.Metadata.UID, toyStatus{
		Message: "hello, " + obj.Spec.Name, ObservedGeneration: obj.Metadata.Generation,
	})
}

func (g *toy) seen(key string) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reconciles[key], g.sawPod[key]
}

// runToy runs the toy controller against the stack, as a worker of its own
// would: it declares For Greeting, Owns Pod, and the manager publishes that
// before it leases.
func runToy(t *testing.T, s *running) *toy {
	t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ep.Etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	observer, err := observerclient.Dial(s.ep.ObserverGRPC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { observer.Close() })
	queue, err := queueclient.Dial(s.ep.QueueGRPC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { queue.Close() })

	g := &toy{store: objects.NewClient(etcd, observer), reconciles: map[string]int{}, sawPod: map[string]bool{}}
	m := manager.New(queue, manager.Options{Worker: "toy", GracePeriod: 2 * time.Second, Etcd: etcd})
	if err := m.Add(manager.Controller{Name: "greetings", Reconciler: g, Concurrency: 2,
		PollWait: 500 * time.Millisecond, LeaseDuration: 5 * time.Second,
		For: toyGreeting, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	// Registered after the stack's, so it runs first: the toy stops while
	// the queue still answers.
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("toy controller: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("toy controller did not stop within 30s")
		}
	})
	return g
}

// TestDeclaredController is the proof that a controller's declaration is
// all a new kind needs: a toy controller of a kind no part of the stack
// knows (Greeting, For Greeting, Owns Pod) registers against the embedded
// stack, started without a rules file, and (a) the observer executes its
// declaration: its Status lists the declared rules, a Greeting created in
// etcd is reconciled, and a Pod that names a Greeting as owner announces the
// Greeting's key again; (b) batonctl knows the kind: get, apply, describe
// and delete work for it.
func TestDeclaredController(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	s := startStack(t, t.TempDir())
	const converge = 60 * time.Second

	// The stack's worker has declared the reference controllers.
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ep.Etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	declaredQueues := func() []string {
		resp, err := etcd.Get(t.Context(), kinds.DeclarationPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, strings.TrimPrefix(string(kv.Key), kinds.DeclarationPrefix))
		}
		return out
	}
	eventually(t, converge, "the reference controllers declared", func() (bool, string) {
		got := declaredQueues()
		for _, d := range kinds.BuiltinDeclarations() {
			if !slices.Contains(got, d.Queue) {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})

	g := runToy(t, s)
	eventually(t, converge, "the toy's declaration published", func() (bool, string) {
		got := declaredQueues()
		return slices.Contains(got, "greetings"), fmt.Sprint(got)
	})

	// (a) The observer executes the declaration.
	observer, err := observerclient.Dial(s.ep.ObserverGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()
	eventually(t, converge, "the observer's Status listing the declared rules", func() (bool, string) {
		st, err := observer.Status(t.Context())
		if err != nil {
			return false, err.Error()
		}
		var own, owned bool
		var rules []string
		for _, r := range st.GetRules() {
			rules = append(rules, fmt.Sprintf("%s %s %s", r.GetQueue(), r.GetPrefix(), r.GetOwnerKind()))
			own = own || (r.GetQueue() == "greetings" && r.GetPrefix() == "/registry/greetings/" && r.GetOwnerKind() == "")
			owned = owned || (r.GetQueue() == "greetings" && r.GetPrefix() == "/registry/pods/" && r.GetOwnerKind() == "Greeting")
		}
		return own && owned, strings.Join(rules, "\n")
	})

	// A Greeting written to etcd, as any client would, is reconciled.
	put := func(name, spec string) {
		t.Helper()
		v := fmt.Sprintf(`{"kind":"Greeting","metadata":{"name":%q,"namespace":"default","uid":"uid-%s","generation":1},"spec":%s}`, name, name, spec)
		if _, err := etcd.Put(t.Context(), toyGreeting.Key("default", name), v); err != nil {
			t.Fatal(err)
		}
	}
	put("hi", `{"name":"world"}`)
	eventually(t, converge, "greeting hi reconciled", func() (bool, string) {
		o := s.object(t, "greetings", "hi")
		return path(o, "status", "message") == "hello, world", fmt.Sprint(o)
	})

	// A Pod that names a Greeting as owner announces the Greeting again.
	// The quiet Greeting is written once and never by the toy, so after its
	// first reconcile only the Pod can announce it.
	put("quiet", `{"name":"shh","quiet":true}`)
	queue, err := queueclient.Dial(s.ep.QueueGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer queue.Close()
	var before int
	eventually(t, converge, "greeting quiet reconciled, and nothing more to announce", func() (bool, string) {
		n, _ := g.seen("default/quiet")
		item, err := queue.Inspect(t.Context(), "greetings", "default/quiet")
		if err != nil {
			return false, err.Error()
		}
		st, err := observer.Status(t.Context())
		if err != nil {
			return false, err.Error()
		}
		before = n
		return n > 0 && item.GetState() == queuev1.ItemState_ITEM_STATE_ABSENT && st.GetOutboxSize() == 0,
			fmt.Sprintf("%d reconciles, item %v, outbox %d", n, item, st.GetOutboxSize())
	})
	pod := writeFile(t, "pod.yaml", "kind: Pod\nmetadata:\n  name: quiet-pod\n  ownerReferences: [{kind: Greeting, name: quiet, uid: uid-quiet}]\nspec: {image: busybox}\n")
	if out := s.mustCtl(t, "apply", "-f", pod); out != "pod/quiet-pod created\n" {
		t.Errorf("apply pod: %q", out)
	}
	eventually(t, converge, "the pod's change announcing greeting quiet", func() (bool, string) {
		n, saw := g.seen("default/quiet")
		return n > before && saw, fmt.Sprintf("%d reconciles (%d before the pod), saw the pod: %v", n, before, saw)
	})

	// (b) batonctl knows the declared kind.
	out := s.mustCtl(t, "get", "greetings")
	for _, name := range []string{"hi", "quiet"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("get greetings lacks %s:\n%s", name, out)
		}
	}
	manifest := writeFile(t, "greeting.yaml", "kind: Greeting\nmetadata: {name: bye}\nspec: {name: moon}\n")
	if out := s.mustCtl(t, "apply", "-f", manifest); out != "greeting/bye created\n" {
		t.Errorf("apply greeting: %q", out)
	}
	eventually(t, converge, "greeting bye reconciled", func() (bool, string) {
		o := s.object(t, "greeting", "bye")
		return path(o, "status", "message") == "hello, moon" && num(o, "status", "observedGeneration") == 1, fmt.Sprint(o)
	})
	if out := s.mustCtl(t, "apply", "-f", manifest); out != "greeting/bye unchanged\n" {
		t.Errorf("apply greeting again: %q", out)
	}
	d := s.mustCtl(t, "describe", "greeting", "quiet")
	for _, want := range []string{"Kind:         Greeting", "Queue item (queue greetings, key default/quiet):", "Children (pods):", "quiet-pod"} {
		if !strings.Contains(d, want) {
			t.Errorf("describe greeting quiet lacks %q:\n%s", want, d)
		}
	}
	if out := s.mustCtl(t, "delete", "greeting", "bye"); out != "greeting/bye deleted\n" {
		t.Errorf("delete: %q", out)
	}
}

// writeFile writes body to name in a temporary folder and returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
