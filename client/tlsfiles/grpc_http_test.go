package tlsfiles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// serveGRPC runs a gRPC server with the health service on a loopback port
// and returns its address and the identities its calls came from.
func serveGRPC(t *testing.T, creds credentials.TransportCredentials) (string, func() []Identity) {
	t.Helper()
	var (
		mu  sync.Mutex
		ids []Identity
	)
	srv := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			id, ok := IdentityFromPeer(ctx)
			if !ok {
				return nil, status.Error(codes.Unauthenticated, "no identity")
			}
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String(), func() []Identity {
		mu.Lock()
		defer mu.Unlock()
		return append([]Identity(nil), ids...)
	}
}

func healthCheck(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestGRPC: the credentials over a real gRPC server, by IP address and by
// name, and the refusals a caller sees as UNAVAILABLE.
func TestGRPC(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	creds, err := e.server.ServerCredentials(RequireClientCert)
	if err != nil {
		t.Fatal(err)
	}
	addr, ids := serveGRPC(t, creds)
	_, port, _ := net.SplitHostPort(addr)

	for _, tc := range []struct {
		name, addr string
		creds      credentials.TransportCredentials
	}{
		{"ClientCredentials by IP", addr, e.client.ClientCredentials("")},
		{"ClientCredentials by name", "localhost:" + port, e.client.ClientCredentials("")},
		{"NewTLS by name", "localhost:" + port, credentials.NewTLS(e.client.ClientConfig(""))},
		{"NewTLS with the name given", addr, credentials.NewTLS(e.client.ClientConfig("localhost"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := healthCheck(t, tc.addr, tc.creds); err != nil {
				t.Fatal(err)
			}
			got := ids()
			if last := got[len(got)-1]; last.Name != "worker-1" || !last.HasRole(RoleWorker) {
				t.Errorf("the server saw %v", last)
			}
		})
	}

	anon := mustLoad(t, Config{CAFile: e.clientFiles.ca})
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		want  string
	}{
		{"plaintext", insecure.NewCredentials(), ""},
		{"no client certificate", anon.ClientCredentials(""), ""},
		{"NewTLS by IP without a name", credentials.NewTLS(e.client.ClientConfig("")), ErrNoServerName.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := healthCheck(t, addr, tc.creds)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want UNAVAILABLE saying %q", err, tc.want)
			}
		})
	}
}

// TestHTTP: an HTTP server that takes a certificate if given tells the
// handler who called, and one without a certificate still gets an answer.
func TestHTTP(t *testing.T) {
	e := newEndpoints(t, VerifyClientCertIfGiven)
	cfg, err := e.server.ServerConfig(VerifyClientCertIfGiven)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{TLSConfig: cfg, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := IdentityFromRequest(r); ok {
			fmt.Fprint(w, id)
			return
		}
		fmt.Fprint(w, "anonymous")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	get := func(src *Source) (string, string, error) {
		tr := &http.Transport{TLSClientConfig: src.ClientConfig(""), ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := c.Get(fmt.Sprintf("https://localhost:%d/", ln.Addr().(*net.TCPAddr).Port))
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), resp.Proto, err
	}
	if body, proto, err := get(e.client); err != nil || body != `"worker-1" (roles worker)` || proto != "HTTP/2.0" {
		t.Errorf("with a certificate: %q over %s, %v", body, proto, err)
	}
	if body, _, err := get(mustLoad(t, Config{CAFile: e.clientFiles.ca})); err != nil || body != "anonymous" {
		t.Errorf("without a certificate: %q, %v", body, err)
	}
}
