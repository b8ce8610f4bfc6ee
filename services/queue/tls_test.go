package queue_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// tlsDir is a deployment's certificates (client/certs, as batonctl certs
// init writes them) for 127.0.0.1, plus a worker of another CA and an
// expired worker of this one.
type tlsDir struct {
	dir, other string
}

func newTLSDir(t *testing.T) tlsDir {
	t.Helper()
	d := tlsDir{dir: t.TempDir(), other: t.TempDir()}
	now := time.Now()
	hosts := []string{"127.0.0.1"}
	for _, dir := range []string{d.dir, d.other} {
		ca, err := certs.NewCA(30, now.AddDate(0, 0, -10))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := certs.Init(dir, ca, certs.Defaults(hosts, 1), false, now); err != nil {
			t.Fatal(err)
		}
	}
	// Issued three days ago for one day.
	if _, err := certs.Issue(d.dir, certs.Leaf{Name: "expired", Roles: []string{tlsfiles.RoleWorker}, Hosts: hosts, Days: 1}, false, now.AddDate(0, 0, -3)); err != nil {
		t.Fatal(err)
	}
	return d
}

// source loads dir's NAME pair (none for "") with dir's CA.
func (d tlsDir) source(t *testing.T, dir, name string) *tlsfiles.Source {
	t.Helper()
	c := tlsfiles.Config{CAFile: filepath.Join(dir, "ca.crt")}
	if name != "" {
		c.CertFile, c.KeyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	}
	src, err := tlsfiles.Load(c)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (d tlsDir) serverArgs(name string) []string {
	return []string{"--tls-cert-file", filepath.Join(d.dir, name+".crt"), "--tls-key-file", filepath.Join(d.dir, name+".key"),
		"--tls-ca-file", filepath.Join(d.dir, "ca.crt")}
}

// healthOver calls grpc.health.v1 on a new connection with creds and
// returns the server's certificate.
func healthOver(t *testing.T, addr string, creds credentials.TransportCredentials) (*x509.Certificate, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, errors.New("no server certificate")
	}
	return info.State.PeerCertificates[0], nil
}

// startTLS starts baton-queue with the queue's certificate and the flags
// extra, and waits until a worker's health check answers.
func startTLS(t *testing.T, d tlsDir, extra ...string) *proc {
	t.Helper()
	p := newProc(t, append(d.serverArgs("queue"), extra...)...)
	p.start()
	creds := d.source(t, d.dir, "worker").ClientCredentials("")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := healthOver(t, p.grpcAddr, creds)
		if err == nil {
			return p
		}
		if !p.running() || time.Now().After(deadline) {
			t.Fatalf("baton-queue with TLS not serving: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTLSRefusals: a queue serving mutual TLS refuses at the handshake a
// plaintext client, a client without a certificate, one of another CA and
// an expired one (UNAVAILABLE, no handler runs), and serves a worker.
func TestTLSRefusals(t *testing.T) {
	d := newTLSDir(t)
	p := startTLS(t, d)
	stats := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err = queuev1.NewQueueServiceClient(conn).Stats(ctx, &queuev1.StatsRequest{})
		return err
	}
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		want  codes.Code
	}{
		{"plaintext", insecure.NewCredentials(), codes.Unavailable},
		{"no client certificate", d.source(t, d.dir, "").ClientCredentials(""), codes.Unavailable},
		{"a certificate of another CA", d.source(t, d.other, "worker").ClientCredentials(""), codes.Unavailable},
		{"an expired certificate", d.source(t, d.dir, "expired").ClientCredentials(""), codes.Unavailable},
		{"a worker", d.source(t, d.dir, "worker").ClientCredentials(""), codes.OK},
		{"a viewer", d.source(t, d.dir, "viewer").ClientCredentials(""), codes.OK},
	} {
		if err := stats(tc.creds); status.Code(err) != tc.want {
			t.Errorf("%s: Stats = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestTLSRotation: the queue's certificate replaced on disk (batonctl
// certs issue --force) is what a new connection sees, without a restart.
func TestTLSRotation(t *testing.T) {
	d := newTLSDir(t)
	p := startTLS(t, d)
	creds := d.source(t, d.dir, "worker").ClientCredentials("")
	before, err := healthOver(t, p.grpcAddr, creds)
	if err != nil {
		t.Fatal(err)
	}
	w, err := certs.Issue(d.dir, certs.Leaf{Name: "queue", Roles: []string{tlsfiles.RoleQueuePeer}, Hosts: []string{"127.0.0.1"}, Days: 2}, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	after, err := healthOver(t, p.grpcAddr, creds)
	if err != nil {
		t.Fatal(err)
	}
	if after.SerialNumber.Cmp(w.Cert.SerialNumber) != 0 || after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Errorf("after rotation a new connection sees serial %x, want the new %x (was %x)", after.SerialNumber, w.Cert.SerialNumber, before.SerialNumber)
	}
	if !p.running() {
		t.Fatal("baton-queue exited")
	}
}

// TestPlaintextBeyondLoopbackIsRefused: without TLS flags baton-queue
// refuses a listen address that is not loopback, in one line naming the
// flags, with exit 2 and nothing created; --insecure (or its variable)
// lets it serve.
func TestPlaintextBeyondLoopbackIsRefused(t *testing.T) {
	for _, args := range [][]string{{}, {"--grpc-addr", "0.0.0.0:0"}, {"--grpc-addr", "127.0.0.1:0", "--http-addr", ":0"}} {
		cmd := exec.Command(binary, args...)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || len(lines) != 1 ||
			!strings.Contains(lines[0], "refusing to serve plaintext on") || !strings.Contains(lines[0], "--tls-cert-file") || !strings.Contains(lines[0], "--insecure") {
			t.Errorf("baton-queue %v: %v, output %q; want exit 2 and one line naming the flags", args, err, out)
		}
		if entries, _ := os.ReadDir(cmd.Dir); len(entries) != 0 {
			t.Errorf("baton-queue %v created %v in its directory", args, entries)
		}
	}
	for _, insecure := range []func(*exec.Cmd){
		func(c *exec.Cmd) { c.Args = append(c.Args, "--insecure") },
		func(c *exec.Cmd) { c.Env = append(os.Environ(), "BATON_QUEUE_INSECURE=true") },
	} {
		cmd := exec.Command(binary, "--grpc-addr", ":0", "--http-addr", ":0", "--data-dir", t.TempDir())
		insecure(cmd)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		serving := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), `"msg":"serving"`) {
					serving <- true
					io.Copy(io.Discard, stderr)
					return
				}
			}
			serving <- false
		}()
		select {
		case ok := <-serving:
			if !ok {
				t.Errorf("baton-queue %v exited without serving: %v", cmd.Args[1:], cmd.Wait())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("baton-queue %v: no serving line in 30 s", cmd.Args[1:])
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// TestAuthzPolicyFile: --authz-policy replaces the role table: a worker
// bound to the greetings queue leases there and is refused elsewhere,
// PERMISSION_DENIED naming it, the method and the queue.
func TestAuthzPolicyFile(t *testing.T) {
	d := newTLSDir(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(`allow:
  - roles: [worker]
    methods: [/baton.queue.v1.QueueService/Lease]
    queues: [greetings]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A policy that does not parse is refused before the queue starts.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("allow:\n  - roles: [wizard]\n    methods: [/baton.queue.v1.QueueService/Lease]\n"), 0o644)
	out, err := exec.Command(binary, append(d.serverArgs("queue"), "--authz-policy", bad, "--data-dir", t.TempDir())...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), bad) || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
		t.Errorf("a bad policy: %v, output %q; want exit 2 and one line naming the file", err, out)
	}

	p := newProc(t, append(d.serverArgs("queue"), "--authz-policy", policy)...)
	p.start()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(d.source(t, d.dir, "worker").ClientCredentials("")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lease := func(queue string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := queuev1.NewQueueServiceClient(conn).Lease(ctx, &queuev1.LeaseRequest{Queue: queue, Worker: "w"})
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for err := lease("greetings"); err != nil; err = lease("greetings") {
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("Lease on greetings: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	err = lease("payments")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"worker"`) || !strings.Contains(err.Error(), "Lease") || !strings.Contains(err.Error(), "payments") {
		t.Errorf("Lease on payments = %v, want PERMISSION_DENIED naming the worker, the method and the queue", err)
	}
	// The default table would let a worker call Stats; this policy does not.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := queuev1.NewQueueServiceClient(conn).Stats(ctx, &queuev1.StatsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Stats under the policy = %v, want PERMISSION_DENIED", err)
	}
}

// TestClusterServiceRolesOverMTLS calls the four ClusterService methods of
// the real queue as each role of the default table, over mutual TLS:
// MemberList and Status for viewer, admin and queue-peer (the queue's own
// certificate, as a peer member presents it), MemberAdd and MemberRemove
// for admin alone, who reaches the handler and its FAILED_PRECONDITION;
// everyone else gets PERMISSION_DENIED naming the method.
func TestClusterServiceRolesOverMTLS(t *testing.T) {
	d := newTLSDir(t)
	p := startTLS(t, d, "--name", "queue-tls")
	calls := map[string]func(context.Context, queuev1.ClusterServiceClient) error{
		"MemberList": func(ctx context.Context, c queuev1.ClusterServiceClient) error {
			resp, err := c.MemberList(ctx, &queuev1.MemberListRequest{})
			if err == nil && (len(resp.GetMembers()) != 1 || resp.GetMembers()[0].GetName() != "queue-tls" || resp.GetMembers()[0].GetClientAddr() != p.grpcAddr) {
				return fmt.Errorf("MemberList = %v, want queue-tls at %s", resp, p.grpcAddr)
			}
			return err
		},
		"Status": func(ctx context.Context, c queuev1.ClusterServiceClient) error {
			resp, err := c.Status(ctx, &queuev1.StatusRequest{})
			if err == nil && resp.GetLeaderName() != "queue-tls" {
				return fmt.Errorf("Status = %v, want the leader queue-tls", resp)
			}
			return err
		},
		"MemberAdd": func(ctx context.Context, c queuev1.ClusterServiceClient) error {
			_, err := c.MemberAdd(ctx, &queuev1.MemberAddRequest{Name: "queue-b", PeerAddr: "127.0.0.1:7072"})
			return err
		},
		"MemberRemove": func(ctx context.Context, c queuev1.ClusterServiceClient) error {
			_, err := c.MemberRemove(ctx, &queuev1.MemberRemoveRequest{Name: "queue-b"})
			return err
		},
	}
	allowed := map[string][]string{
		"MemberList":   {"viewer", "admin", "queue"},
		"Status":       {"viewer", "admin", "queue"},
		"MemberAdd":    {"admin"},
		"MemberRemove": {"admin"},
	}
	for _, who := range []string{"viewer", "admin", "queue", "worker", "observer"} {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(d.source(t, d.dir, who).ClientCredentials("")))
		if err != nil {
			t.Fatal(err)
		}
		c := queuev1.NewClusterServiceClient(conn)
		for method, call := range calls {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err := call(ctx, c)
			cancel()
			want := codes.PermissionDenied
			if slices.Contains(allowed[method], who) {
				want = codes.OK
				if method == "MemberAdd" || method == "MemberRemove" {
					want = codes.FailedPrecondition // past authorization, refused by the one member
				}
			}
			switch {
			case status.Code(err) != want:
				t.Errorf("%s calling %s: %v, want %v", who, method, err, want)
			case want == codes.PermissionDenied && !strings.Contains(err.Error(), "/baton.queue.v1.ClusterService/"+method):
				t.Errorf("%s calling %s: %v does not name the method", who, method, err)
			}
		}
		conn.Close()
	}
}
