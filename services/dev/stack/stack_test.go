package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/batonctl/cli"
)

// examples is the repository's examples/ folder, which the README's tour
// applies.
var examples = filepath.Join("..", "..", "..", "examples")

// running is one stack started by a test.
type running struct {
	ep   Endpoints
	stop func() // cancels and waits; fails the test on an unclean stop
}

// startStack starts the stack as `make run` does, on free ports, with its
// data in dir. A free port picked for etcd can be taken by another process
// before etcd binds it, so a failed start is tried again.
// startStack runs the stack on free ports with its state in dir; configure,
// if given, changes the configuration first.
func startStack(t *testing.T, dir string, configure ...func(*Config)) *running {
	t.Helper()
	var err error
	for range 3 {
		var r *running
		if r, err = tryStartStack(t, dir, configure...); err == nil {
			return r
		}
		t.Logf("start: %v; retrying", err)
	}
	t.Fatalf("stack did not start: %v", err)
	return nil
}

func tryStartStack(t *testing.T, dir string, configure ...func(*Config)) (*running, error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.FreePorts()
	cfg.DataDir = dir
	cfg.UnsafeNoFsync = true
	cfg.Queue.GracePeriod, cfg.Observer.GracePeriod, cfg.Worker.GracePeriod = 5*time.Second, 5*time.Second, 5*time.Second
	for _, f := range configure {
		f(&cfg)
	}
	ready := make(chan Endpoints, 1)
	cfg.OnReady = func(e Endpoints) { ready <- e }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, nil) }()
	r := &running{}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stack stopped with: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("stack did not stop within 60s")
		}
	}
	select {
	case r.ep = <-ready:
		t.Cleanup(r.stop)
		return r, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, err
	case <-time.After(90 * time.Second):
		r.stop()
		return nil, errors.New("not ready after 90s")
	}
}

// ctl runs batonctl in-process against the stack.
func (r *running) ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	global := []string{"--etcd-endpoints", r.ep.Etcd, "--queue-addr", r.ep.QueueGRPC, "--observer-addr", r.ep.ObserverGRPC, "--timeout", "5s"}
	var out, errb bytes.Buffer
	code := cli.Main(t.Context(), append(global, args...), cli.IO{
		Stdout: &out, Stderr: &errb, Lookup: func(string) (string, bool) { return "", false },
	})
	return code, out.String(), errb.String()
}

func (r *running) mustCtl(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := r.ctl(t, args...)
	if code != 0 {
		t.Fatalf("batonctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// list returns the objects of a resource as decoded JSON.
func (r *running) list(t *testing.T, resource string) []map[string]any {
	t.Helper()
	var l struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.mustCtl(t, "get", resource, "-o", "json")), &l); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func (r *running) object(t *testing.T, resource, name string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.mustCtl(t, "get", resource, name, "-o", "json")), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func path(m map[string]any, p ...string) any {
	var cur any = m
	for _, k := range p {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func num(m map[string]any, p ...string) int {
	f, _ := path(m, p...).(float64)
	return int(f)
}

// eventually polls cond (which reports what it saw) until it holds.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, still not %s; last saw:\n%s", d, what, saw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// webPods counts the running pods of Deployment web by image.
func (r *running) webPods(t *testing.T) map[string]int {
	t.Helper()
	byImage := map[string]int{}
	for _, p := range r.list(t, "pods") {
		name, _ := path(p, "metadata", "name").(string)
		if !strings.HasPrefix(name, "web-") || path(p, "status", "phase") != "Running" {
			continue
		}
		img, _ := path(p, "spec", "image").(string)
		byImage[img]++
	}
	return byImage
}

func writeManifest(t *testing.T, from, old, repl string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examples, from))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", from, old)
	}
	p := filepath.Join(t.TempDir(), from)
	if err := os.WriteFile(p, bytes.Replace(b, []byte(old), []byte(repl), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStackWithBatonctl is the README's tour, automated: the embedded stack
// as `make run` starts it, driven only through batonctl — apply every
// example, converge, scale, roll out a new image, delete — then a restart
// on the same data directory that finds everything where it was.
func TestStackWithBatonctl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	dir := t.TempDir()
	s := startStack(t, dir)

	out := s.mustCtl(t, "apply", "-f", examples)
	for _, want := range []string{"deployment/web created", "replicaset/cache created", "job/pi created", "statefulset/db created", "pod/debug created"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}

	const converge = 60 * time.Second
	eventually(t, converge, "every example converged", func() (bool, string) {
		d, rs, sts, job, pod := s.object(t, "deploy", "web"), s.object(t, "rs", "cache"), s.object(t, "sts", "db"), s.object(t, "job", "pi"), s.object(t, "pod", "debug")
		ok := num(d, "status", "readyReplicas") == 3 && num(d, "status", "updatedReplicas") == 3 &&
			num(rs, "status", "readyReplicas") == 2 && num(sts, "status", "readyReplicas") == 3 &&
			num(job, "status", "succeeded") == 4 && path(pod, "status", "phase") == "Running"
		_, all, _ := s.ctl(t, "get", "all")
		return ok, all
	})
	if jobs := s.mustCtl(t, "get", "jobs"); !strings.Contains(jobs, "Complete") {
		t.Errorf("job not Complete:\n%s", jobs)
	}

	// Scale.
	s.mustCtl(t, "apply", "-f", writeManifest(t, "deployment.yaml", "replicas: 3", "replicas: 5"))
	eventually(t, converge, "web scaled to 5", func() (bool, string) {
		pods := s.webPods(t)
		d := s.object(t, "deploy", "web")
		return pods["nginx:1.27"] == 5 && num(d, "status", "readyReplicas") == 5, s.mustCtl(t, "get", "deploy,rs,pods")
	})

	// Roll out a new image.
	p := writeManifest(t, "deployment.yaml", "replicas: 3", "replicas: 5")
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, bytes.Replace(b, []byte("nginx:1.27"), []byte("nginx:1.28"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := s.mustCtl(t, "apply", "-f", p); out != "deployment/web configured\n" {
		t.Errorf("apply image change: %q", out)
	}
	eventually(t, converge, "web rolled out to nginx:1.28", func() (bool, string) {
		pods := s.webPods(t)
		d := s.object(t, "deploy", "web")
		return pods["nginx:1.28"] == 5 && pods["nginx:1.27"] == 0 && num(d, "status", "updatedReplicas") == 5 &&
			num(d, "status", "readyReplicas") == 5 && num(d, "metadata", "generation") == 3, s.mustCtl(t, "get", "deploy,rs,pods")
	})
	if d := s.mustCtl(t, "describe", "deploy", "web"); !strings.Contains(d, "Children (replicasets):") || strings.Count(d, "web-") < 2 {
		t.Errorf("describe after rollout shows no old and new ReplicaSet:\n%s", d)
	}

	// Everything healthy, the observer caught up.
	eventually(t, 30*time.Second, "status healthy", func() (bool, string) {
		code, out, errs := s.ctl(t, "status", "--queue-http-addr", s.ep.QueueHTTP, "--observer-http-addr", s.ep.ObserverHTTP, "--worker-http-addr", s.ep.WorkerHTTP)
		return code == 0 && strings.Contains(out, "lag 0"), out + errs
	})

	// Delete: the deployment's controller removes its ReplicaSets, theirs
	// their pods.
	if out := s.mustCtl(t, "delete", "deploy", "web"); out != "deployment/web deleted\n" {
		t.Errorf("delete: %q", out)
	}
	eventually(t, converge, "web's ReplicaSets and pods gone", func() (bool, string) {
		for _, res := range []string{"rs", "pods"} {
			for _, o := range s.list(t, res) {
				if name, _ := path(o, "metadata", "name").(string); strings.HasPrefix(name, "web-") {
					return false, s.mustCtl(t, "get", "rs,pods")
				}
			}
		}
		return true, ""
	})

	// Restart on the same data: the objects and their state are still there.
	s.stop()
	s2 := startStack(t, dir)
	eventually(t, converge, "state kept across a restart", func() (bool, string) {
		sts, job := s2.object(t, "sts", "db"), s2.object(t, "job", "pi")
		_, all, _ := s2.ctl(t, "get", "all")
		return num(sts, "status", "readyReplicas") == 3 && num(job, "status", "succeeded") == 4, all
	})
	if code, _, errs := s2.ctl(t, "get", "deploy", "web"); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("deleted deployment back after restart: exit %d %s", code, errs)
	}
}
