package service

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/test/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }

// result is one run of baton-experiment.
type result struct {
	code           int
	stdout, stderr string
}

// deadAddr is a loopback port nothing listens on (port 1 needs root to
// bind, and nothing here runs a service on it).
const deadAddr = "127.0.0.1:1"

// target is the stack a test's baton-experiment talks to; empty parts are
// unreachable, so no test touches a developer's running stack.
type target struct{ etcd, queue, observer string }

func (tg target) run(t *testing.T, args ...string) result {
	t.Helper()
	return tg.runCtx(t, t.Context(), args...)
}

func (tg target) runCtx(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	or := func(s, dead string) string {
		if s == "" {
			return dead
		}
		return s
	}
	globals := []string{"--etcd-endpoints", or(tg.etcd, "http://"+deadAddr), "--queue-addr", or(tg.queue, deadAddr),
		"--observer-addr", or(tg.observer, deadAddr), "--timeout", "2s"}
	var out, errb bytes.Buffer
	code := Main(ctx, append(globals, args...), IO{Stdout: &out, Stderr: &errb, Lookup: func(string) (string, bool) { return "", false }})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) mustSucceed(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// stack is what a test's baton-experiment runs against.
type stack struct {
	target
	queue *framework.Queue
}

// startStack runs an etcd, and the baton-queue, baton-observer (with the
// experiments' rules) and baton-worker (every reference controller)
// binaries as child processes (test/framework: this module links no
// service's server code), until the test ends.
func startStack(t *testing.T) stack {
	t.Helper()
	rules, err := os.ReadFile("../rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, framework.QueueOptions{})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, Rules: string(rules)})
	framework.StartWorker(t, framework.WorkerOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, ObserverAddr: o.Addr})
	return stack{target: target{etcd: etcd.Endpoints()[0], queue: q.Addr, observer: o.Addr}, queue: q}
}

// hasRow reports whether table has a line whose whitespace-separated cells
// begin with cells (column widths do not matter).
func hasRow(table string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < len(cells) {
			continue
		}
		ok := true
		for i, c := range cells {
			if f[i] != c {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestCommand drives baton-experiment as a user (or batonctl) does,
// against a running stack: the tables, -o json, and the errors. The
// experiments' own outcomes are tested in internal/experiment.
func TestCommand(t *testing.T) {
	s := startStack(t)
	tg := s.target

	out := tg.run(t, "repeat").mustSucceed(t).stdout
	if !hasRow(out, "Notifications", "observed", "3", "3") || !hasRow(out, "Reconciles", "3", "1") || !hasRow(out, "Correct", "number", "needed", "1", "1") ||
		!strings.Contains(out, "Add #1: queued\n  Add #2-#3: collapsed") {
		t.Errorf("repeat table:\n%s", out)
	}

	out = tg.run(t, "failure", "-o", "json").mustSucceed(t).stdout
	var f struct {
		Direct struct{ Pods int } `json:"direct_reaction"`
		Baton  struct {
			Pods  int
			Steps []struct {
				Inspect struct {
					Attempts  int    `json:"attempts"`
					LastError string `json:"last_error"`
				} `json:"inspect"`
			} `json:"steps"`
		} `json:"baton"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("failure -o json: %v\n%s", err, out)
	}
	if f.Baton.Pods != 3 || f.Direct.Pods != 1 || len(f.Baton.Steps) != 3 || f.Baton.Steps[2].Inspect.Attempts != 2 || f.Baton.Steps[2].Inspect.LastError == "" {
		t.Errorf("failure -o json:\n%s", out)
	}

	// Global flags may also follow the experiment's name.
	out = tg.run(t, "burst", "--discover", "100/s", "--execute", "1200/m", "--duration", "500ms", "--keys", "3", "--timeout", "3s").mustSucceed(t).stdout
	for _, row := range [][]string{{"Discovered", "/", "second"}, {"Completed", "/", "second"}, {"Backlog"}, {"Who", "holds", "the", "backlog", "nobody", "the", "queue:", "depth"}, {"Collapsed", "announcements", "0"}} {
		if !hasRow(out, row...) {
			t.Errorf("burst table lacks %q:\n%s", row, out)
		}
	}

	// Interrupted (Ctrl-C cancels the context): the run cleans up and says
	// so.
	ctx, cancel := context.WithCancel(t.Context())
	timer := time.AfterFunc(time.Second, cancel)
	r := tg.runCtx(t, ctx, "burst", "--discover", "100/s", "--duration", "5s")
	timer.Stop()
	cancel()
	if r.code != 1 || r.stderr != "error: experiment burst: interrupted; the run deleted its objects and forgot its queue keys\n" {
		t.Errorf("interrupted burst: exit %d, stderr %q", r.code, r.stderr)
	}

	out = tg.run(t, "clean").mustSucceed(t).stdout
	if !strings.Contains(out, "deleted 0 objects under /registry/experiments/\n") || !strings.Contains(out, "forgot 0 keys in queue experiment-failure\n") {
		t.Errorf("clean:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: batonctl [global flags] experiment"},
		{[]string{"storm"}, 2, `unknown experiment "storm"`},
		{[]string{"burst", "--discover", "fast"}, 2, "positive rate"},
		{[]string{"burst", "--execute", "10/day"}, 2, "unknown unit"},
		{[]string{"burst", "--duration", "0s"}, 2, "--duration: must be positive"},
		{[]string{"repeat", "--notifications", "0"}, 2, "--notifications"},
		{[]string{"failure", "--failures", "5"}, 2, "--failures"},
		{[]string{"repeat", "-o", "yaml"}, 2, "unknown output format"},
		{[]string{"repeat", "extra"}, 2, `unexpected argument "extra"`},
	} {
		r := tg.run(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if r := tg.run(t, "help"); r.code != 0 || !strings.Contains(r.stdout, "burst    [--discover") {
		t.Errorf("help: exit %d, stdout %q", r.code, r.stdout)
	}

	// A queue that already holds keys is refused, not mixed into the
	// experiment's numbers.
	if _, err := s.queue.Client.Add(t.Context(), "experiment-repeat", []string{"left/over"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	r = tg.run(t, "repeat")
	if r.code != 1 || !strings.Contains(r.stderr, "queue experiment-repeat holds 1 keys") {
		t.Errorf("busy queue: exit %d, stderr %q", r.code, r.stderr)
	}

	// A bad option is a usage error even when nothing answers.
	if r := (target{}).run(t, "failure", "--replicas", "1"); r.code != 2 || !strings.Contains(r.stderr, "--replicas") {
		t.Errorf("bad option, no stack: exit %d, stderr %q", r.code, r.stderr)
	}

	// Nothing answers: the error names the endpoint and its flag.
	r = target{etcd: tg.etcd}.run(t, "repeat")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused: is the queue running at "+deadAddr+"? (set --queue-addr)") {
		t.Errorf("no queue: exit %d, stderr %q", r.code, r.stderr)
	}
	r = target{etcd: tg.etcd, queue: tg.queue}.run(t, "repeat")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused: is the observer running at "+deadAddr+"? (set --observer-addr)") {
		t.Errorf("no observer: exit %d, stderr %q", r.code, r.stderr)
	}
	r = target{}.run(t, "repeat")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused: is etcd running at http://"+deadAddr+"? (set --etcd-endpoints)") {
		t.Errorf("no etcd: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestEnvironment: the global flags also come from BATON_EXPERIMENT_*, and
// the command line wins.
func TestEnvironment(t *testing.T) {
	env := map[string]string{"BATON_EXPERIMENT_QUEUE_ADDR": "q.example:1", "BATON_EXPERIMENT_TIMEOUT": "9s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := Parse([]string{"--timeout", "3s", "repeat"}, lookup, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueAddr != "q.example:1" || cfg.Timeout != 3*time.Second || cfg.Experiment != "repeat" || cfg.Repeat.Notifications != 3 {
		t.Errorf("parsed %+v", cfg)
	}
}
