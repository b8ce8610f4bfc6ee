package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/test/framework"
)

func TestMain(m *testing.M) {
	if os.Getenv(asBatonctl) == "1" {
		// A test runs this binary as batonctl (the bash completion test,
		// whose script calls batonctl by name).
		os.Exit(Main(context.Background(), os.Args[1:], IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	os.Exit(framework.RunTests(m))
}

// asBatonctl, set to 1 in its environment, makes the test binary batonctl.
const asBatonctl = "BATONCTL_TEST_AS_BATONCTL"

// result is one run of batonctl.
type result struct {
	code           int
	stdout, stderr string
}

// env is what a test's batonctl talks to.
type env struct {
	etcd  string // endpoints
	queue string // gRPC address
}

// globals returns the global flags pointing at e (unreachable defaults for
// the parts e lacks, so no test touches a developer's running stack).
func (e env) globals() []string {
	etcd, queue := e.etcd, e.queue
	if etcd == "" {
		etcd = "http://" + deadAddr
	}
	if queue == "" {
		queue = deadAddr
	}
	return []string{"--etcd-endpoints", etcd, "--queue-addr", queue, "--observer-addr", deadAddr, "--timeout", "2s"}
}

// deadAddr is a loopback port nothing listens on (port 1 needs root to
// bind, and nothing here runs a service on it).
const deadAddr = "127.0.0.1:1"

// run runs batonctl in-process with the environment cleared.
func (e env) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runCtx(t, t.Context(), stdin, append(e.globals(), args...)...)
}

func runCtx(t *testing.T, ctx context.Context, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(ctx, args, IO{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Lookup: func(string) (string, bool) { return "", false },
	})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) mustSucceed(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// startEtcd starts an embedded etcd for the test.
func startEtcd(t *testing.T) string {
	t.Helper()
	return etcdembed.StartForTest(t).Endpoints()[0]
}

// startQueue runs the real baton-queue binary on free ports until the test
// ends (test/framework: batonctl requires no service's module).
func startQueue(t *testing.T) (grpcAddr, httpAddr string) {
	t.Helper()
	q := framework.StartQueue(t, framework.QueueOptions{})
	return q.Addr, q.HTTPAddr
}

// writeFile writes body to name under dir and returns its path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
