// Command greeter is the complete example of docs/workers.md: a Baton
// controller for a resource of its own, written with the worker SDK.
//
// A Greeting (/registry/greetings/<namespace>/<name>) asks for a greeting:
//
//	{"kind": "Greeting", "metadata": {"name": "hi", "namespace": "default", "uid": "…", "generation": 1},
//	 "spec": {"name": "world"}}
//
// and the greeter's one invariant is that its status says hello to spec.name:
//
//	"status": {"message": "hello, world", "observedGeneration": 1}
//
// The greeter declares what it watches (For Greeting, Owns Pod): before it
// leases, the manager publishes that at /baton/rules/greetings in etcd, the
// observer announces every change under /registry/greetings/ to the
// "greetings" queue, and batonctl learns the kind (batonctl get greetings).
// No rules file is needed; see docs/workers.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/batonrun/baton/client/kinds"
	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/worker/manager"
	"github.com/batonrun/baton/services/worker/objects"
	"github.com/batonrun/baton/services/worker/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// GreetingKind is the Greeting's kind, its resource in etcd keys and the
// names batonctl accepts for it.
var GreetingKind = kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}}

// GreetingSpec is what the user asks for.
type GreetingSpec struct {
	Name string `json:"name"`
}

// GreetingStatus is what the greeter reports.
type GreetingStatus struct {
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
}

// Greeting is one object: kind, metadata, spec, status.
type Greeting = objects.Object[GreetingSpec, GreetingStatus]

// Greeter reconciles Greetings.
type Greeter struct {
	Store *objects.Store
}

// Reconcile is level-based: it reads the current object, whatever change
// announced it, and makes the status true.
func (g *Greeter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := objects.SplitKey(req.Key)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err) // a malformed key never heals
	}
	key := GreetingKind.Key(ns, name)
	// Through the observer's cache, at least as new as this worker's writes.
	g1, _, err := objects.Get[Greeting](ctx, g.Store, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // deleted: it owned nothing, nothing to clean up
	}
	if err != nil {
		return reconcile.Result{}, err // the queue retries with backoff
	}
	if g1.Spec.Name == "" {
		return reconcile.Result{}, reconcile.Terminal(errors.New("spec.name is empty"))
	}
	// A compare-and-swap on the stored object that re-reads and retries on a
	// conflict, and writes nothing when the status is already right (so the
	// write does not announce the key again for nothing).
	return reconcile.Result{}, g.Store.UpdateStatus(ctx, key, g1.Metadata.UID, GreetingStatus{
		Message:            "hello, " + g1.Spec.Name,
		ObservedGeneration: g1.Metadata.Generation,
	})
}

func main() {
	queueAddr := flag.String("queue-addr", "127.0.0.1:7070", "queue gRPC address")
	observerAddr := flag.String("observer-addr", "127.0.0.1:7071", "observer gRPC address")
	etcdAddr := flag.String("etcd-endpoints", "http://127.0.0.1:2379", "etcd client URL")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(serve.SignalContext(), *queueAddr, *observerAddr, *etcdAddr, log); err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, queueAddr, observerAddr, etcdAddr string, log *slog.Logger) error {
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}})
	if err != nil {
		return err
	}
	defer etcd.Close()
	observer, err := observerclient.Dial(observerAddr)
	if err != nil {
		return err
	}
	defer observer.Close()
	queue, err := queueclient.Dial(queueAddr)
	if err != nil {
		return err
	}
	defer queue.Close()

	store := objects.NewStore(etcd, observer)
	// With etcd, the manager publishes the controllers' declarations
	// before it leases.
	m := manager.New(queue, manager.Options{Logger: log, Etcd: etcd})
	if err := m.Add(manager.Controller{
		Name: "greetings", Reconciler: &Greeter{Store: store}, Concurrency: 2,
		// What it watches: Greetings, and the pods that name one as owner
		// (a change of such a pod announces the Greeting's key).
		For: GreetingKind, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)},
	}); err != nil {
		return err
	}
	return m.Run(ctx) // until SIGTERM; then finishes what is in flight
}
