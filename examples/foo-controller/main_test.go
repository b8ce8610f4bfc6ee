package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/test/framework"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }

// converge bounds each wait for the stack to converge: a few reconciles
// of four controllers, milliseconds each, on a loaded machine.
const converge = 30 * time.Second

// stack is one test's Baton: real etcd, the queue, the observer and
// baton-worker's reference controllers (the garbage collector among
// them) as child processes, and the Foo controller in the test.
type stack struct {
	etcd     *framework.Etcd
	queue    *framework.Queue
	objs     *objects.Client // writes as any SDK user does, reads etcd
	batonctl string
}

func startStack(t *testing.T) *stack {
	t.Helper()
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, framework.QueueOptions{})
	// No rules file: the observer learns the Foo from its declaration.
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr})
	framework.StartWorker(t, framework.WorkerOptions{QueueAddr: q.Addr, ObserverAddr: o.Addr, EtcdEndpoints: etcd.Endpoints()})
	s := &stack{etcd: etcd, queue: q, objs: objects.NewClient(etcd.Client, nil), batonctl: framework.Binary(t, "batonctl")}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg, err := parseFlags([]string{"--queue-addr", q.Addr, "--observer-addr", o.Addr, "--etcd-endpoints", etcd.Endpoints()[0]}, noEnv)
		if err != nil {
			t.Error(err)
			return
		}
		if err := run(ctx, cfg, nil); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	// batonctl knows the kind Foo from the declaration: wait for it.
	framework.WaitForNoError(t, converge, "the Foo's declaration", func() error {
		resp, err := etcd.Client.Get(t.Context(), declarationKey)
		if err != nil || len(resp.Kvs) == 0 {
			return fmt.Errorf("not in etcd (%v)", err)
		}
		return nil
	})
	return s
}

func noEnv(string) (string, bool) { return "", false }

// declarationKey is where the controller's declaration is in etcd.
var declarationKey = func() string {
	d, _ := Controller(nil, 1).Declaration()
	return d.Key()
}()

// ctl runs batonctl against the stack's etcd and returns its output; it
// fails the test if batonctl fails.
func (s *stack) ctl(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := s.ctlResult(t, args...)
	if err != nil {
		t.Fatalf("batonctl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// ctlResult runs batonctl and returns its output, its error output and
// how it exited.
func (s *stack) ctlResult(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), converge)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.batonctl, append([]string{"--etcd-endpoints", s.etcd.Endpoints()[0]}, args...)...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	return string(out), errOut.String(), err
}

// recorded waits until etcd holds an Event of type and reason about the
// object with uid whose message contains message.
func (s *stack) recorded(t *testing.T, uid, typ, reason, message string) {
	t.Helper()
	framework.WaitForNoError(t, converge, "the event "+reason, func() error {
		resp, err := s.etcd.Client.Get(t.Context(), objects.Prefix(events.Resource, "default"), clientv3.WithPrefix())
		if err != nil {
			return err
		}
		var seen []string
		for _, kv := range resp.Kvs {
			var e events.Event
			if err := json.Unmarshal(kv.Value, &e); err != nil {
				return err
			}
			if e.InvolvedObject.UID == uid && e.InvolvedObject.Kind == "Foo" && e.Type == typ && e.Reason == reason &&
				strings.Contains(e.Message, message) && e.Source.Component == "foo-controller" {
				return nil
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events of the Foo's namespace: %q", seen)
	})
}

// get decodes the object at key from etcd; found is false without one.
func get[T any](t *testing.T, s *stack, key string) (v *T, found bool, err error) {
	resp, err := s.etcd.Client.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, false, err
	}
	v = new(T)
	return v, true, json.Unmarshal(resp.Kvs[0].Value, v)
}

// count returns how many objects etcd holds under prefix.
func count(t *testing.T, s *stack, prefix string) (int64, error) {
	resp, err := s.etcd.Client.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// converged says why the Foo at fooKey and the objects below it are not
// yet as replicas asks, in the Foo's generation gen: the Deployment
// controlled by the Foo with replicas, that many Running pods of the
// Foo's labels, and the Foo's status counting them.
func (s *stack) converged(t *testing.T, fooKey string, replicas int, gen int64) error {
	foo, ok, err := get[Foo](t, s, fooKey)
	if err != nil || !ok {
		return fmt.Errorf("the Foo: found %v, %v", ok, err)
	}
	d, ok, err := get[objects.Deployment](t, s, objects.Key(objects.ResourceDeployments, "default", foo.Spec.DeploymentName))
	if err != nil || !ok {
		return fmt.Errorf("its Deployment: found %v, %v", ok, err)
	}
	refs := d.Metadata.OwnerReferences
	if len(refs) != 1 || refs[0].Kind != "Foo" || refs[0].Name != foo.Metadata.Name || refs[0].UID != foo.Metadata.UID ||
		refs[0].Controller == nil || !*refs[0].Controller {
		return fmt.Errorf("the Deployment's ownerReferences are %+v, want the Foo (uid %s) as controller", refs, foo.Metadata.UID)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		return fmt.Errorf("the Deployment's replicas are %v, want %d", d.Spec.Replicas, replicas)
	}
	resp, err := s.etcd.Client.Get(t.Context(), objects.Prefix(objects.ResourcePods, "default"), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	running := 0
	for _, kv := range resp.Kvs {
		var p objects.Pod
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return err
		}
		if p.Metadata.Labels["controller"] == foo.Metadata.Name && p.Status.Phase == objects.PodRunning {
			running++
		}
	}
	if running != replicas {
		return fmt.Errorf("%d of the Foo's pods run, want %d", running, replicas)
	}
	if want := (FooStatus{AvailableReplicas: replicas, ObservedGeneration: gen}); foo.Status != want {
		return fmt.Errorf("the Foo's status is %+v, want %+v", foo.Status, want)
	}
	return nil
}

// TestFooController follows examples/foo-controller/README.md: a Foo
// applied with batonctl gets its Deployment, owned by it, with running
// pods, and a status that counts them; a change of replicas scales the
// Deployment; the schema refuses a Foo whose replicas are not a number;
// a Deployment someone else made is left alone; and deleting the Foo
// deletes the Deployment, its ReplicaSet and its pods.
func TestFooController(t *testing.T) {
	s := startStack(t)
	ctx := t.Context()

	if got := s.ctl(t, "apply", "-f", "foo.yaml"); got != "foo/example-foo created\n" {
		t.Fatalf("batonctl apply printed %q", got)
	}
	fooKey := FooKind.Key("default", "example-foo")
	framework.WaitForNoError(t, converge, "example-foo's Deployment and its 2 running pods", func() error {
		return s.converged(t, fooKey, 2, 1)
	})
	foo, _, err := get[Foo](t, s, fooKey)
	if err != nil {
		t.Fatal(err)
	}
	s.recorded(t, foo.Metadata.UID, events.Normal, ReasonCreated, "Created Deployment example-foo with 2 replicas")
	// batonctl prints the declared columns.
	lines := strings.Split(strings.TrimSpace(s.ctl(t, "get", "foos")), "\n")
	if len(lines) != 2 || !slices.Equal(strings.Fields(lines[0]), []string{"NAME", "DEPLOYMENT", "DESIRED", "AVAILABLE", "AGE"}) ||
		!slices.Equal(strings.Fields(lines[1])[:4], []string{"example-foo", "example-foo", "2", "2"}) {
		t.Errorf("batonctl get foos printed\n%s", strings.Join(lines, "\n"))
	}

	// Scaling the Foo scales its Deployment.
	if err := objects.Modify(ctx, s.objs, fooKey, func(f *Foo) (bool, error) {
		f.Spec.Replicas = 3
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	framework.WaitForNoError(t, converge, "example-foo scaled to 3", func() error {
		return s.converged(t, fooKey, 3, 2)
	})
	s.recorded(t, foo.Metadata.UID, events.Normal, ReasonScaled, "Scaled Deployment example-foo from 2 to 3 replicas")

	// The declared schema refuses a Foo whose replicas are not a number,
	// and one out of bounds, before anything is written.
	for spec, want := range map[string]string{
		`{"deploymentName":"bad","replicas":"three"}`: `Foo "bad" is invalid: spec.replicas: Invalid value: "three": must be of type integer`,
		`{"deploymentName":"bad","replicas":11}`:      `spec.replicas`,
		`{"deploymentName":"Bad Name","replicas":1}`:  `spec.deploymentName`,
	} {
		bad := &objects.Object[json.RawMessage, struct{}]{Kind: "Foo", Metadata: objects.ObjectMeta{Name: "bad", Namespace: "default"}, Spec: json.RawMessage(spec)}
		_, err := s.objs.Create(ctx, FooKind.Key("default", "bad"), bad)
		var fields *schema.Errors
		if !errors.Is(err, objects.ErrInvalid) || !errors.As(err, &fields) || !strings.Contains(err.Error(), want) {
			t.Errorf("creating a Foo with spec %s: %v, want ErrInvalid saying %q", spec, err, want)
		}
	}
	// So does batonctl, which knows the schema from the declaration.
	three := t.TempDir() + "/three.yaml"
	if err := os.WriteFile(three, []byte("kind: Foo\nmetadata:\n  name: bad\nspec:\n  deploymentName: bad\n  replicas: three\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := s.ctlResult(t, "apply", "-f", three); err == nil ||
		!strings.Contains(stderr, three+`:6:13: The Foo "bad" is invalid: spec.replicas: Invalid value: "three": must be of type integer`) {
		t.Errorf("batonctl apply of replicas: three: %v\n%s", err, stderr)
	}
	if _, found, err := get[Foo](t, s, FooKind.Key("default", "bad")); found || err != nil {
		t.Errorf("a refused Foo was stored (found %v, %v)", found, err)
	}

	// A Foo that asks for a Deployment someone else made does not take it
	// over: its reconciles fail, saying why, and the Deployment stays as
	// it was.
	theirs := &objects.Deployment{Kind: objects.KindDeployment, Metadata: objects.ObjectMeta{Name: "theirs", Namespace: "default"},
		Spec: objects.DeploymentSpec{Template: objects.PodTemplate{Spec: objects.PodSpec{Image: "redis:7"}}}}
	if _, err := s.objs.Create(ctx, objects.Key(objects.ResourceDeployments, "default", "theirs"), theirs); err != nil {
		t.Fatal(err)
	}
	greedy := &Foo{Kind: "Foo", Metadata: objects.ObjectMeta{Name: "greedy", Namespace: "default"}, Spec: FooSpec{DeploymentName: "theirs", Replicas: 5}}
	if _, err := s.objs.Create(ctx, FooKind.Key("default", "greedy"), greedy); err != nil {
		t.Fatal(err)
	}
	framework.WaitForNoError(t, converge, "greedy's reconcile to fail", func() error {
		item, err := s.queue.Client.Inspect(ctx, Queue, "default/greedy")
		if err != nil {
			return err
		}
		if !strings.Contains(item.GetLastError(), "deployment theirs already exists and is not controlled by Foo greedy") {
			return fmt.Errorf("last error %q", item.GetLastError())
		}
		return nil
	})
	s.recorded(t, greedy.Metadata.UID, events.Warning, ReasonExists, `Resource "theirs" already exists and is not managed by Foo`)
	if d, _, err := get[objects.Deployment](t, s, objects.Key(objects.ResourceDeployments, "default", "theirs")); err != nil || len(d.Metadata.OwnerReferences) != 0 || d.Spec.Replicas != nil {
		t.Errorf("greedy changed the Deployment it does not own: %+v (%v)", d, err)
	}

	// Deleting the Foo deletes what it owns: the garbage collector the
	// Deployment, the Deployment controller its ReplicaSet, and the
	// ReplicaSet controller the pods. The Deployment that is not the
	// Foo's stays.
	if got := s.ctl(t, "delete", "foo", "example-foo"); got != "foo/example-foo deleted\n" {
		t.Fatalf("batonctl delete printed %q", got)
	}
	framework.WaitForNoError(t, converge, "example-foo's Deployment, ReplicaSet and pods collected", func() error {
		for _, resource := range []string{objects.ResourceDeployments, objects.ResourceReplicaSets, objects.ResourcePods} {
			prefix := objects.Prefix(resource, "default") + "example-foo"
			if n, err := count(t, s, prefix); err != nil || n != 0 {
				return fmt.Errorf("%d objects under %s (%v)", n, prefix, err)
			}
		}
		return nil
	})
	if _, found, err := get[objects.Deployment](t, s, objects.Key(objects.ResourceDeployments, "default", "theirs")); !found || err != nil {
		t.Errorf("the Deployment no Foo owns was deleted too (found %v, %v)", found, err)
	}
}
