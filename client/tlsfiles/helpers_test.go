package tlsfiles

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf says what to put in an issued certificate; the zero value is a
// certificate for 127.0.0.1 and localhost, valid now, for both ends.
type leaf struct {
	name     string
	orgs     []string
	notAfter time.Time
}

// pair is an issued certificate and its key, in PEM.
type pair struct {
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
}

func (ca *testCA) issue(t *testing.T, l leaf) pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if l.name == "" {
		l.name = "test"
	}
	if l.notAfter.IsZero() {
		l.notAfter = time.Now().Add(time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t),
		Subject:      pkix.Name{CommonName: l.name, Organization: l.orgs},
		NotBefore:    l.notAfter.Add(-2 * time.Hour),
		NotAfter:     l.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pair{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

func randomSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// files is one process's certificate, key and CA files in a directory of
// the test.
type files struct{ cert, key, ca string }

func newFiles(t *testing.T, name string) files {
	dir := t.TempDir()
	return files{
		cert: filepath.Join(dir, name+".crt"),
		key:  filepath.Join(dir, name+".key"),
		ca:   filepath.Join(dir, "ca.crt"),
	}
}

// write writes p's certificate and key, and ca (one or more bundles), as a
// rotation does: each file replaced whole by a rename.
func (f files) write(t *testing.T, p pair, cas ...*testCA) {
	t.Helper()
	writeAtomic(t, f.key, p.keyPEM)
	writeAtomic(t, f.cert, p.certPEM)
	if len(cas) > 0 {
		f.writeCA(t, cas...)
	}
}

func (f files) writeCA(t *testing.T, cas ...*testCA) {
	t.Helper()
	var bundle []byte
	for _, ca := range cas {
		bundle = append(bundle, ca.pem...)
	}
	writeAtomic(t, f.ca, bundle)
}

func (f files) config() Config { return Config{CertFile: f.cert, KeyFile: f.key, CAFile: f.ca} }

func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, c Config) *Source {
	t.Helper()
	s, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tlsServer accepts TLS connections on a loopback port: each that
// completes its handshake is answered with one line, "ok <identity>", and
// closed; each handshake error is sent on errs.
type tlsServer struct {
	addr string
	errs chan error
}

func serveTLS(t *testing.T, cfg *tls.Config) *tlsServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsServer{addr: ln.Addr().String(), errs: make(chan error, 100)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				tc := tls.Server(conn, cfg)
				if err := tc.Handshake(); err != nil {
					select {
					case s.errs <- err:
					default:
					}
					return
				}
				cs := tc.ConnectionState()
				line := "ok"
				if id, ok := IdentityFromState(&cs); ok {
					line += " " + id.String()
				}
				tc.Write([]byte(line + "\n"))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return s
}

// nextErr returns the server's next handshake error, waiting up to 5 s.
func (s *tlsServer) nextErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.errs:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the server saw no failed handshake")
		return nil
	}
}

// dialTLS makes one connection with cfg and reads the server's line: with
// TLS 1.3 a server's refusal of the client's certificate arrives after
// the client's handshake has returned, at its first read.
func dialTLS(addr string, cfg *tls.Config) (tls.ConnectionState, string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return tls.ConnectionState{}, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return tls.ConnectionState{}, "", err
	}
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		return tc.ConnectionState(), "", err
	}
	return tc.ConnectionState(), strings.TrimSpace(line), nil
}

// serverSerial returns the serial number of the certificate the server at
// addr presents to a client with cfg.
func serverSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	cs, _, err := dialTLS(addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return cs.PeerCertificates[0].SerialNumber
}

// errorLog collects the errors a Source passes to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (l *errorLog) count(target error) int {
	n := 0
	for _, err := range l.all() {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// logLines collects the lines of a Source's logger.
type logLines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// warnings returns the lines logged at WARN.
func (l *logLines) warnings() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		if strings.Contains(line, "level=WARN") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// fakeClock is a Source's clock, set by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}
