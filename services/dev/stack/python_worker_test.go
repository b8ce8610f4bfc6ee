package stack

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
)

// pythonWorker is examples/python-worker, a worker written in Python.
var pythonWorker = filepath.Join("..", "..", "..", "examples", "python-worker")

// pythonPackages are Debian's packages the Python worker and its stub
// generator need; scripts/test.sh installs them when it runs as root.
const pythonPackages = "python3-grpcio python3-grpc-tools python3-protobuf python3-pkg-resources"

// findPython returns an interpreter that has grpcio, grpcio-tools and
// protobuf: $BATON_PYTHON, else the first of python3 on PATH and Debian's
// /usr/bin/python3 that has them (a pyenv or venv python3 first on PATH does
// not see Debian's packages). There is no skip: CI must run this test.
func findPython(t *testing.T) string {
	t.Helper()
	const probe = "import grpc, grpc_tools.protoc, google.protobuf"
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("BATON_PYTHON"); p != "" {
		candidates = []string{p}
	}
	var tried []string
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		out, err := exec.Command(p, "-c", probe).CombinedOutput()
		if err == nil {
			return p
		}
		tried = append(tried, fmt.Sprintf("%s: %s", p, lastLine(out)))
	}
	t.Fatalf("no python3 with grpcio, grpcio-tools and protobuf (%s).\n"+
		"Install Debian's packages: apt-get install %s (scripts/test.sh does, as root);\n"+
		"BATON_PYTHON names another interpreter.", strings.Join(tried, "; "), pythonPackages)
	return ""
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// etcdGateway is etcd's JSON gateway, the one the Python worker writes
// through, as a test reaches it: plaintext, or with the etcd-client
// certificate (newEtcdTLS).
type etcdGateway struct {
	endpoint string
	client   *http.Client
}

func plainEtcd(endpoint string) *etcdGateway {
	return &etcdGateway{endpoint: endpoint, client: &http.Client{Timeout: 10 * time.Second}}
}

// post sends one request to the gateway and decodes its answer into resp.
func (e *etcdGateway) post(t *testing.T, path string, req, resp any) {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := e.client.Post(e.endpoint+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s", path, hr.Status)
	}
	if err := json.NewDecoder(hr.Body).Decode(resp); err != nil {
		t.Fatal(err)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func (e *etcdGateway) put(t *testing.T, key, value string) {
	t.Helper()
	var resp map[string]any
	e.post(t, "/v3/kv/put", map[string]string{"key": b64(key), "value": b64(value)}, &resp)
}

func (e *etcdGateway) putGreeting(t *testing.T, name, spec string, generation int) {
	t.Helper()
	e.put(t, pythonGreeting.Key("default", name),
		fmt.Sprintf(`{"kind":"Greeting","metadata":{"name":%q,"namespace":"default","uid":"uid-%s","generation":%d},"spec":%s}`,
			name, name, generation, spec))
}

// get returns the value at key and its mod revision (0: no such key).
func (e *etcdGateway) get(t *testing.T, key string) (string, int64) {
	t.Helper()
	var resp struct {
		Kvs []struct {
			Value       []byte `json:"value"` // base64 in JSON
			ModRevision int64  `json:"mod_revision,string"`
		} `json:"kvs"`
	}
	e.post(t, "/v3/kv/range", map[string]string{"key": b64(key)}, &resp)
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// status returns the status of a Greeting as JSON ("" if it has none).
func (e *etcdGateway) status(t *testing.T, name string) string {
	t.Helper()
	v, _ := e.get(t, pythonGreeting.Key("default", name))
	if v == "" {
		return ""
	}
	var obj struct {
		Status json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal([]byte(v), &obj); err != nil {
		t.Fatal(err)
	}
	return string(obj.Status)
}

// pythonGreeting is the kind worker.py reconciles: the stack knows it only
// from the worker's declaration.
var pythonGreeting = kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}}

// pythonDeclaration is the declaration worker.py must publish, encoded as
// the Go SDK publishes it: the Go greeter's, For Greeting, Owns Pod, on the
// queue greetings.
func pythonDeclaration(t *testing.T) (key, value string) {
	t.Helper()
	d := kinds.Declaration{Queue: "greetings", For: pythonGreeting, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return d.Key(), string(b)
}

// declaredByPython polls until etcd holds exactly pythonDeclaration and the
// observer executes it: both of its rules in force, from that declaration,
// and the declaration not refused. It returns the declaration's mod revision.
func declaredByPython(t *testing.T, etcd *etcdGateway, observer *observerclient.Client) int64 {
	t.Helper()
	key, want := pythonDeclaration(t)
	var rev int64
	eventually(t, 60*time.Second, "worker.py's declaration in etcd and in force in the observer", func() (bool, string) {
		var got string
		got, rev = etcd.get(t, key)
		if got != want {
			return false, fmt.Sprintf("%s holds %q, want %q", key, got, want)
		}
		st, err := observer.Status(t.Context())
		if err != nil {
			return false, err.Error()
		}
		var own, owned, inForce bool
		var saw []string
		for _, r := range st.GetRules() {
			saw = append(saw, fmt.Sprintf("rule %s %s %q %s %s", r.GetQueue(), r.GetPrefix(), r.GetOwnerKind(), r.GetSource(), r.GetDeclarationKey()))
			if r.GetQueue() != "greetings" || r.GetSource() != observerv1.RuleSource_RULE_SOURCE_DECLARATION || r.GetDeclarationKey() != key {
				continue
			}
			own = own || (r.GetPrefix() == pythonGreeting.Prefix() && r.GetOwnerKind() == "")
			owned = owned || (r.GetPrefix() == kinds.MustBuiltin(kinds.Pod).Prefix() && r.GetOwnerKind() == pythonGreeting.Kind)
		}
		for _, d := range st.GetDeclarations() {
			saw = append(saw, fmt.Sprintf("declaration %s revision %d in force %d refused %q", d.GetKey(), d.GetModRevision(), d.GetInForceRevision(), d.GetRefused()))
			inForce = inForce || (d.GetKey() == key && d.GetModRevision() == rev && d.GetInForceRevision() == rev && d.GetRefused() == "")
		}
		return own && owned && inForce, strings.Join(saw, "\n")
	})
	return rev
}

// pythonSetup generates the worker's stubs from proto/ into dir/gen with
// its generate.sh, from scratch as a user would, and returns their folder.
func pythonSetup(t *testing.T, ctx context.Context, python, dir string) string {
	t.Helper()
	stubs := filepath.Join(dir, "gen")
	gen := exec.CommandContext(ctx, "bash", filepath.Join(pythonWorker, "generate.sh"), stubs)
	gen.Env = append(os.Environ(), "PYTHON="+python)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, out)
	}
	return stubs
}

// TestPythonWorker runs examples/python-worker/worker.py, a worker in
// another language than the servers', against the embedded stack as make
// run starts it but for the experiments' rules: the stubs are generated from
// proto/ by its generate.sh; the worker declares what it watches with
// declare.py, the very bytes the Go SDK publishes, and the observer, which
// knows Greetings from nothing else, executes the declaration: Greetings
// written before the worker started and changes since are announced, and so
// is the Greeting that a Pod names as owner. The Python process leases,
// reconciles (through the observer's cache, writing status with a
// compare-and-swap), heartbeats a reconcile longer than its lease, acks one
// malformed object as terminal, and stops cleanly on SIGTERM.
func TestPythonWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack and a Python process")
	}
	python := findPython(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()

	stubs := pythonSetup(t, ctx, python, dir)
	s := startStack(t, filepath.Join(dir, "stack")) // the built-in rules: no Greetings
	etcd := s.ep.Etcd
	gw := plainEtcd(etcd)

	gw.putGreeting(t, "hi", `{"name":"world"}`, 1)
	gw.putGreeting(t, "bad", `{}`, 1)
	// Longer than the lease below: only heartbeats keep it.
	gw.putGreeting(t, "slow", `{"name":"tortoise","workSeconds":5}`, 1)

	logPath := filepath.Join(dir, "worker.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	worker := exec.CommandContext(ctx, python, filepath.Join(pythonWorker, "worker.py"),
		"--queue-addr", s.ep.QueueGRPC, "--observer-addr", s.ep.ObserverGRPC, "--etcd-endpoints", etcd,
		"--stubs", stubs, "--worker", "python-test", "--lease-duration", "2")
	worker.Stdout, worker.Stderr = logFile, logFile
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = worker.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = worker.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("worker.py's log:\n%s", b)
		}
	})

	q, err := queueclient.Dial(s.ep.QueueGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	observer, err := observerclient.Dial(s.ep.ObserverGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()
	declared := declaredByPython(t, gw, observer)

	stats := func() string {
		st, err := q.Stats(ctx, "greetings")
		if err != nil || len(st) != 1 {
			return fmt.Sprintf("stats: %v", err)
		}
		return fmt.Sprintf("pending=%d delayed=%d leased=%d parked=%d lease_expirations=%d",
			st[0].GetPending(), st[0].GetDelayed(), st[0].GetLeased(), st[0].GetParked(), st[0].GetLeaseExpirationsTotal())
	}
	const converge = 60 * time.Second
	converged := func(want map[string]string, parked int) func() (bool, string) {
		return func() (bool, string) {
			var saw []string
			ok := true
			for name, w := range want {
				got := gw.status(t, name)
				ok = ok && got == w
				saw = append(saw, name+": "+got)
			}
			st := stats()
			ok = ok && st == fmt.Sprintf("pending=0 delayed=0 leased=0 parked=%d lease_expirations=0", parked)
			return ok, strings.Join(append(saw, st), "\n")
		}
	}
	eventually(t, converge, "the greetings greeted and the queue drained but for bad", converged(map[string]string{
		"hi":   `{"message":"hello, world","observedGeneration":1}`,
		"slow": `{"message":"hello, tortoise","observedGeneration":1}`,
		"bad":  "",
	}, 1))
	item, err := q.Inspect(ctx, "greetings", "default/bad")
	if err != nil {
		t.Fatal(err)
	}
	if got := item.GetState().String(); got != "ITEM_STATE_PARKED" || item.GetLastError() != "spec.name is empty" {
		t.Errorf("default/bad: %s, last_error %q; want ITEM_STATE_PARKED, %q", got, item.GetLastError(), "spec.name is empty")
	}

	// A change is announced again and reconciled from the current state; the
	// parked key comes back once its object changes.
	gw.putGreeting(t, "hi", `{"name":"python"}`, 2)
	gw.putGreeting(t, "bad", `{"name":"fixed"}`, 2)
	eventually(t, converge, "the changes reconciled", converged(map[string]string{
		"hi":  `{"message":"hello, python","observedGeneration":2}`,
		"bad": `{"message":"hello, fixed","observedGeneration":2}`,
	}, 0))

	// The declaration's Owns: a Pod that names Greeting hi as owner
	// announces hi again, once everything else has gone quiet.
	leases := func() (uint64, string) {
		st, err := q.Stats(ctx, "greetings")
		if err != nil || len(st) != 1 {
			return 0, fmt.Sprintf("stats: %v", err)
		}
		return st[0].GetLeasesTotal(), fmt.Sprintf("pending=%d delayed=%d leased=%d leases_total=%d",
			st[0].GetPending(), st[0].GetDelayed(), st[0].GetLeased(), st[0].GetLeasesTotal())
	}
	var before uint64
	eventually(t, converge, "the queue drained and the observer with nothing left to announce", func() (bool, string) {
		o, err := observer.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		n, st := leases()
		before = n
		return o.GetOutboxSize() == 0 && strings.HasPrefix(st, "pending=0 delayed=0 leased=0 "),
			fmt.Sprintf("%s outbox=%d", st, o.GetOutboxSize())
	})
	gw.put(t, kinds.MustBuiltin(kinds.Pod).Key("default", "hi-pod"),
		`{"kind":"Pod","metadata":{"name":"hi-pod","namespace":"default","uid":"uid-hi-pod",`+
			`"ownerReferences":[{"kind":"Greeting","name":"hi","uid":"uid-hi"}]},"spec":{"image":"busybox"}}`)
	eventually(t, converge, "the owned pod announcing greeting hi", func() (bool, string) {
		n, st := leases()
		return n > before, fmt.Sprintf("%s (%d before the pod)", st, before)
	})

	// SIGTERM: it stops leasing and exits 0.
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("worker.py exited with %v after SIGTERM, want 0", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Error("worker.py still running 30s after SIGTERM")
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"declared what a controller watches: queue=greetings key=/baton/rules/greetings for=Greeting owns=1",
		"acked key=default/hi outcome=success", "terminal key=default/bad: spec.name is empty", "stopped"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("worker.py's log lacks %q", want)
		}
	}
	// The declaration describes the controller, not the process: it stays.
	key, want := pythonDeclaration(t)
	if got, rev := gw.get(t, key); got != want || rev != declared {
		t.Errorf("after worker.py stopped, %s holds %q at revision %d; want %q at %d", key, got, rev, want, declared)
	}
}
