package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/runtime/trust"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// testCerts writes a CA and certificates for 127.0.0.1 into a new
// directory: server (role queue-peer), viewer, nobody (no roles).
func testCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA(2, now)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.1"}
	_, err = certs.Init(dir, ca, []certs.Leaf{
		{Name: "server", Roles: []string{tlsfiles.RoleQueuePeer}, Hosts: hosts, Days: 1},
		{Name: "viewer", Roles: []string{tlsfiles.RoleViewer}, Hosts: hosts, Days: 1},
		{Name: "nobody", Hosts: hosts, Days: 1},
	}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir, name string, withCA bool) *tlsfiles.Source {
	t.Helper()
	c := tlsfiles.Config{CAFile: filepath.Join(dir, "ca.crt")}
	if name != "" {
		c.CertFile, c.KeyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	}
	if !withCA {
		c.CAFile = ""
	}
	src, err := tlsfiles.Load(c)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// runServe runs o (its listen addresses on 127.0.0.1:0 unless set) until
// the test ends and returns the bound addresses.
func runServe(t *testing.T, o Options) (grpcAddr, httpAddr string) {
	t.Helper()
	if o.HTTPAddr == "" {
		o.HTTPAddr = "127.0.0.1:0"
	}
	o.GracePeriod = time.Second
	type addrs struct{ g, h string }
	bound := make(chan addrs, 1)
	o.OnListen = func(g, h net.Addr) { bound <- addrs{addrString(g), h.String()} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-bound:
		return a.g, a.h
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10 s")
	}
	return "", ""
}

// queueStub answers every QueueService call Unimplemented: a call that
// reaches it was allowed.
func queueStub(s *grpc.Server) []string {
	queuev1.RegisterQueueServiceServer(s, queuev1.UnimplementedQueueServiceServer{})
	return []string{queuev1.QueueService_ServiceDesc.ServiceName}
}

func httpGet(t *testing.T, cfg *tls.Config, url string) (int, error) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestMutualTLS: with a CA the gRPC listener refuses clients without a
// certificate of the CA at the handshake, authorizes the calls of those
// with one by their roles, and HTTP serves the probes to anyone and the
// rest by role.
func TestMutualTLS(t *testing.T) {
	dir := testCerts(t)
	g, h := runServe(t, Options{Name: "test", GRPCAddr: "127.0.0.1:0", Register: queueStub, TLS: load(t, dir, "server", true)})

	call := func(src *tlsfiles.Source, plaintext bool) (health, stats error) {
		creds := grpc.WithTransportCredentials(insecure.NewCredentials())
		if !plaintext {
			creds = grpc.WithTransportCredentials(src.ClientCredentials(""))
		}
		conn, err := grpc.NewClient(g, creds)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, health = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		_, stats = queuev1.NewQueueServiceClient(conn).Stats(ctx, &queuev1.StatsRequest{})
		return health, stats
	}
	for _, tc := range []struct {
		name          string
		src           *tlsfiles.Source
		plaintext     bool
		health, stats codes.Code
	}{
		{"plaintext", nil, true, codes.Unavailable, codes.Unavailable},
		{"no client certificate", load(t, dir, "", true), false, codes.Unavailable, codes.Unavailable},
		{"a certificate without roles", load(t, dir, "nobody", true), false, codes.OK, codes.PermissionDenied},
		{"a viewer", load(t, dir, "viewer", true), false, codes.OK, codes.Unimplemented},
	} {
		health, stats := call(tc.src, tc.plaintext)
		if status.Code(health) != tc.health || status.Code(stats) != tc.stats {
			t.Errorf("%s: health %v, Stats %v; want codes %v and %v", tc.name, health, stats, tc.health, tc.stats)
		}
	}

	anon := load(t, dir, "", true).ClientConfig("127.0.0.1")
	viewer := load(t, dir, "viewer", true).ClientConfig("127.0.0.1")
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		path string
		want int
	}{
		{"a probe without a certificate", anon, "/healthz", 200},
		{"readiness without a certificate", anon, "/readyz", 200},
		{"metrics without a certificate", anon, "/metrics", 401},
		{"metrics as a viewer", viewer, "/metrics", 200},
	} {
		got, err := httpGet(t, tc.cfg, "https://"+h+tc.path)
		if err != nil || got != tc.want {
			t.Errorf("%s: GET %s = %d, %v; want %d", tc.name, tc.path, got, err, tc.want)
		}
	}
	// A plaintext request to the TLS listener: net/http answers 400.
	if code, _ := httpGet(t, nil, "http://"+h+"/healthz"); code == 200 {
		t.Error("a plaintext GET /healthz of the TLS listener answered 200")
	}

	// healthcheck's probe: the service's own certificate.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := Probe(ctx, g, h, SelfProbe(load(t, dir, "server", true), g)); err != nil {
		t.Errorf("Probe with the service's own certificate: %v", err)
	}
	if err := Probe(ctx, g, h, ProbeOptions{}); err == nil {
		t.Error("a plaintext Probe of a TLS service succeeded")
	}
}

// TestTLSWithoutCA: a certificate without a CA serves TLS to any client,
// authorizing nothing.
func TestTLSWithoutCA(t *testing.T) {
	dir := testCerts(t)
	g, h := runServe(t, Options{Name: "test", GRPCAddr: "127.0.0.1:0", Register: queueStub, TLS: load(t, dir, "server", false)})
	client := load(t, dir, "", true) // verifies the server, presents nothing
	conn, err := grpc.NewClient(g, grpc.WithTransportCredentials(client.ClientCredentials("")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := queuev1.NewQueueServiceClient(conn).Stats(ctx, &queuev1.StatsRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Stats without a client certificate = %v, want the handler's Unimplemented", err)
	}
	if code, err := httpGet(t, client.ClientConfig("127.0.0.1"), "https://"+h+"/metrics"); code != 200 {
		t.Errorf("GET /metrics = %d, %v; want 200", code, err)
	}
}

// TestPlaintextListen: without TLS, Run refuses an address that is not
// loopback unless Insecure.
func TestPlaintextListen(t *testing.T) {
	err := Run(t.Context(), Options{Name: "test", GRPCAddr: "127.0.0.1:0", HTTPAddr: ":0"})
	var pe *trust.PlaintextError
	if !errors.As(err, &pe) || pe.Addr != ":0" {
		t.Fatalf("Run on :0 without TLS = %v, want a *trust.PlaintextError naming :0", err)
	}
	_, h := runServe(t, Options{Name: "test", HTTPAddr: ":0", Insecure: true})
	if code, err := httpGet(t, nil, "http://"+LocalAddr(h)+"/healthz"); code != 200 {
		t.Errorf("GET /healthz with Insecure on :0 = %d, %v", code, err)
	}
}
