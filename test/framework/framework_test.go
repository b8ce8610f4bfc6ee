package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

func TestMain(m *testing.M) { os.Exit(RunTests(m)) }

// A key the queue acknowledged survives kill -9, and the restarted queue
// answers on the same address and data directory.
func TestQueueKillRestartKeepsKey(t *testing.T) {
	q := StartQueue(t, QueueOptions{})
	ctx := t.Context()
	if _, err := q.Client.Add(ctx, "things", []string{"default/a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	addr, httpAddr, pid := q.Addr, q.HTTPAddr, q.PID()
	q.Kill()
	if q.Running() {
		t.Fatal("still running after Kill")
	}
	q.Start()
	if q.PID() == pid {
		t.Errorf("the same pid %d after a restart", pid)
	}
	if q.Addr != addr || q.HTTPAddr != httpAddr {
		t.Errorf("addresses moved: %s %s, were %s %s", q.Addr, q.HTTPAddr, addr, httpAddr)
	}
	it, err := q.Client.Inspect(ctx, "things", "default/a")
	if err != nil {
		t.Fatalf("the added key after kill -9: %v", err)
	}
	if it.GetKey() != "default/a" {
		t.Errorf("key = %q", it.GetKey())
	}
	// A graceful restart keeps it too.
	q.Restart()
	if _, err := q.Client.Inspect(ctx, "things", "default/a"); err != nil {
		t.Fatalf("the added key after a restart: %v", err)
	}
	if !strings.Contains(q.Output(), "run 3") {
		t.Errorf("output does not mark the third run:\n%s", q.Output())
	}
}

// A binary that exits before it is ready fails the start with its stderr.
func TestStartFailureReportsStderr(t *testing.T) {
	s := newService(t, serviceSpec{
		name:  "baton-queue",
		flags: func(g, h string) []string { return []string{"--grpc-addr", g, "--http-addr", h} },
		args:  []string{"--data-dir", t.TempDir(), "--no-such-flag"},
	})
	err := s.start()
	if err == nil {
		t.Fatal("started with an unknown flag")
	}
	for _, want := range []string{"baton-queue exited before it was ready", "exit status 2", "flag provided but not defined: -no-such-flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// The exit was reported by start; cleanup must not report it again.
	s.mu.Lock()
	lost := len(s.lost)
	s.mu.Unlock()
	if lost != 0 {
		t.Errorf("%d exits left to report as unexpected", lost)
	}
}

func TestCheckArgs(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--log-level", "debug"}, true},
		{[]string{"--log-level=info"}, true},
		{[]string{"--log-level", "warn"}, false},
		{[]string{"-log-level=error"}, false},
		{[]string{"--max-queues", "3"}, true},
	}
	for _, tt := range tests {
		if got := checkArgs(tt.args) == nil; got != tt.ok {
			t.Errorf("checkArgs(%q) ok = %v, want %v", tt.args, got, tt.ok)
		}
	}
}

// The four processes together: a ReplicaSet written to etcd reaches the
// queue through the observer, and the worker creates its pods.
func TestPipeline(t *testing.T) {
	etcd := StartEtcd(t)
	q := StartQueue(t, QueueOptions{BackoffBase: 20 * time.Millisecond, BackoffMax: time.Second})
	o := StartObserver(t, ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr})
	StartWorker(t, WorkerOptions{
		QueueAddr: q.Addr, ObserverAddr: o.Addr, EtcdEndpoints: etcd.Endpoints(),
		Controllers: "replicasets,pods", LeaseDuration: 2 * time.Second,
	})
	rs := `{"kind":"ReplicaSet","metadata":{"name":"web","namespace":"default","uid":"uid-web","generation":1},` +
		`"spec":{"replicas":2,"template":{"metadata":{"labels":{"app":"web"}},"spec":{"image":"nginx"}}}}`
	if _, err := etcd.Client.Put(t.Context(), "/registry/replicasets/default/web", rs); err != nil {
		t.Fatal(err)
	}
	WaitForNoError(t, 60*time.Second, "2 running pods of web", func() error {
		resp, err := etcd.Client.Get(t.Context(), "/registry/pods/default/", clientv3.WithPrefix())
		if err != nil {
			return err
		}
		running := 0
		for _, kv := range resp.Kvs {
			var p struct {
				Status struct{ Phase string } `json:"status"`
			}
			if json.Unmarshal(kv.Value, &p) == nil && p.Status.Phase == "Running" {
				running++
			}
		}
		if running != 2 {
			return fmt.Errorf("%d pods, %d running", len(resp.Kvs), running)
		}
		return nil
	})
	st, err := o.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetPrefixes()) == 0 {
		t.Error("the observer watches no prefix")
	}
}

// recorder is a testing.TB whose failures and cleanups the test inspects.
type recorder struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()                   {}
func (r *recorder) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Error(args ...any)         { r.errs = append(r.errs, fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Failed() bool              { return len(r.errs) > 0 }
func (r *recorder) Logf(string, ...any)       {}

func (r *recorder) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// A process that dies without being asked to fails the test at cleanup.
func TestUnexpectedExitIsReported(t *testing.T) {
	r := &recorder{TB: t}
	q := StartQueue(r, QueueOptions{})
	if err := q.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 10*time.Second, "the queue to die", func() bool { return !q.Running() })
	r.cleanup()
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "baton-queue exited unexpectedly") || !strings.Contains(r.errs[0], "signal: killed") {
		t.Errorf("errors at cleanup = %q, want one unexpected exit", r.errs)
	}

	// Kill, Stop and Wait are asked for: no error.
	r = &recorder{TB: t}
	q = StartQueue(r, QueueOptions{})
	q.Kill()
	q.Start()
	q.Stop()
	r.cleanup()
	if len(r.errs) != 0 {
		t.Errorf("errors at cleanup = %q, want none", r.errs)
	}
}

// TestSecureEtcd: an etcd with TLS, client certificates and a user serves
// its Client, and refuses a client without the certificate or without the
// password.
func TestSecureEtcd(t *testing.T) {
	certs := NewCerts(t)
	e := StartEtcdWith(t, EtcdOptions{TLS: certs, User: "baton", Password: "s3cret"})
	if !strings.HasPrefix(e.Endpoints()[0], "https://") {
		t.Fatalf("endpoints %v, want https://", e.Endpoints())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := e.Client.Put(ctx, "/registry/x/default/a", "{}"); err != nil {
		t.Fatalf("the framework's client: %v", err)
	}
	for name, cfg := range map[string]clientv3.Config{
		"no client certificate": {Username: "baton", Password: "s3cret",
			DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(certs.Source(t, "").ClientCredentials(""))}},
		"no password": {DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(certs.Source(t, "etcd-client").ClientCredentials(""))}},
	} {
		cfg.Endpoints, cfg.DialTimeout, cfg.Logger = e.Endpoints(), 2*time.Second, zap.NewNop()
		c, err := clientv3.New(cfg) // a client with a user logs in here
		if err == nil {
			cctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			_, err = c.Get(cctx, "/registry/x/default/a")
			cancel()
			c.Close()
		}
		if err == nil {
			t.Errorf("%s: Get succeeded", name)
		}
	}
	flags := strings.Join(e.ClientFlags(), " ")
	for _, f := range []string{"--etcd-cacert", "--etcd-cert", "--etcd-key", "--etcd-username baton", "--etcd-password-file"} {
		if !strings.Contains(flags, f) {
			t.Errorf("ClientFlags %q lack %s", flags, f)
		}
	}
}

// TestQueueCluster: three members form one replicated queue; a key added
// through the client of every member is there after the leader is
// SIGKILLed, another member leads, and the killed one, started again,
// serves again on its addresses.
func TestQueueCluster(t *testing.T) {
	c := StartQueueCluster(t, QueueClusterOptions{})
	if len(c.Members) != 3 || c.Addrs() != c.Members[0].Addr+","+c.Members[1].Addr+","+c.Members[2].Addr {
		t.Fatalf("members %d, Addrs %q", len(c.Members), c.Addrs())
	}
	ctx := t.Context()
	for i, m := range c.Members {
		st, err := m.Client.Cluster().Status(ctx)
		if err != nil || st.GetMember().GetName() != fmt.Sprintf("queue-%d", i+1) || m.Name != st.GetMember().GetName() || st.GetMemberCount() != 3 || st.GetLeaderName() == "" {
			t.Fatalf("member %d's status: %v %v", i, st, err)
		}
	}
	if _, err := c.Client.Add(ctx, "things", []string{"default/a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	lead := c.Leader(t, 30*time.Second)
	c.Members[lead].Kill()
	next := c.Leader(t, 30*time.Second)
	if next == lead {
		t.Fatalf("queue-%d leads after it was killed", lead+1)
	}
	if _, err := c.Client.Inspect(ctx, "things", "default/a"); err != nil {
		t.Fatalf("the key after the leader's loss: %v", err)
	}
	c.Members[lead].Start()
	if _, err := c.Members[lead].Client.Cluster().Status(ctx); err != nil {
		t.Errorf("the restarted member: %v", err)
	}
}
