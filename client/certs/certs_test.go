package certs

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
)

func initDir(t *testing.T, hosts []string) (string, []Written) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	now := time.Now()
	ca, err := NewCA(DefaultCADays, now)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Init(dir, ca, Defaults(hosts, DefaultDays), false, now)
	if err != nil {
		t.Fatal(err)
	}
	return dir, w
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInit(t *testing.T) {
	dir, written := initDir(t, DefaultHosts())
	wantRoles := map[string][]string{
		"queue": {"baton:queue-peer"}, "observer": {"baton:observer"}, "worker": {"baton:worker"},
		"viewer": {"baton:viewer"}, "admin": {"baton:admin"}, "etcd-server": nil, "etcd-client": nil,
	}
	if len(written) != 1+len(wantRoles) {
		t.Errorf("wrote %d pairs, want %d", len(written), 1+len(wantRoles))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for name := range wantRoles {
		for _, f := range []string{name + ".crt", name + ".key"} {
			if !slices.Contains(names, f) {
				t.Errorf("no %s in %v", f, names)
			}
		}
	}
	if len(names) != 2*(1+len(wantRoles)) {
		t.Errorf("the directory holds %v, nothing more was expected", names)
	}
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if strings.HasSuffix(n, ".key") {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", n, fi.Mode().Perm(), want)
		}
	}

	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("ca.crt: IsCA %v, key %v", ca.IsCA, ca.PublicKeyAlgorithm)
	}
	if years := time.Until(ca.NotAfter).Hours() / 24 / 365; years < 9.9 || years > 10.1 {
		t.Errorf("the CA is valid for %.1f years, want 10", years)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for name, roles := range wantRoles {
		c := readCert(t, filepath.Join(dir, name+".crt"))
		if c.Subject.CommonName != name || !slices.Equal(c.Subject.Organization, roles) {
			t.Errorf("%s: CN %q, O %q, want %q", name, c.Subject.CommonName, c.Subject.Organization, roles)
		}
		if !slices.Equal(c.DNSNames, []string{"queue", "queue-2", "queue-3", "observer", "worker", "etcd", "localhost"}) ||
			len(c.IPAddresses) != 2 || !c.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !c.IPAddresses[1].Equal(net.IPv6loopback) {
			t.Errorf("%s: SANs %q %v", name, c.DNSNames, c.IPAddresses)
		}
		if days := time.Until(c.NotAfter).Hours() / 24; days < 364 || days > 366 {
			t.Errorf("%s: valid for %.1f days, want 365", name, days)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "queue", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if c.IsCA || c.PublicKeyAlgorithm != x509.ECDSA {
			t.Errorf("%s: IsCA %v, key %v", name, c.IsCA, c.PublicKeyAlgorithm)
		}
	}
}

func TestInitRefusesToOverwrite(t *testing.T) {
	dir, _ := initDir(t, DefaultHosts())
	before, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA(DefaultCADays, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Init(dir, ca, Defaults(DefaultHosts(), DefaultDays), false, time.Now())
	if !errors.Is(err, ErrExist) || !strings.Contains(err.Error(), filepath.Join(dir, "ca.key")+" and 15 more exist") {
		t.Fatalf("Init over an existing directory: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.key")); !bytes.Equal(before, after) {
		t.Fatal("the refused Init changed ca.key")
	}
	if _, err := Init(dir, ca, Defaults(DefaultHosts(), DefaultDays), true, time.Now()); err != nil {
		t.Fatalf("Init with force: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.key")); bytes.Equal(before, after) {
		t.Fatal("Init with force kept the old ca.key")
	}
	if leftover, _ := filepath.Glob(filepath.Join(dir, ".*")); len(leftover) > 0 {
		t.Errorf("temporary files left: %v", leftover)
	}
	// The replaced files are a consistent set.
	if _, err := LoadCA(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(dir, "queue.crt"), KeyFile: filepath.Join(dir, "queue.key"), CAFile: filepath.Join(dir, "ca.crt")}); err != nil {
		t.Fatal(err)
	}
}

func TestIssue(t *testing.T) {
	dir, _ := initDir(t, DefaultHosts())
	l := Leaf{Name: "greeter", Roles: []string{"worker", "viewer"}, Hosts: []string{"greeter.example", "10.1.2.3"}, Days: 30}
	w, err := Issue(dir, l, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := readCert(t, w.CertFile)
	if w.CertFile != filepath.Join(dir, "greeter.crt") || c.Subject.CommonName != "greeter" ||
		!slices.Equal(slices.Sorted(slices.Values(c.Subject.Organization)), []string{"baton:viewer", "baton:worker"}) ||
		!slices.Equal(c.DNSNames, []string{"greeter.example"}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("10.1.2.3")) {
		t.Errorf("issued %s: CN %q O %q DNS %q IP %v", w.CertFile, c.Subject.CommonName, c.Subject.Organization, c.DNSNames, c.IPAddresses)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(dir, "ca.crt")))
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.1.2.3", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Error(err)
	}
	if fi, _ := os.Stat(w.KeyFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode().Perm())
	}
	if _, err := Issue(dir, l, false, time.Now()); !errors.Is(err, ErrExist) || !strings.Contains(err.Error(), "greeter.key and 1 more exist") {
		t.Errorf("issue over an existing pair: %v", err)
	}
	if w2, err := Issue(dir, l, true, time.Now()); err != nil || readCert(t, w2.CertFile).SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Errorf("issue with force: %v (serial unchanged?)", err)
	}

	if _, err := Issue(dir, Leaf{Name: "long", Days: DefaultCADays + 1}, false, time.Now()); err == nil || !strings.Contains(err.Error(), "would outlive the CA, valid until") {
		t.Errorf("a certificate outliving its CA: %v", err)
	}
	empty := t.TempDir()
	if _, err := Issue(empty, Leaf{Name: "x", Days: 1}, false, time.Now()); !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), filepath.Join(empty, "ca.crt")) || !strings.Contains(err.Error(), "batonctl certs init "+empty) {
		t.Errorf("issue without a CA: %v", err)
	}
	if _, err := Issue(dir, Leaf{Name: "ca", Days: 1}, true, time.Now()); err == nil || !strings.Contains(err.Error(), "the CA's") {
		t.Errorf("issue a certificate named ca: %v", err)
	}
	// A leaf's pair is not a CA.
	notCA := t.TempDir()
	for _, ext := range []string{".crt", ".key"} {
		data, _ := os.ReadFile(filepath.Join(dir, "queue"+ext))
		os.WriteFile(filepath.Join(notCA, "ca"+ext), data, 0o600)
	}
	if _, err := LoadCA(notCA); err == nil || !strings.Contains(err.Error(), "is not a CA certificate") {
		t.Errorf("LoadCA of a leaf: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		leaf Leaf
		want string // "" for valid
	}{
		{Leaf{Name: "queue", Roles: []string{"queue-peer"}, Hosts: []string{"*.baton.svc", "::1", "a_b.example"}, Days: 1}, ""},
		{Leaf{Name: "", Days: 1}, "the name is empty"},
		{Leaf{Name: "../x", Days: 1}, `the name "../x" is not letters`},
		{Leaf{Name: strings.Repeat("a", 65), Days: 1}, "longer than 64"},
		{Leaf{Name: "x", Roles: []string{"baton:admin"}, Days: 1}, `give it without the "baton:" prefix`},
		{Leaf{Name: "x", Roles: []string{"Admin"}, Days: 1}, `role "Admin" is not lower-case`},
		{Leaf{Name: "x", Roles: []string{""}, Days: 1}, `role "" is not`},
		{Leaf{Name: "x", Hosts: []string{"queue:7070"}, Days: 1}, `host "queue:7070" has a port: give "queue"`},
		{Leaf{Name: "x", Hosts: []string{"[::1]"}, Days: 1}, "without brackets"},
		{Leaf{Name: "x", Hosts: []string{"https://queue"}, Days: 1}, "is a URL"},
		{Leaf{Name: "x", Hosts: []string{"a b"}, Days: 1}, `host "a b" is not a DNS name`},
		{Leaf{Name: "x", Hosts: []string{"-a"}, Days: 1}, `host "-a" is not`},
		{Leaf{Name: "x", Days: 0}, "0 days is not between 1 and 36500"},
		{Leaf{Name: "x", Days: MaxDays + 1}, "not between"},
	} {
		err := tc.leaf.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.leaf, err, tc.want)
		}
	}
}

// TestMutualTLS: the certificates init writes work with client/tlsfiles
// in a real handshake over loopback, both ways, by name and by address.
func TestMutualTLS(t *testing.T) {
	dir, _ := initDir(t, DefaultHosts())
	load := func(name string) *tlsfiles.Source {
		s, err := tlsfiles.Load(tlsfiles.Config{
			CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, "ca.crt"),
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cfg, err := load("queue").ServerConfig(tlsfiles.RequireClientCert)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			tc := tls.Server(conn, cfg)
			if tc.Handshake() == nil {
				cs := tc.ConnectionState()
				id, _ := tlsfiles.IdentityFromState(&cs)
				tc.Write([]byte(id.String() + "\n"))
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })

	for _, tc := range []struct{ client, serverName, want string }{
		{"worker", "queue", `"worker" (roles worker)`},
		{"observer", "127.0.0.1", `"observer" (roles observer)`},
		{"admin", "localhost", `"admin" (roles admin)`},
		{"etcd-client", "queue", `"etcd-client" (no roles)`},
	} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), load(tc.client).ClientConfig(tc.serverName))
		if err != nil {
			t.Errorf("%s to %s: %v", tc.client, tc.serverName, err)
			continue
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if strings.TrimSpace(line) != tc.want {
			t.Errorf("%s: the server saw %q (%v), want %q", tc.client, line, err, tc.want)
		}
	}
}

// TestComplete: a one-shot that runs at every start makes everything the
// first time, nothing the second, reissues a pair removed from the same
// CA, and refuses half a pair or leaves without their CA.
func TestComplete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	now := time.Now()
	leaves := Defaults(DefaultHosts(), DefaultDays)
	first, err := Complete(dir, DefaultCADays, leaves, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1+len(leaves) {
		t.Fatalf("the first Complete wrote %d files pairs, want the CA and %d", len(first), len(leaves))
	}
	caBefore, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Complete(dir, DefaultCADays, leaves, now)
	if err != nil || len(again) != 0 {
		t.Fatalf("a second Complete wrote %d pairs (err %v), want none", len(again), err)
	}

	for _, f := range []string{"worker.crt", "worker.key"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	re, err := Complete(dir, DefaultCADays, leaves, now)
	if err != nil || len(re) != 1 || re[0].Cert.Subject.CommonName != "worker" {
		t.Fatalf("after removing worker's pair Complete wrote %v (err %v), want worker alone", re, err)
	}
	caAfter, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if !bytes.Equal(caBefore, caAfter) {
		t.Fatal("Complete replaced the CA")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caAfter)
	if _, err := readCert(t, filepath.Join(dir, "worker.crt")).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the reissued worker certificate does not verify against the kept CA: %v", err)
	}

	if err := os.Remove(filepath.Join(dir, "admin.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := Complete(dir, DefaultCADays, leaves, now); err == nil || !strings.Contains(err.Error(), "admin.key is missing") {
		t.Fatalf("half a pair: err %v, want one naming admin.key", err)
	}

	orphan := filepath.Join(t.TempDir(), "certs")
	if _, err := Complete(orphan, DefaultCADays, leaves[:1], now); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key"} {
		os.Remove(filepath.Join(orphan, f))
	}
	if _, err := Complete(orphan, DefaultCADays, leaves[:1], now); err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("leaves without their CA: err %v, want a refusal", err)
	}
}

// TestShare: the services' keys become group-readable, the CA's and the
// users' stay the owner's alone; as root, the files change owner.
func TestShare(t *testing.T) {
	_, written := initDir(t, DefaultHosts())
	uid, gid := -1, os.Getgid()
	if os.Geteuid() == 0 {
		uid, gid = 65532, 65533
	}
	if err := Share(written, uid, gid, ServiceNames()); err != nil {
		t.Fatal(err)
	}
	for _, w := range written {
		name := strings.TrimSuffix(filepath.Base(w.KeyFile), ".key")
		fi, err := os.Stat(w.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		want := fs.FileMode(0o600)
		if slices.Contains(ServiceNames(), name) {
			want = 0o640
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", w.KeyFile, fi.Mode().Perm(), want)
		}
		if os.Geteuid() == 0 {
			for _, p := range []string{w.KeyFile, w.CertFile} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if st := statOwner(fi); st != [2]int{65532, 65533} {
					t.Errorf("%s: owner %v, want 65532:65533", p, st)
				}
			}
		}
	}
	for _, n := range ServiceNames() {
		if !slices.ContainsFunc(Defaults(nil, 1), func(l Leaf) bool { return l.Name == n }) {
			t.Errorf("service %s is not one of Defaults", n)
		}
	}
}
