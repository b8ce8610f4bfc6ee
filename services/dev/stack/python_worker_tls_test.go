package stack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
)

// pyProcess is one run of worker.py, its output in a file.
type pyProcess struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startWorkerPy runs worker.py with args and env added to the test's
// environment; it is killed when the test ends if it still runs, and its
// log is shown if the test failed.
func startWorkerPy(t *testing.T, ctx context.Context, python, logPath string, env []string, args ...string) *pyProcess {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &pyProcess{log: logPath, exited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, python, append([]string{filepath.Join(pythonWorker, "worker.py")}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s:\n%s", filepath.Base(logPath), p.output())
		}
	})
	return p
}

func (p *pyProcess) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// stop sends SIGTERM and fails the test unless the worker exits 0 within
// 30 s.
func (p *pyProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("worker.py exited with %v after SIGTERM, want 0", p.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("worker.py still running 30s after SIGTERM")
	}
}

// newEtcdTLS is etcd's JSON gateway as the etcd-client certificate of
// certs reaches it.
func newEtcdTLS(t *testing.T, endpoint, certs string) *etcdGateway {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(certs, "etcd-client.crt"), filepath.Join(certs, "etcd-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("ca.crt holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &etcdGateway{endpoint: endpoint, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// TestPythonWorkerMutualTLS runs examples/python-worker/worker.py against
// the embedded stack with mutual TLS on every link (make run TLS=1's
// stack, but for the experiments' rules). Each run declares what the worker
// watches through etcd's https:// JSON gateway with etcd's client
// certificate (the BATON_ETCD_* environment), and the observer executes it:
// with the CA alone, the queue refuses the worker and it says so while it
// retries; with the worker's certificate (the flags) it leases, reads
// through the observer, writes the status through the gateway, acks a
// malformed Greeting as terminal, and stops cleanly on SIGTERM. The second
// run finds its declaration in place and writes nothing.
func TestPythonWorkerMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack and a Python process")
	}
	python := findPython(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()

	stubs := pythonSetup(t, ctx, python, dir)
	s := startStack(t, filepath.Join(dir, "stack"), func(c *Config) { c.TLS = true })
	certs := s.ep.Certs
	if certs == "" || !strings.HasPrefix(s.ep.Etcd, "https://") {
		t.Fatalf("the stack is not TLS: %+v", s.ep)
	}
	file := func(name string) string { return filepath.Join(certs, name) }
	etcd := newEtcdTLS(t, s.ep.Etcd, certs)
	etcd.putGreeting(t, "hi", `{"name":"world"}`, 1)
	etcd.putGreeting(t, "bad", `{}`, 1)

	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: file("admin.crt"), KeyFile: file("admin.key"), CAFile: file("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	q, err := queueclient.Dial(s.ep.QueueGRPC, queueclient.WithTLS(src))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	observer, err := observerclient.Dial(s.ep.ObserverGRPC, observerclient.WithTLS(src))
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()

	addrs := []string{"--queue-addr", s.ep.QueueGRPC, "--observer-addr", s.ep.ObserverGRPC, "--etcd-endpoints", s.ep.Etcd,
		"--stubs", stubs, "--lease-duration", "2"}
	etcdEnv := []string{"BATON_ETCD_CACERT=" + file("ca.crt"), "BATON_ETCD_CERT=" + file("etcd-client.crt"), "BATON_ETCD_KEY=" + file("etcd-client.key")}

	// The CA but no certificate: the handshake is refused, every Lease.
	refused := startWorkerPy(t, ctx, python, filepath.Join(dir, "refused.log"), etcdEnv,
		append(addrs, "--worker", "python-no-cert", "--cacert", file("ca.crt"))...)
	declared := declaredByPython(t, etcd, observer)
	eventually(t, 30*time.Second, "worker.py without a certificate refused", func() (bool, string) {
		out := refused.output()
		return strings.Contains(out, "lease failed: UNAVAILABLE"), out
	})
	for _, l := range strings.Split(refused.output(), "\n") {
		if strings.Contains(l, "lease failed") {
			t.Logf("refused: %s", l)
			break
		}
	}
	if st := etcd.status(t, "hi"); st != "" {
		t.Errorf("a worker without a certificate greeted hi: %s", st)
	}
	refused.stop(t)

	// Mutual TLS.
	worker := startWorkerPy(t, ctx, python, filepath.Join(dir, "worker.log"), etcdEnv,
		append(addrs, "--worker", "python-tls", "--cacert", file("ca.crt"), "--cert", file("worker.crt"), "--key", file("worker.key"))...)
	eventually(t, 60*time.Second, "hi greeted over mutual TLS, bad parked, the queue otherwise empty", func() (bool, string) {
		hi := etcd.status(t, "hi")
		st, err := q.Stats(ctx, "greetings")
		if err != nil || len(st) != 1 {
			return false, fmt.Sprintf("hi: %s; stats: %v", hi, err)
		}
		saw := fmt.Sprintf("hi: %s; pending=%d delayed=%d leased=%d parked=%d", hi,
			st[0].GetPending(), st[0].GetDelayed(), st[0].GetLeased(), st[0].GetParked())
		return hi == `{"message":"hello, world","observedGeneration":1}` &&
			st[0].GetPending()+st[0].GetDelayed()+st[0].GetLeased() == 0 && st[0].GetParked() == 1, saw
	})
	item, err := q.Inspect(ctx, "greetings", "default/bad")
	if err != nil {
		t.Fatal(err)
	}
	if got := item.GetState().String(); got != "ITEM_STATE_PARKED" || item.GetLastError() != "spec.name is empty" {
		t.Errorf("default/bad: %s, last_error %q; want ITEM_STATE_PARKED, %q", got, item.GetLastError(), "spec.name is empty")
	}
	worker.stop(t)
	out := worker.output()
	for _, want := range []string{"as worker=python-tls (mutual TLS)", "acked key=default/hi outcome=success", "terminal key=default/bad: spec.name is empty", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker.py's log lacks %q", want)
		}
	}
	if strings.Contains(out, "lease failed") {
		t.Error("worker.py with its certificate had a Lease refused")
	}
	key, want := pythonDeclaration(t)
	if got, rev := etcd.get(t, key); got != want || rev != declared {
		t.Errorf("after a second run, %s holds %q at revision %d; want %q still at %d", key, got, rev, want, declared)
	}
	if strings.Contains(out, "declared what a controller watches") {
		t.Error("worker.py declared again what was declared already")
	}
}
