package framework

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Etcd is the etcd of a test: embedded in the test process (StartEtcd) or
// an etcd binary as a child process (StartEtcdProcess), with the same
// settings either way: loopback ports, no fsync, progress notifications
// every 100 ms. Stop and Restart may be called from any goroutine.
type Etcd struct {
	// Client is a client of this etcd, closed when the test ends.
	Client *clientv3.Client

	embedded *etcdembed.Server // or
	proc     *Process
	url      string
	// flags are ClientFlags': how a Baton binary reaches this etcd.
	flags []string
}

// EtcdOptions configures StartEtcdWith. The zero value is StartEtcd's
// etcd: plaintext, no authentication.
type EtcdOptions struct {
	// TLS, if set, makes etcd serve clients TLS with the etcd-server
	// certificate and require a client certificate of the CA.
	TLS *Certs
	// User and Password, if set, turn on etcd's authentication, with
	// that user (and root) having the root role.
	User, Password string
}

// StartEtcd starts etcd embedded in the test process (etcdembed), stopped
// when the test ends. It fails the test if etcd does not start.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	return StartEtcdWith(t, EtcdOptions{})
}

// StartEtcdWith starts an embedded etcd as o says: with TLS and client
// certificates, with a user and password, or both. Its Client, and the
// binaries given ClientFlags, present the etcd-client certificate and log
// in as the user.
func StartEtcdWith(t testing.TB, o EtcdOptions) *Etcd {
	t.Helper()
	cfg := etcdembed.Config{AuthUser: o.User, AuthPassword: o.Password}
	var src *tlsfiles.Source
	e := &Etcd{}
	if o.TLS != nil {
		cfg.ClientURL = "https://127.0.0.1:0"
		cfg.ClientTLS = &etcdembed.TLS{CertFile: o.TLS.CertFile("etcd-server"), KeyFile: o.TLS.KeyFile("etcd-server"), ClientCAFile: o.TLS.CAFile()}
		src = o.TLS.Source(t, "etcd-client")
		e.flags = append(e.flags, "--etcd-cacert", o.TLS.CAFile(), "--etcd-cert", o.TLS.CertFile("etcd-client"), "--etcd-key", o.TLS.KeyFile("etcd-client"))
	}
	if o.User != "" {
		e.flags = append(e.flags, "--etcd-username", o.User, "--etcd-password-file", writeSecret(t, "etcd-password", o.Password+"\n"))
	}
	srv := etcdembed.StartForTestConfig(t, cfg)
	e.embedded, e.url = srv, srv.Endpoints()[0]
	e.Client = newEtcdClientWith(t, e.Endpoints(), src, o.User, o.Password)
	return e
}

// ClientFlags returns the flags a Baton binary (the observer, a worker,
// batonctl) needs to reach this etcd besides --etcd-endpoints: its TLS
// and authentication flags, none for a plaintext etcd without users.
func (e *Etcd) ClientFlags() []string { return append([]string(nil), e.flags...) }

// etcdVersion finds the minor version in `etcd --version`.
var etcdVersion = regexp.MustCompile(`etcd Version: 3\.(\d+)\.`)

// StartEtcdProcess runs the etcd binary bin as a child process (a release
// other than the one etcdembed links, as scripts/etcd-compat.sh runs the
// observer's tests against), stopped when the test ends. It fails the test
// if etcd does not start.
func StartEtcdProcess(t testing.TB, bin string) *Etcd {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	m := etcdVersion.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("framework: %s --version: %v (%q)", bin, err, out)
	}
	// etcd 3.6 renamed the experimental flag; 3.7 dropped the old name.
	progress := "--watch-progress-notify-interval"
	if string(m[1]) == "5" {
		progress = "--experimental-watch-progress-notify-interval"
	}
	// etcd cannot report a port it picked, so these are picked free here.
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	args := []string{
		"--name", "test", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer, "--log-level", "warn",
		"--unsafe-no-fsync", progress, "100ms",
	}
	e := &Etcd{url: client}
	e.proc = newProcess(t, "etcd", bin, func() []string { return args })
	e.proc.termExitOK = true
	probe, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { probe.Close() })
	e.proc.ready = func(ctx context.Context) error {
		_, err := probe.Status(ctx, client)
		return err
	}
	e.proc.Start()
	e.Client = newEtcdClient(t, e.Endpoints())
	return e
}

// Endpoints returns the client URLs.
func (e *Etcd) Endpoints() []string { return []string{e.url} }

// Stop stops etcd, keeping its data (SIGTERM for a process).
func (e *Etcd) Stop() {
	if e.embedded != nil {
		e.embedded.Stop()
		return
	}
	if err := e.proc.stop(defaultStopTimeout); err != nil {
		e.proc.t.Error(err)
	}
}

// Restart starts a stopped etcd again on the same data and ports and waits
// until it serves; it does nothing if etcd runs.
func (e *Etcd) Restart(ctx context.Context) error {
	if e.embedded != nil {
		return e.embedded.Restart(ctx)
	}
	if e.proc.Running() {
		return nil
	}
	return e.proc.start()
}

// Process returns the etcd process, or nil when etcd is embedded.
func (e *Etcd) Process() *Process { return e.proc }

func newEtcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	return newEtcdClientWith(t, endpoints, nil, "", "")
}

// newEtcdClientWith is a client presenting src's certificate (as
// sdk/etcdconn configures the binaries') and logged in as
// user, if set.
func newEtcdClientWith(t testing.TB, endpoints []string, src *tlsfiles.Source, user, password string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Username: user, Password: password}
	if src != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(src.ClientCredentials(""))}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("framework: etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freeAddr returns a loopback address nothing listened on a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
