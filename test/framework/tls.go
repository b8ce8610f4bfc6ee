package framework

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
)

// Certs is a deployment's certificates for one test, as `batonctl certs
// init` writes them (client/certs): ca.crt and ca.key, and a pair each for
// queue, observer, worker, viewer, admin, etcd-server and etcd-client,
// valid for 127.0.0.1, ::1 and localhost. Pass it as the TLS of the
// options to start a service with mutual TLS.
type Certs struct {
	// Dir holds the files.
	Dir string
}

// NewCerts writes a new CA and the default certificates into a new
// directory. It fails the test if it cannot.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c := &Certs{Dir: filepath.Join(t.TempDir(), "certs")}
	now := time.Now()
	ca, err := certs.NewCA(30, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Init(c.Dir, ca, certs.Defaults([]string{"127.0.0.1", "::1", "localhost"}, 7), false, now); err != nil {
		t.Fatalf("framework: certificates: %v", err)
	}
	return c
}

// Issue adds a certificate from the CA (an expired one, issued in the
// past, a role of its own …), replacing one of the name.
func (c *Certs) Issue(t testing.TB, l certs.Leaf, now time.Time) {
	t.Helper()
	if _, err := certs.Issue(c.Dir, l, true, now); err != nil {
		t.Fatalf("framework: issue %s: %v", l.Name, err)
	}
}

// CertFile, KeyFile and CAFile name the files.
func (c *Certs) CertFile(name string) string { return filepath.Join(c.Dir, name+".crt") }
func (c *Certs) KeyFile(name string) string  { return filepath.Join(c.Dir, name+".key") }
func (c *Certs) CAFile() string              { return filepath.Join(c.Dir, certs.CAName+".crt") }

// Flags returns a service's trust flags for the pair name: --tls-cert-file,
// --tls-key-file and --tls-ca-file.
func (c *Certs) Flags(name string) []string {
	return []string{"--tls-cert-file", c.CertFile(name), "--tls-key-file", c.KeyFile(name), "--tls-ca-file", c.CAFile()}
}

// Source returns the pair name with the CA bundle, for a client of the
// services; "" is the CA bundle alone (a client without a certificate).
func (c *Certs) Source(t testing.TB, name string) *tlsfiles.Source {
	t.Helper()
	cfg := tlsfiles.Config{CAFile: c.CAFile()}
	if name != "" {
		cfg.CertFile, cfg.KeyFile = c.CertFile(name), c.KeyFile(name)
	}
	src, err := tlsfiles.Load(cfg)
	if err != nil {
		t.Fatalf("framework: %v", err)
	}
	return src
}

// writeSecret writes a file readable by its owner only, e.g. a password.
func writeSecret(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
