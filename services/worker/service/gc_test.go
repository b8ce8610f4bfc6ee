package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/sdk/objects"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestGarbageCollectorEndToEnd: through the queue and the observer, three
// Deployments deleted with each propagation end as the propagation says:
// background and foreground take the ReplicaSet and the pods with them (in
// the foreground the pods go before their ReplicaSet and the ReplicaSet
// before the Deployment), orphan leaves the ReplicaSet, owned by nobody,
// and its pods. Then a kind the worker knows only from a declaration
// published while it runs (a Foo owning a Deployment), which the observer
// feeds the collector's one queue, is collected too.
func TestGarbageCollectorEndToEnd(t *testing.T) {
	s := startStack(t)
	s.startWorker(s.workerConfig())
	st := objects.NewClient(s.cli, nil)
	ctx := t.Context()
	dep := func() map[string]any {
		return map[string]any{"kind": "Deployment", "spec": map[string]any{"replicas": 2, "template": tpl("nginx", 0, 0)}}
	}
	names := func(resource string) []string {
		raws, err := st.ListDirect(ctx, objects.Prefix(resource, "default"), objects.OwnedBy{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range raws {
			out = append(out, strings.TrimPrefix(r.Key, objects.Prefix(resource, "default")))
		}
		return out
	}
	rsOf := func(d string) string {
		for _, n := range names("replicasets") {
			if strings.HasPrefix(n, d+"-") {
				return n
			}
		}
		return ""
	}
	modes := []objects.Propagation{objects.Background, objects.Foreground, objects.Orphan}
	for _, m := range modes {
		s.apply("deployments", string(m), dep())
	}
	for _, m := range modes {
		waitFor(t, converge, string(m)+": two running pods", func() bool {
			rs := rsOf(string(m))
			return rs != "" && running(s.pods("ReplicaSet", rs)) == 2
		})
	}
	rss := map[objects.Propagation]string{}
	for _, m := range modes {
		rss[m] = rsOf(string(m))
	}
	start, err := s.cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		if _, err := st.DeleteWith(ctx, objects.Key("deployments", "default", string(m)), objects.DeleteOptions{Propagation: m}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(resource, name string) bool {
		_, err := st.GetDirect(ctx, objects.Key(resource, "default", name))
		return err != nil
	}
	for _, m := range []objects.Propagation{objects.Background, objects.Foreground} {
		waitFor(t, converge, string(m)+": the deployment, its replicaset and its pods gone", func() bool {
			return gone("deployments", string(m)) && gone("replicasets", rss[m]) && len(s.pods("ReplicaSet", rss[m])) == 0
		})
	}
	orphan := rss[objects.Orphan]
	waitFor(t, converge, "orphan: the deployment gone, its replicaset owned by nobody", func() bool {
		rs := get[objects.ReplicaSet](s, "replicasets", orphan)
		return gone("deployments", string(objects.Orphan)) && rs != nil && len(rs.Metadata.OwnerReferences) == 0
	})
	if n := running(s.pods("ReplicaSet", orphan)); n != 2 {
		t.Errorf("the orphaned replicaset has %d running pods, want 2", n)
	}

	// In the foreground, dependents went first: pods, then the
	// ReplicaSet, then the Deployment.
	deleted := map[string]int64{}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	end, err := s.cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	for resp := range s.cli.Watch(hctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				deleted[string(ev.Kv.Key)] = ev.Kv.ModRevision
			}
		}
		if resp.Header.Revision >= end.Header.Revision {
			break
		}
	}
	fgDep := deleted[objects.Key("deployments", "default", string(objects.Foreground))]
	fgRS := deleted[objects.Key("replicasets", "default", rss[objects.Foreground])]
	if fgDep == 0 || fgRS == 0 || fgRS > fgDep {
		t.Errorf("foreground: the replicaset went at revision %d, the deployment at %d: want the replicaset first", fgRS, fgDep)
	}
	for k, at := range deleted {
		if strings.HasPrefix(k, objects.Prefix("pods", "default")+rss[objects.Foreground]+"-") && at > fgRS {
			t.Errorf("foreground: pod %s went at revision %d, after its replicaset (%d)", k, at, fgRS)
		}
	}

	// A declared kind: the worker learns Foo from its declaration, and a
	// Deployment a Foo owns goes with it.
	foo := kinds.Kind{Kind: "Foo", Resource: "foos", Aliases: []string{"foo"}}
	b, err := (kinds.Declaration{Queue: "foos", For: foo, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Deployment)}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, kinds.DeclarationPrefix+"foos", string(b)); err != nil {
		t.Fatal(err)
	}
	s.apply("foos", "app", map[string]any{"kind": "Foo", "spec": map[string]any{}})
	app := get[objects.Object[map[string]any, map[string]any]](s, "foos", "app")
	owned := dep()
	owned["metadata"] = map[string]any{"ownerReferences": []any{map[string]any{"kind": "Foo", "name": "app", "uid": app.Metadata.UID}}}
	s.apply("deployments", "app", owned)
	waitFor(t, converge, "the Foo's deployment has two running pods", func() bool {
		rs := rsOf("app")
		return rs != "" && running(s.pods("ReplicaSet", rs)) == 2
	})
	appRS := rsOf("app")
	waitFor(t, converge, "the observer feeds the collector Foo", func() bool {
		st, err := s.observer.Status(ctx, &observerv1.StatusRequest{Queue: kinds.GarbageCollectorQueue})
		return err == nil && slices.ContainsFunc(st.GetRules(), func(r *observerv1.Rule) bool { return r.GetKind() == "Foo" })
	})
	s.del("foos", "app")
	waitFor(t, converge, "the Foo's deployment, replicaset and pods gone", func() bool {
		return gone("deployments", "app") && gone("replicasets", appRS) && len(s.pods("ReplicaSet", appRS)) == 0
	})
	// The collector declared nothing for it, nor for any kind.
	resp, err := s.cli.Get(ctx, kinds.DeclarationPrefix+kinds.GarbageCollectorQueue, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("declarations of the collector in etcd: %d (%v), want none", resp.Count, err)
	}
}
