package authz

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pki is a certificate authority of one test, and the files of the
// certificates it issues.
type pki struct {
	dir    string
	caFile string
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "authz test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca, key: key}
	p.caFile = filepath.Join(p.dir, "ca.crt")
	writeFile(t, p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

// issue returns a certificate for 127.0.0.1 with CN name and the subject O
// values orgs, for both ends of a connection.
func (p *pki) issue(t *testing.T, name string, orgs ...string) *x509.Certificate {
	t.Helper()
	cert, _, _ := p.issueFiles(t, name, orgs...)
	return cert
}

func (p *pki) issueFiles(t *testing.T, name string, orgs ...string) (cert *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// The name in the file's name, made safe and short (a test's names
	// may be hostile); the serial keeps it unique.
	safe := []rune(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, name))
	base := filepath.Join(p.dir, string(safe[:min(len(safe), 40)])+"-"+cert.SerialNumber.Text(16))
	certFile, keyFile = base+".crt", base+".key"
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return cert, certFile, keyFile
}

// source returns the files of a new certificate (name, orgs) with the CA,
// loaded.
func (p *pki) source(t *testing.T, name string, orgs ...string) *tlsfiles.Source {
	t.Helper()
	_, certFile, keyFile := p.issueFiles(t, name, orgs...)
	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: certFile, KeyFile: keyFile, CAFile: p.caFile})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// anonymous returns a client's files with the CA and no certificate.
func (p *pki) anonymous(t *testing.T) *tlsfiles.Source {
	t.Helper()
	src, err := tlsfiles.Load(tlsfiles.Config{CAFile: p.caFile})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The identities of the tests: one for each role, one with none, one with
// a role Baton does not know (and an O value that is no role).
const (
	observerName = "observer-1"
	workerName   = "worker-1"
	viewerName   = "viewer-1"
	adminName    = "admin-1"
	peerName     = "peer-1"
	nobodyName   = "nobody"
	strangerName = "stranger"
)

type testIdentity struct {
	name string
	orgs []string
}

var testIdentities = []testIdentity{
	{observerName, []string{"baton:observer"}},
	{workerName, []string{"baton:worker"}},
	{viewerName, []string{"baton:viewer"}},
	{adminName, []string{"baton:admin"}},
	{peerName, []string{"baton:queue-peer"}},
	{nobodyName, nil},
	{strangerName, []string{"baton:superuser", "Acme Inc"}},
}

// logBuffer is a log destination tests read while servers write to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines logged so far that contain every one of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		ok := l != ""
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// deniedCount returns the value of baton_authz_denied_total{method,
// identity} gathered from reg, 0 when it has no such series.
func deniedCount(t *testing.T, reg prometheus.Gatherer, method, identity string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != DeniedMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["identity"] == identity {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
