package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// endpoints is a server's and a client's Source, from one CA, with the
// server listening.
type endpoints struct {
	ca             *testCA
	serverFiles    files
	clientFiles    files
	server, client *Source
	srv            *tlsServer
	serverErrs     *errorLog
	serverLog      *logLines
}

func newEndpoints(t *testing.T, mode ClientCerts) *endpoints {
	t.Helper()
	e := &endpoints{ca: newTestCA(t, "ca"), serverFiles: newFiles(t, "queue"), clientFiles: newFiles(t, "worker"), serverErrs: &errorLog{}, serverLog: &logLines{}}
	e.serverFiles.write(t, e.ca.issue(t, leaf{name: "queue", orgs: []string{"baton:queue-peer"}}), e.ca)
	e.clientFiles.write(t, e.ca.issue(t, leaf{name: "worker-1", orgs: []string{"baton:worker"}}), e.ca)
	sc := e.serverFiles.config()
	sc.OnError = e.serverErrs.add
	sc.Logger = e.serverLog.logger()
	e.server = mustLoad(t, sc)
	e.client = mustLoad(t, e.clientFiles.config())
	cfg, err := e.server.ServerConfig(mode)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = serveTLS(t, cfg)
	return e
}

func TestHandshakeAndIdentity(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cs, line, err := dialTLS(e.srv.addr, e.client.ClientConfig("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := line, `ok "worker-1" (roles worker)`; got != want {
		t.Errorf("server saw %q, want %q", got, want)
	}
	id, ok := IdentityFromState(&cs)
	if !ok || id.Name != "queue" || !id.HasRole(RoleQueuePeer) {
		t.Errorf("client saw the server as %v, %v", id, ok)
	}
	if cs.Version < tls.VersionTLS12 {
		t.Errorf("version %x", cs.Version)
	}
}

// TestServerRotation: a certificate replaced on disk is presented on the
// next connection, by the same listener and Source.
func TestServerRotation(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cfg := e.client.ClientConfig("localhost")
	first := serverSerial(t, e.srv.addr, cfg)
	for i := range 3 {
		next := e.ca.issue(t, leaf{name: "queue"})
		e.serverFiles.write(t, next)
		if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(next.cert.SerialNumber) != 0 {
			t.Fatalf("rotation %d: the server presents serial %x, want the new %x (first %x)", i, got, next.cert.SerialNumber, first)
		}
	}
	if errs := e.serverErrs.all(); len(errs) != 0 {
		t.Errorf("whole rotations reported errors: %v", errs)
	}
}

// TestRotationInPlace: a file rewritten in place (same inode, perhaps the
// same size, within one tick of the file system's clock) is seen too.
func TestRotationInPlace(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cfg := e.client.ClientConfig("localhost")
	for i := range 5 {
		next := e.ca.issue(t, leaf{name: "queue"})
		// The key first, then the certificate: between the two the pair
		// does not match and the old one stays.
		for _, w := range []struct {
			path string
			data []byte
		}{{e.serverFiles.key, next.keyPEM}, {e.serverFiles.cert, next.certPEM}} {
			if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
				t.Fatal(err)
			}
			serverSerial(t, e.srv.addr, cfg)
		}
		if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(next.cert.SerialNumber) != 0 {
			t.Fatalf("rewrite %d: the server presents serial %x, want %x", i, got, next.cert.SerialNumber)
		}
	}
}

// TestHalfWrittenRotation: a new certificate beside the old key, or a file
// cut short, keeps the last good pair in use and is reported once; the
// completed rotation then takes effect.
func TestHalfWrittenRotation(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cfg := e.client.ClientConfig("localhost")
	old := serverSerial(t, e.srv.addr, cfg)
	next := e.ca.issue(t, leaf{name: "queue"})

	writeAtomic(t, e.serverFiles.cert, next.certPEM) // the key is still the old one
	for range 3 {
		if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(old) != 0 {
			t.Fatalf("with the old key beside a new certificate the server presents %x, want the old %x", got, old)
		}
	}
	if n := e.serverErrs.count(ErrKeyMismatch); n != 1 {
		t.Errorf("the mismatch was reported %d times, want once: %v", n, e.serverErrs.all())
	}
	err := e.server.Refresh()
	if !errors.Is(err, ErrKeyMismatch) || !strings.Contains(err.Error(), e.serverFiles.key) || !strings.Contains(err.Error(), e.serverFiles.cert) {
		t.Errorf("Refresh = %v, want a mismatch naming both files", err)
	}

	writeAtomic(t, e.serverFiles.key, next.keyPEM[:len(next.keyPEM)/2]) // cut short
	if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(old) != 0 {
		t.Fatalf("with a key cut short the server presents %x, want the old %x", got, old)
	}
	if n := e.serverErrs.count(ErrCutShort); n != 1 {
		t.Errorf("the key cut short was reported %d times, want once: %v", n, e.serverErrs.all())
	}

	writeAtomic(t, e.serverFiles.key, next.keyPEM)
	if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(next.cert.SerialNumber) != 0 {
		t.Fatalf("after the key arrived the server presents %x, want the new %x", got, next.cert.SerialNumber)
	}
	if err := e.server.Refresh(); err != nil {
		t.Errorf("Refresh after the rotation completed = %v", err)
	}

	os.Remove(e.serverFiles.cert) // between a rotation's remove and rename
	if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(next.cert.SerialNumber) != 0 {
		t.Fatalf("without the certificate file the server presents %x, want the last good %x", got, next.cert.SerialNumber)
	}
	if err := e.server.Refresh(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Refresh without the certificate file = %v, want fs.ErrNotExist", err)
	}
}

// TestClientCAReload: a client that does not trust the server's CA does
// after its CA file gains it, with the same Source.
func TestClientCAReload(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	other := newTestCA(t, "other")
	e.clientFiles.writeCA(t, other)
	cfg := e.client.ClientConfig("localhost")
	_, _, err := dialTLS(e.srv.addr, cfg)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("a client trusting another CA: %v, want x509.UnknownAuthorityError", err)
	}
	e.clientFiles.writeCA(t, other, e.ca)
	if _, _, err := dialTLS(e.srv.addr, cfg); err != nil {
		t.Fatalf("after the CA file gained the server's CA: %v", err)
	}
}

// TestServerCAReload: a server's CA file replaced stops accepting the old
// CA's clients and starts accepting the new one's, on the same listener.
func TestServerCAReload(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cfg := e.client.ClientConfig("localhost")
	if _, _, err := dialTLS(e.srv.addr, cfg); err != nil {
		t.Fatal(err)
	}
	next := newTestCA(t, "next")
	e.serverFiles.writeCA(t, next)
	if _, _, err := dialTLS(e.srv.addr, cfg); err == nil {
		t.Fatal("a client of the CA the server no longer trusts was accepted")
	}
	if err := e.srv.nextErr(t); !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("server's handshake error %v, want the unknown authority", err)
	}
	e.clientFiles.write(t, next.issue(t, leaf{name: "worker-2"}), e.ca)
	if _, line, err := dialTLS(e.srv.addr, cfg); err != nil || !strings.Contains(line, "worker-2") {
		t.Fatalf("a client of the new CA: %q, %v", line, err)
	}
}

// TestRefusedAtTheHandshake: the server refuses, during the handshake, a
// client without a certificate, with one from another CA, with an expired
// one, and one speaking plaintext; a client refuses a server likewise.
func TestRefusedAtTheHandshake(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	other := newTestCA(t, "other")
	clientWith := func(p *pair, cas ...*testCA) *tls.Config {
		f := newFiles(t, "client")
		c := Config{CAFile: f.ca}
		if p != nil {
			f.write(t, *p)
			c.CertFile, c.KeyFile = f.cert, f.key
		}
		f.writeCA(t, cas...)
		return mustLoad(t, c).ClientConfig("localhost")
	}
	otherPair := other.issue(t, leaf{name: "intruder"})
	expired := e.ca.issue(t, leaf{name: "old", notAfter: time.Now().Add(-time.Minute)})
	for _, tc := range []struct {
		name      string
		cfg       *tls.Config
		serverErr string
	}{
		{"no certificate", clientWith(nil, e.ca), "client didn't provide a certificate"},
		{"another CA", clientWith(&otherPair, e.ca), "unknown authority"},
		{"expired", clientWith(&expired, e.ca), "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, line, err := dialTLS(e.srv.addr, tc.cfg); err == nil {
				t.Fatalf("accepted, the server said %q", line)
			}
			if err := e.srv.nextErr(t); !strings.Contains(err.Error(), tc.serverErr) {
				t.Errorf("server's handshake error %q, want it to say %q", err, tc.serverErr)
			}
		})
	}
	t.Run("plaintext", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", e.srv.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
		if err := e.srv.nextErr(t); !strings.Contains(err.Error(), "does not look like a TLS handshake") {
			t.Errorf("server's handshake error %q", err)
		}
		if n, _ := conn.Read(make([]byte, 100)); n > 0 {
			t.Errorf("the server answered plaintext with %d bytes", n)
		}
	})

	// The client's side: a server from another CA, with an expired
	// certificate (which ServerConfig refuses to serve, so it is served
	// by a tls.Config of its own), or under another name.
	serveWith := func(p pair) string {
		cert, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return serveTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}}).addr
	}
	for _, tc := range []struct {
		name, addr, serverName, want string
	}{
		{"server of another CA", serveWith(otherPair), "localhost", "unknown authority"},
		{"expired server", serveWith(expired), "localhost", "expired"},
		{"another name", e.srv.addr, "observer", "not observer"},
		{"an IP address not in the certificate", e.srv.addr, "10.0.0.1", "10.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := dialTLS(tc.addr, e.client.ClientConfig(tc.serverName))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("client's error %v, want it to say %q", err, tc.want)
			}
		})
	}
	t.Run("no server name", func(t *testing.T) {
		cfg := e.client.ClientConfig("")
		cfg.ServerName = "127.0.0.1" // sent as no SNI: the name is lost
		if _, _, err := dialTLS(e.srv.addr, cfg); !errors.Is(err, ErrNoServerName) {
			t.Errorf("client's error %v, want ErrNoServerName", err)
		}
	})
}

// TestVerifyClientCertIfGiven: a client may send no certificate; one it
// sends must verify.
func TestVerifyClientCertIfGiven(t *testing.T) {
	e := newEndpoints(t, VerifyClientCertIfGiven)
	anon := mustLoad(t, Config{CAFile: e.clientFiles.ca}).ClientConfig("localhost")
	if _, line, err := dialTLS(e.srv.addr, anon); err != nil || line != "ok" {
		t.Errorf("without a certificate: %q, %v", line, err)
	}
	if _, line, err := dialTLS(e.srv.addr, e.client.ClientConfig("localhost")); err != nil || !strings.Contains(line, "worker-1") {
		t.Errorf("with a certificate: %q, %v", line, err)
	}
	f := newFiles(t, "intruder")
	f.write(t, newTestCA(t, "other").issue(t, leaf{name: "intruder"}), e.ca)
	if _, line, err := dialTLS(e.srv.addr, mustLoad(t, f.config()).ClientConfig("localhost")); err == nil {
		t.Errorf("a certificate of another CA was accepted: %q", line)
	}
}

// TestLoadErrors: each problem names its file.
func TestLoadErrors(t *testing.T) {
	ca := newTestCA(t, "ca")
	p, q := ca.issue(t, leaf{}), ca.issue(t, leaf{})
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := dir + "/" + name
		writeAtomic(t, path, data)
		return path
	}
	cert, key, caFile := write("a.crt", p.certPEM), write("a.key", p.keyPEM), write("ca.crt", ca.pem)
	for _, tc := range []struct {
		name   string
		cfg    Config
		target error
		want   []string
	}{
		{"missing certificate", Config{CertFile: dir + "/none.crt", KeyFile: key}, fs.ErrNotExist,
			[]string{"certificate file " + dir + "/none.crt", "no such file"}},
		{"missing key", Config{CertFile: cert, KeyFile: dir + "/none.key"}, fs.ErrNotExist,
			[]string{"key file " + dir + "/none.key"}},
		{"missing CA", Config{CAFile: dir + "/none-ca.crt"}, fs.ErrNotExist,
			[]string{"CA file " + dir + "/none-ca.crt"}},
		{"key of another certificate", Config{CertFile: cert, KeyFile: write("b.key", q.keyPEM)}, ErrKeyMismatch,
			[]string{"key file " + dir + "/b.key", "does not match the certificate in " + cert}},
		{"no certificate in the CA file", Config{CAFile: write("empty-ca.crt", []byte("not PEM\n"))}, ErrNoCertificate,
			[]string{"CA file " + dir + "/empty-ca.crt: no PEM certificate"}},
		{"a key as CA file", Config{CAFile: key}, ErrNoCertificate, []string{"CA file " + key}},
		{"a key as certificate file", Config{CertFile: key, KeyFile: key}, ErrNoCertificate, []string{"certificate file " + key}},
		{"a certificate as key file", Config{CertFile: cert, KeyFile: cert}, ErrNoKey, []string{"key file " + cert + ": no PEM private key"}},
		{"certificate cut short", Config{CertFile: write("cut.crt", p.certPEM[:200]), KeyFile: key}, ErrCutShort,
			[]string{"certificate file " + dir + "/cut.crt"}},
		{"garbled certificate", Config{CertFile: write("bad.crt", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), KeyFile: key}, nil,
			[]string{"certificate file " + dir + "/bad.crt: certificate 1: x509:"}},
		{"certificate without key", Config{CertFile: cert}, nil, []string{"certificate file " + cert + " is set without its key file"}},
		{"key without certificate", Config{KeyFile: key, CAFile: caFile}, nil, []string{"key file " + key + " is set without its certificate file"}},
		{"nothing", Config{}, nil, []string{"no file is set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.cfg)
			if err == nil {
				t.Fatal("loaded")
			}
			if tc.target != nil && !errors.Is(err, tc.target) {
				t.Errorf("%v is not %v", err, tc.target)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
	s := mustLoad(t, Config{CAFile: caFile})
	if _, err := s.ServerConfig(RequireClientCert); err == nil {
		t.Error("a server without a certificate was built")
	}
}

func TestIdentityOf(t *testing.T) {
	ca := newTestCA(t, "ca")
	for _, tc := range []struct {
		orgs      []string
		wantRoles []string
		wantStr   string
	}{
		{[]string{"baton:worker"}, []string{"worker"}, `"n" (roles worker)`},
		{[]string{"Acme", "baton:admin", "baton:viewer", "baton:admin", "baton:", "BATON:x"}, []string{"admin", "viewer"}, `"n" (roles admin, viewer)`},
		{nil, nil, `"n" (no roles)`},
	} {
		id := IdentityOf(ca.issue(t, leaf{name: "n", orgs: tc.orgs}).cert)
		if id.Name != "n" || strings.Join(id.Roles, ",") != strings.Join(tc.wantRoles, ",") || id.String() != tc.wantStr {
			t.Errorf("O %q: got %+v %s, want roles %q, %s", tc.orgs, id, id, tc.wantRoles, tc.wantStr)
		}
	}
	if _, ok := IdentityFromState(nil); ok {
		t.Error("an identity without TLS")
	}
	if _, ok := IdentityFromState(&tls.ConnectionState{}); ok {
		t.Error("an identity without a certificate")
	}
}

// TestChangeWithTheSameStat: a file rewritten in place with bytes of the
// same size and the same modification time (two writes in one tick of the
// file system's clock) is still seen, while it is recent.
func TestChangeWithTheSameStat(t *testing.T) {
	x, y := newTestCA(t, "x"), newTestCA(t, "y")
	a, b := x.pem, y.pem
	for len(a) < len(b) {
		a = append(a, '\n')
	}
	for len(b) < len(a) {
		b = append(b, '\n')
	}
	path := t.TempDir() + "/ca.crt"
	if err := os.WriteFile(path, a, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := mustLoad(t, Config{CAFile: path})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := statFile(path); got != statFile(path) || got.size != before.Size() || got.mtime != before.ModTime().UnixNano() {
		t.Fatalf("the rewrite changed the stat: %+v, before %v %v", got, before.Size(), before.ModTime())
	}
	leafOfY := y.issue(t, leaf{})
	_, err = leafOfY.cert.Verify(x509.VerifyOptions{Roots: s.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		t.Errorf("the rewritten CA file is not in use: %v", err)
	}
}
