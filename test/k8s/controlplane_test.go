package k8s

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The environment scripts/test-k8s.sh sets.
const (
	binDirEnv = "BATON_TEST_K8S_BIN_DIR" // kube-apiserver, kube-controller-manager, kubectl
	etcdEnv   = "BATON_TEST_K8S_ETCD"    // an etcd binary
)

// controlPlane is etcd, kube-apiserver and kube-controller-manager on
// loopback, and a kubectl configured for its admin.
type controlPlane struct {
	kubectlBin string
	kubeconfig string // the admin's
	cacheDir   string // kubectl's discovery cache
	logs       map[string]string
}

// startControlPlane starts the processes and returns once the API server is
// ready. They are stopped when the test ends.
func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	binDir, etcdBin := os.Getenv(binDirEnv), os.Getenv(etcdEnv)
	if binDir == "" || etcdBin == "" {
		t.Skipf("needs a control plane built from k8s.io/kubernetes: run scripts/test-k8s.sh (make test-k8s), which builds it and sets %s and %s", binDirEnv, etcdEnv)
	}
	for _, p := range []string{filepath.Join(binDir, "kube-apiserver"), filepath.Join(binDir, "kube-controller-manager"), filepath.Join(binDir, "kubectl"), etcdBin} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v (scripts/test-k8s.sh builds it)", err)
		}
	}
	dir := t.TempDir()
	logDir := t.ArtifactDir()
	cp := &controlPlane{
		kubectlBin: filepath.Join(binDir, "kubectl"),
		kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		cacheDir:   filepath.Join(dir, "kubectl-cache"),
		logs:       map[string]string{},
	}

	// etcd, for the API server alone.
	etcdClient, etcdPeer := freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + etcdClient
	peerURL := "http://127.0.0.1:" + etcdPeer
	cp.start(t, logDir, "etcd", etcdBin,
		"--name=k8s",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=k8s="+peerURL,
		"--unsafe-no-fsync", // a throwaway store: nothing survives the test anyway
		"--log-level=warn",
	)
	waitReady(t, "etcd", etcdURL+"/readyz", http.DefaultClient, 30*time.Second, cp.logs["etcd"])

	// Keys and tokens: a CA and the API server's serving certificate,
	// service-account signing keys, and a static token for each client.
	ca, caKey := newCA(t)
	caFile := writePEM(t, dir, "ca.crt", "CERTIFICATE", ca.Raw)
	certDER, servingKey := newServingCert(t, ca, caKey)
	certFile := writePEM(t, dir, "apiserver.crt", "CERTIFICATE", certDER)
	keyFile := writePEM(t, dir, "apiserver.key", "EC PRIVATE KEY", marshalEC(t, servingKey))
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKeyFile := writePEM(t, dir, "sa.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	saPubFile := writePEM(t, dir, "sa.pub", "PUBLIC KEY", saPub)
	adminToken, kcmToken := randomToken(t), randomToken(t)
	tokenFile := filepath.Join(dir, "tokens.csv")
	tokens := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n%s,system:kube-controller-manager,kcm-uid\n", adminToken, kcmToken)
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}

	apiPort := freePort(t)
	server := "https://127.0.0.1:" + apiPort
	cp.start(t, logDir, "kube-apiserver", filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+apiPort,
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--authorization-mode=RBAC",
		"--token-auth-file="+tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPubFile,
		"--service-account-signing-key-file="+saKeyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		// The default reconciler would publish 127.0.0.1 as the endpoint of
		// the kubernetes Service, which endpoint validation refuses.
		"--endpoint-reconciler-type=none",
	)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	apiClient := &http.Client{Timeout: 5 * time.Second, Transport: &bearer{token: adminToken, rt: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	waitReady(t, "kube-apiserver", server+"/readyz", apiClient, 90*time.Second, cp.logs["kube-apiserver"])

	cp.writeKubeconfig(t, cp.kubeconfig, server, caFile, "admin", adminToken)
	kcmConfig := filepath.Join(dir, "kube-controller-manager.kubeconfig")
	cp.writeKubeconfig(t, kcmConfig, server, caFile, "system:kube-controller-manager", kcmToken)
	// As a kubeadm cluster runs it: each controller under its own service
	// account (the bootstrap RBAC roles), no leader election, no serving
	// port (nothing here needs its /healthz).
	cp.start(t, logDir, "kube-controller-manager", filepath.Join(binDir, "kube-controller-manager"),
		"--kubeconfig="+kcmConfig,
		"--use-service-account-credentials",
		"--service-account-private-key-file="+saKeyFile,
		"--root-ca-file="+caFile,
		"--leader-elect=false",
		"--secure-port=0",
		// The default 15 s would make the HorizontalPodAutoscaler's first
		// moves, which the test waits for, slow.
		"--horizontal-pod-autoscaler-sync-period=2s",
	)
	return cp
}

// start runs a process whose output goes to logDir/<name>.log, and stops it
// (SIGTERM, then SIGKILL after 10 s) when the test ends. If the test binary
// dies first (a -timeout panic skips cleanups), the kernel kills it.
func (cp *controlPlane) start(t *testing.T, logDir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cp.logs[name] = logPath
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		defer logFile.Close()
		select {
		case err := <-exited:
			t.Errorf("%s exited before the test ended: %v; its log: %s\n%s", name, err, logPath, tail(logPath, 30))
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Logf("%s ignored SIGTERM for 10 s: killed", name)
		}
	})
	t.Logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
}

func (cp *controlPlane) writeKubeconfig(t *testing.T, path, server, caFile, user, token string) {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %q
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: %q}
current-context: test
`, server, base64.StdEncoding.EncodeToString(ca), user, token, user)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubectlResult is what one kubectl run printed.
type kubectlResult struct {
	args           []string
	stdout, stderr string
	err            error
}

// failed reports whether kubectl failed or printed anything on stderr, where
// it prints errors and the API server's warnings ("Warning: ...").
func (r kubectlResult) failed() bool { return r.err != nil || strings.TrimSpace(r.stderr) != "" }

func (r kubectlResult) String() string {
	s := "kubectl " + strings.Join(r.args, " ")
	if r.err != nil {
		s += ": " + r.err.Error()
	}
	if out := strings.TrimSpace(r.stdout); out != "" {
		s += "\nstdout:\n" + out
	}
	if e := strings.TrimSpace(r.stderr); e != "" {
		s += "\nstderr:\n" + e
	}
	return s
}

// kubectl runs kubectl as the admin, bounded by 60 s. The API server's
// warnings are errors (--warnings-as-errors), and they are on stderr.
func (cp *controlPlane) kubectl(ctx context.Context, stdin []byte, args ...string) kubectlResult {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	full := append([]string{"--kubeconfig=" + cp.kubeconfig, "--cache-dir=" + cp.cacheDir, "--request-timeout=30s", "--warnings-as-errors"}, args...)
	cmd := exec.CommandContext(ctx, cp.kubectlBin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("no answer in 60 s: %w", err)
	}
	return kubectlResult{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// mustKubectl runs kubectl and fails the test on an error or on any output
// to stderr.
func (cp *controlPlane) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	r := cp.kubectl(t.Context(), nil, args...)
	if r.failed() {
		t.Fatal(r)
	}
	return r.stdout
}

// eventually polls check every 250 ms until it returns true, and fails the
// test with what check last reported if that takes longer than timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, state := check()
		if ok {
			t.Logf("%s (%.1f s)", what, time.Since(start).Seconds())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not in %s: %s\nlast seen: %s", timeout, what, state)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitReady polls url until it answers 200.
func waitReady(t *testing.T, name, url string, c *http.Client, timeout time.Duration, logPath string) {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		resp, err := c.Get(url)
		if err == nil {
			body := make([]byte, 4096)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Logf("%s ready (%.1f s)", name, time.Since(start).Seconds())
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body[:n]))
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s not ready in %s: %s\nlast lines of %s:\n%s", name, timeout, last, logPath, tail(logPath, 30))
}

// freePort returns a loopback port nobody listened on a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "baton test-k8s CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func newServingCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func marshalEC(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
