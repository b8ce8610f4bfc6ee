package service_test

import (
	"fmt"
	"strings"
	"testing"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/test/framework"
)

// statusOnlyRules are the test rules with the pods queue ignoring its own
// status changes, as a rules file says it; the replicasets queue's own
// rule does not.
const statusOnlyRules = `rules:
  - queue: pods
    prefix: /registry/pods/
    ignoreOwnStatus: true
  - queue: replicasets
    prefix: /registry/pods/
    ownerKind: ReplicaSet
  - queue: replicasets
    prefix: /registry/replicasets/
`

// TestStatusOnlyChangesSkipTheirOwnQueue runs the baton-observer binary
// with a rules file whose pods rule ignores its own status changes. A
// write that changes nothing but a pod's status announces the pod's
// ReplicaSet, not the pod; a ReplicaSet's status-only change announces it
// (its rule does not opt out); a pod's spec change announces the pod.
// Status shows the opt-out, /metrics counts what it left out.
func TestStatusOnlyChangesSkipTheirOwnQueue(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	fo := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: srv.Endpoints(), QueueAddr: q.addr, Rules: statusOnlyRules})
	o := &observerConn{grpcAddr: fo.Addr, httpAddr: fo.HTTPAddr, proc: fo, stop: fo.Kill}
	o.conn, o.rpc = dialObserver(t, fo.Addr)

	put := func(key, value string) {
		t.Helper()
		if _, err := cli.Put(t.Context(), key, value); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(image, phase string) string {
		return fmt.Sprintf(`{"kind":"Pod","metadata":{"name":"p","namespace":"a","uid":"u1","ownerReferences":[{"kind":"ReplicaSet","name":"web","uid":"u0"}]},`+
			`"spec":{"image":%q},"status":{"phase":%q}}`, image, phase)
	}
	rs := func(ready int) string {
		return fmt.Sprintf(`{"kind":"ReplicaSet","metadata":{"name":"web","namespace":"a","uid":"u0"},"spec":{"replicas":1},"status":{"readyReplicas":%d}}`, ready)
	}
	// announced waits until the observer has handed every change on, then
	// returns the keys each queue holds, and drains them.
	announced := func() map[string]string {
		t.Helper()
		settle(t, o, cli)
		out := map[string]string{}
		for _, name := range testQueues {
			keys, err := q.keys(t.Context(), name)
			if err != nil && !strings.Contains(err.Error(), "NotFound") { // never used
				t.Fatal(err)
			}
			for k := range keys {
				out[name] += k + " "
			}
		}
		q.drain(t)
		return out
	}
	check := func(step string, want map[string]string) {
		t.Helper()
		if got := announced(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: queues hold %v, want %v", step, got, want)
		}
	}

	put("/registry/replicasets/a/web", rs(0))
	put("/registry/pods/a/p", pod("nginx", "Pending"))
	check("create", map[string]string{"pods": "a/p ", "replicasets": "a/web "})
	put("/registry/pods/a/p", pod("nginx", "Running"))
	check("a pod's status-only change", map[string]string{"replicasets": "a/web "})
	put("/registry/replicasets/a/web", rs(1))
	check("a replicaset's status-only change", map[string]string{"replicasets": "a/web "})
	put("/registry/pods/a/p", pod("nginx:2", "Running"))
	check("a pod's spec change", map[string]string{"pods": "a/p ", "replicasets": "a/web "})
	if _, err := cli.Delete(t.Context(), "/registry/pods/a/p"); err != nil {
		t.Fatal(err)
	}
	check("a pod's delete", map[string]string{"pods": "a/p ", "replicasets": "a/web "})

	st, err := o.rpc.Status(t.Context(), &observerv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.GetRules() {
		if want := r.GetQueue() == "pods"; r.GetIgnoreOwnStatus() != want {
			t.Errorf("Status rule %v: ignore_own_status %v, want %v", r, r.GetIgnoreOwnStatus(), want)
		}
	}
	got := scrape(t, o.httpAddr, "baton_observer_status_changes_ignored_total")
	if want := map[string]float64{`{queue="pods"}`: 1, `{queue="replicasets"}`: 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("status_changes_ignored_total = %v, want %v", got, want)
	}
}
