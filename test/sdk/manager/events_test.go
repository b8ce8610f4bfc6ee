package manager_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/test/framework"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestManagerRunsTheRecorder: with Options.Events, Run runs the Recorder
// while the controllers run, and stops it only after the last reconcile
// has finished: an event recorded in the grace period, after Run's
// context was cancelled, is in etcd when Run returns.
func TestManagerRunsTheRecorder(t *testing.T) {
	queue := framework.StartQueue(t, framework.QueueOptions{})
	etcd := framework.StartEtcd(t)
	rec, err := events.NewRecorder(etcd.Client, events.Options{Component: "things-controller"})
	if err != nil {
		t.Fatal(err)
	}
	thing := objects.ObjectReference{Kind: "Thing", Namespace: "ns", Name: "a", UID: "uid-a"}
	entered, release := make(chan struct{}), make(chan struct{})
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		rec.Event(thing, events.Normal, "Started", "Started %s", req.Key)
		close(entered)
		<-release
		rec.Event(thing, events.Normal, "Finished", "Finished %s", req.Key)
		return reconcile.Result{}, nil
	})
	reasons := func() map[string]bool {
		resp, err := etcd.Client.Get(t.Context(), kinds.EventKind().Prefix(), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, kv := range resp.Kvs {
			var ev events.Event
			if err := json.Unmarshal(kv.Value, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.InvolvedObject == thing && ev.Source.Component == "things-controller" {
				out[ev.Reason] = true
			}
		}
		return out
	}

	add(t, queue.Client, "ns/a")
	log := &logged{}
	stop := start(t, queue.Client, manager.Controller{Reconciler: r, LeaseDuration: time.Minute},
		manager.Options{GracePeriod: 20 * time.Second, Logger: slog.New(log), Events: rec})
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no reconcile")
	}
	eventually(t, "the event recorded while Run runs written", func() bool { return reasons()["Started"] })

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	eventually(t, "the shutdown under way", func() bool { return log.has(msgDraining) })
	close(release)
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if !reasons()["Finished"] {
		t.Error("Run returned before the event recorded in the grace period was written")
	}
	if err := rec.Run(t.Context()); err == nil {
		t.Error("the Recorder ran again after the manager ran it; want Run called twice refused")
	}
}
