package cli

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
)

// TestCertsCommands: init and issue write what they print, refuse to
// overwrite without --force, and what they write works with
// client/tlsfiles.
func TestCertsCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	r := runCtx(t, t.Context(), "", "certs", "init", dir).mustSucceed(t)
	for _, want := range [][]string{
		{filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "Baton", "CA", "-"},
		{filepath.Join(dir, "queue.crt"), filepath.Join(dir, "queue.key"), "queue", "queue-peer"},
		{filepath.Join(dir, "worker.crt"), filepath.Join(dir, "worker.key"), "worker", "worker"},
		{filepath.Join(dir, "etcd-client.crt"), filepath.Join(dir, "etcd-client.key"), "etcd-client", "-"},
	} {
		if !hasRow(r.stdout, want...) {
			t.Errorf("init's output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "valid for queue, queue-2, queue-3, observer, worker, etcd, localhost, 127.0.0.1, ::1.") {
		t.Errorf("init's output does not say the hosts:\n%s", r.stdout)
	}
	for _, name := range []string{"ca", "queue", "observer", "worker", "viewer", "admin", "etcd-server", "etcd-client"} {
		for ext, mode := range map[string]os.FileMode{".crt": 0o644, ".key": 0o600} {
			fi, err := os.Stat(filepath.Join(dir, name+ext))
			if err != nil || fi.Mode().Perm() != mode {
				t.Errorf("%s%s: %v, mode %v, want %v", name, ext, err, fi.Mode().Perm(), mode)
			}
		}
	}

	r = runCtx(t, t.Context(), "", "certs", "init", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "error: "+filepath.Join(dir, "ca.key")+" and 15 more exist: nothing written (--force replaces them)") {
		t.Errorf("init over an existing directory: %+v", r)
	}
	runCtx(t, t.Context(), "", "certs", "init", dir, "--force", "--hosts", "queue.baton.svc,10.0.0.7", "--days", "30").mustSucceed(t)

	r = runCtx(t, t.Context(), "", "certs", "issue", "--dir", dir, "--name", "greeter", "--roles", "worker,greeters", "--hosts", "greeter,10.0.0.9", "--days", "7").mustSucceed(t)
	if !hasRow(r.stdout, filepath.Join(dir, "greeter.crt"), filepath.Join(dir, "greeter.key"), "greeter") ||
		!strings.Contains(r.stdout, "greeter,10.0.0.9") || !strings.Contains(r.stdout, "greeters") {
		t.Errorf("issue's output:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, `note: role "greeters" is none of observer, worker, viewer, admin, queue-peer`) {
		t.Errorf("issue of an unknown role says nothing: %q", r.stderr)
	}
	r = runCtx(t, t.Context(), "", "certs", "issue", "--dir", dir, "--name", "greeter")
	if r.code != 1 || !strings.Contains(r.stderr, "greeter.key and 1 more exist") {
		t.Errorf("issue over an existing pair: %+v", r)
	}

	// The greeter dials the queue, with the files as written.
	load := func(name string) *tlsfiles.Source {
		s, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, "ca.crt")})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv, cli := load("queue"), load("greeter")
	cfg, err := srv.ServerConfig(tlsfiles.RequireClientCert)
	if err != nil {
		t.Fatal(err)
	}
	if id := handshake(t, cfg, cli.ClientConfig("queue.baton.svc")); id.Name != "greeter" || !id.HasRole("worker") || !id.HasRole("greeters") {
		t.Errorf("the queue saw %v", id)
	}
}

// TestCertsUsageErrors: a bad command line is a precise error and exit 2.
func TestCertsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"certs"}, "usage: batonctl certs init DIR"},
		{[]string{"certs", "renew"}, `unknown certs command "renew"`},
		{[]string{"certs", "init"}, "usage: batonctl certs init DIR"},
		{[]string{"certs", "init", dir, "other"}, "usage: batonctl certs init DIR"},
		{[]string{"certs", "init", dir, "--days", "0"}, "--days: 0 days is not between 1 and 36500"},
		{[]string{"certs", "init", dir, "--days", "soon"}, `invalid value "soon" for flag -days`},
		{[]string{"certs", "init", dir, "--ca-days", "-1"}, "--ca-days: -1 days is not between"},
		{[]string{"certs", "init", dir, "--days", "400", "--ca-days", "300"}, "--days 400 is longer than the CA's --ca-days 300"},
		{[]string{"certs", "init", dir, "--hosts", ""}, "--hosts is empty"},
		{[]string{"certs", "init", dir, "--hosts", "queue:7070"}, `--hosts: host "queue:7070" has a port: give "queue"`},
		{[]string{"certs", "init", dir, "--frob"}, "flag provided but not defined: -frob (batonctl certs init -h lists its flags)"},
		{[]string{"certs", "issue", "--name", "x"}, "--dir is required"},
		{[]string{"certs", "issue", "--dir", dir}, "--name is required"},
		{[]string{"certs", "issue", "--dir", dir, "--name", "a/b"}, `--name: the name "a/b" is not letters`},
		{[]string{"certs", "issue", "--dir", dir, "--name", "ca"}, `--name: the name "ca" is the CA's`},
		{[]string{"certs", "issue", "--dir", dir, "--name", "x", "--roles", "baton:admin"}, `--roles: role "baton:admin": give it without the "baton:" prefix`},
		{[]string{"certs", "issue", "--dir", dir, "--name", "x", "--hosts", "https://queue"}, `--hosts: host "https://queue" is a URL`},
		{[]string{"certs", "issue", "--dir", dir, "--name", "x", "--days", "0"}, "--days: 0 days"},
		{[]string{"certs", "issue", "--dir", dir, "x"}, `certs issue takes no arguments, only flags: "x"`},
	} {
		r := runCtx(t, t.Context(), "", tc.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("batonctl %q: exit %d, stderr %q, want exit 2 and one line saying %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands wrote %d files", len(entries))
	}
	// Without a CA in DIR: exit 1, naming the file and the command that
	// makes one.
	r := runCtx(t, t.Context(), "", "certs", "issue", "--dir", dir, "--name", "x")
	if r.code != 1 || !strings.Contains(r.stderr, filepath.Join(dir, "ca.crt")) || !strings.Contains(r.stderr, "batonctl certs init "+dir) {
		t.Errorf("issue without a CA: %+v", r)
	}
}

// handshake makes one TLS connection over loopback from client to a server
// with server, and returns the identity the server saw.
func handshake(t *testing.T, server, client *tls.Config) tlsfiles.Identity {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		id  tlsfiles.Identity
		err error
	}
	got := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(conn, server)
		if err := tc.Handshake(); err != nil {
			got <- result{err: err}
			return
		}
		cs := tc.ConnectionState()
		id, _ := tlsfiles.IdentityFromState(&cs)
		got <- result{id: id}
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.id
}

// TestCertsInitKeep: init --keep, as compose's one-shot runs it at every
// start, writes everything once and then nothing, keeps the CA, issues a
// pair that was removed, and with --key-group makes the services' keys
// (only) readable by that group; as root, the files take the directory's
// owner, so a bind-mounted checkout directory stays its user's.
func TestCertsInitKeep(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	owner := -1
	if os.Geteuid() == 0 {
		owner = 4242
		if err := os.Chown(dir, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	gid := os.Getgid()
	keep := []string{"certs", "init", dir, "--keep", "--key-group", strconv.Itoa(gid)}
	r := runCtx(t, t.Context(), "", keep...).mustSucceed(t)
	if !hasRow(r.stdout, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "Baton", "CA", "-") {
		t.Fatalf("the first init --keep did not write the CA:\n%s", r.stdout)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	services := map[string]bool{"queue": true, "observer": true, "worker": true, "etcd-server": true, "etcd-client": true}
	for _, name := range []string{"ca", "queue", "observer", "worker", "viewer", "admin", "etcd-server", "etcd-client"} {
		fi, err := os.Stat(filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if services[name] {
			want = 0o640
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s.key: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
		if uid, g, _ := ownerOf(filepath.Join(dir, name+".key")); owner != -1 && (uid != owner || g != gid) {
			t.Errorf("%s.key: owner %d:%d, want %d:%d (the directory's user, the key group)", name, uid, g, owner, gid)
		}
	}

	r = runCtx(t, t.Context(), "", keep...).mustSucceed(t)
	if !strings.Contains(r.stdout, "nothing written") {
		t.Errorf("a second init --keep:\n%s", r.stdout)
	}
	os.Remove(filepath.Join(dir, "worker.crt"))
	os.Remove(filepath.Join(dir, "worker.key"))
	r = runCtx(t, t.Context(), "", keep...).mustSucceed(t)
	if !hasRow(r.stdout, filepath.Join(dir, "worker.crt"), filepath.Join(dir, "worker.key"), "worker", "worker") || strings.Contains(r.stdout, "ca.crt  ") {
		t.Errorf("init --keep after removing worker's pair:\n%s", r.stdout)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(after) != string(ca) {
		t.Error("init --keep replaced the CA")
	}

	if r := runCtx(t, t.Context(), "", "certs", "init", dir, "--keep", "--force"); r.code != 2 || !strings.Contains(r.stderr, "give one") {
		t.Errorf("--keep with --force: %+v", r)
	}
}
