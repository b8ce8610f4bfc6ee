package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/services/batonctl/cli"
)

// binary is baton-dev built once for the tests of this package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-dev-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "baton-dev")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build baton-dev: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ports are the listen ports of one stack.
type ports struct{ etcd, qg, qh, og, oh, wh string }

func freePorts(t *testing.T) ports {
	t.Helper()
	var addrs []string
	var ls []net.Listener
	for range 6 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return ports{addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[5]}
}

// proc is a running baton-dev.
type proc struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs baton-dev on p with its data in dir and waits for its
// "running" banner.
func start(t *testing.T, dir string, p ports) *proc {
	t.Helper()
	cmd := exec.Command(binary, "--data-dir", dir, "--etcd-client-url", "http://"+p.etcd,
		"--queue-grpc-addr", p.qg, "--queue-http-addr", p.qh, "--observer-grpc-addr", p.og, "--observer-http-addr", p.oh,
		"--worker-http-addr", p.wh, "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr := &proc{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = pr.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "Baton is running") {
				once = true
				close(ready)
			}
		}
	}()
	go func() { pr.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-pr.done
		pr.done <- nil
	})
	select {
	case <-ready:
	case err := <-pr.done:
		pr.done <- err
		t.Fatalf("baton-dev exited before it was ready: %v\n%s", err, pr.stderr)
	case <-time.After(90 * time.Second):
		t.Fatalf("baton-dev not ready after 90s\n%s", pr.stderr)
	}
	return pr
}

func ctl(t *testing.T, p ports, stdin string, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	global := []string{"--etcd-endpoints", "http://" + p.etcd, "--queue-addr", p.qg, "--observer-addr", p.og, "--timeout", "5s"}
	code := cli.Main(context.Background(), append(global, args...), cli.IO{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Lookup: func(string) (string, bool) { return "", false },
	})
	return code, out.String() + errb.String()
}

// runningImages counts the running pods of Deployment web by image, and
// reports the deployment's ready replicas.
func runningImages(t *testing.T, p ports) (map[string]int, int) {
	t.Helper()
	images := map[string]int{}
	code, out := ctl(t, p, "", "get", "pods", "-o", "json")
	if code != 0 {
		return images, -1
	}
	var l struct {
		Items []struct {
			Metadata struct{ Name string }  `json:"metadata"`
			Spec     struct{ Image string } `json:"spec"`
			Status   struct{ Phase string } `json:"status"`
		} `json:"items"`
	}
	_ = json.Unmarshal([]byte(out), &l)
	for _, it := range l.Items {
		if strings.HasPrefix(it.Metadata.Name, "web-") && it.Status.Phase == "Running" {
			images[it.Spec.Image]++
		}
	}
	var d struct {
		Status struct {
			ReadyReplicas int `json:"readyReplicas"`
		} `json:"status"`
	}
	if code, out := ctl(t, p, "", "get", "deploy", "web", "-o", "json"); code == 0 {
		_ = json.Unmarshal([]byte(out), &d)
	}
	return images, d.Status.ReadyReplicas
}

func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, still not %s; saw %s", d, what, saw)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const deployment = `kind: Deployment
metadata: {name: web}
spec:
  replicas: %d
  template:
    metadata: {labels: {app: web}}
    spec: {image: "%s"}
`

// TestKillAndRestart is the README's tour as processes: converge, SIGKILL
// the stack (the queue with it) in the middle of a rollout, start it again
// on the same data, and the rollout finishes with nothing lost; then Ctrl-C
// stops it cleanly with exit status 0.
func TestKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stack as a process")
	}
	dir := t.TempDir()
	p := freePorts(t)
	first := start(t, dir, p)

	if code, out := ctl(t, p, fmt.Sprintf(deployment, 10, "nginx:1.27"), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	eventually(t, 60*time.Second, "10 pods of nginx:1.27", func() (bool, string) {
		img, ready := runningImages(t, p)
		return img["nginx:1.27"] == 10 && ready == 10, fmt.Sprint(img, " ready ", ready)
	})

	if code, out := ctl(t, p, fmt.Sprintf(deployment, 30, "nginx:1.28"), "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil

	second := start(t, dir, p)
	eventually(t, 90*time.Second, "the rollout finished after the restart", func() (bool, string) {
		img, ready := runningImages(t, p)
		return img["nginx:1.28"] == 30 && img["nginx:1.27"] == 0 && ready == 30, fmt.Sprint(img, " ready ", ready)
	})

	if err := second.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second.done:
		second.done <- err
		if err != nil {
			t.Errorf("baton-dev after Ctrl-C: %v\n%s", err, second.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("baton-dev did not stop within 60s of Ctrl-C\n%s", second.stderr)
	}
}

// TestStrayArgumentsAreRefused: `baton-dev bogus --foo` once started the
// whole stack; a word it does not know, or a flag it does not have, is a
// usage error (exit 2) with a usage line, and nothing starts.
func TestStrayArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{{"bogus", "--foo"}, {"--data-dir", t.TempDir(), "extra"}, {"--no-such-flag"}} {
		cmd := exec.Command(binary, args...)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage") && !strings.Contains(string(out), "flag provided but not defined") {
			t.Errorf("baton-dev %v: %v, output %q; want exit 2 and a usage message", args, err, out)
		}
		if entries, _ := os.ReadDir(cmd.Dir); len(entries) != 0 {
			t.Errorf("baton-dev %v created %v in its directory", args, entries)
		}
	}
}
