package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/queue/service"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/batonrun/baton/services/runtime/trust"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// callerObserver answers Status and remembers who asked.
type callerObserver struct {
	observerv1.UnimplementedObserverServiceServer
	mu      sync.Mutex
	callers []tlsfiles.Identity
}

func (o *callerObserver) Status(ctx context.Context, _ *observerv1.StatusRequest) (*observerv1.StatusResponse, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if id, ok := tlsfiles.IdentityFromAuthInfo(p.AuthInfo); ok {
			o.mu.Lock()
			o.callers = append(o.callers, id)
			o.mu.Unlock()
		}
	}
	return &observerv1.StatusResponse{Declarations: []*observerv1.DeclarationStatus{{Key: "/baton/rules/greetings", Queue: "greetings", ModRevision: 3, InForceRevision: 3}}}, nil
}

// TestDashboardOverMutualTLS: under mutual TLS the queue asks the observer
// with its own certificate, which the default role table lets call
// Status; the dashboard's JSON is a viewer's and an admin's to read,
// refused to a worker and to a client without a certificate; and a work
// stream's worker shows with the name of its certificate.
func TestDashboardOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA(30, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Init(dir, ca, certs.Defaults([]string{"127.0.0.1"}, 1), false, now); err != nil {
		t.Fatal(err)
	}
	pair := func(name string) trust.Config {
		return trust.Config{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, "ca.crt")}
	}
	source := func(name string) *tlsfiles.Source {
		c := tlsfiles.Config{CAFile: filepath.Join(dir, "ca.crt")}
		if name != "" {
			c.CertFile, c.KeyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		}
		src, err := tlsfiles.Load(c)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}

	// The observer's side: its certificate, mutual TLS, the default role
	// table.
	creds, err := source("observer").ServerCredentials(tlsfiles.RequireClientCert)
	if err != nil {
		t.Fatal(err)
	}
	a, err := authz.New(authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs := &callerObserver{}
	gs := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()))
	hs := health.NewServer()
	hs.SetServingStatus(observerv1.ObserverService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	observerv1.RegisterObserverServiceServer(gs, obs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })

	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan [2]net.Addr, 1)
	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.TLS = pair("queue")
	cfg.ObserverAddr = lis.Addr().String()
	cfg.OnListen = func(g, h net.Addr) { addrs <- [2]net.Addr{g, h} }
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, cfg, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	qa := <-addrs

	// A worker on a work stream, with its certificate.
	wc, err := queueclient.Dial(qa[0].String(), queueclient.WithTLS(source("worker")))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	ws, err := wc.Work(t.Context(), "greetings", queueclient.WorkOptions{Worker: "greeter-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()

	get := func(name, path string) (int, string) {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: source(name).ClientConfig("127.0.0.1")}, Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		res, err := c.Get("https://" + qa[1].String() + path)
		if err != nil {
			t.Fatalf("%s as %q: %v", path, name, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("viewer", "/api/observer")
		var o struct {
			Reachable, Ready bool
			StatusError      string `json:"status_error"`
			Declarations     []struct{ Queue string }
		}
		if code != http.StatusOK {
			t.Fatalf("/api/observer as viewer: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			t.Fatal(err)
		}
		if o.StatusError != "" {
			t.Fatalf("the observer refused the queue's Status: %s", o.StatusError)
		}
		if o.Reachable && o.Ready && len(o.Declarations) == 1 && o.Declarations[0].Queue == "greetings" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue never showed the observer's answer: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	obs.mu.Lock()
	caller := obs.callers[0]
	obs.mu.Unlock()
	if caller.Name != "queue" || !caller.HasRole(tlsfiles.RoleQueuePeer) {
		t.Errorf("the observer was asked by %v, want the queue's certificate (queue-peer)", caller)
	}

	for {
		code, body := get("viewer", "/api/workers")
		if code != http.StatusOK {
			t.Fatalf("/api/workers as viewer: %d %s", code, body)
		}
		if strings.Contains(body, `"worker":"greeter-1","queue":"greetings"`) && strings.Contains(body, `"identities":["worker"]`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/workers never showed the stream of greeter-1 as worker: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, path := range []string{"/api/workers", "/api/parked", "/api/observer"} {
		for name, want := range map[string]int{"viewer": http.StatusOK, "admin": http.StatusOK, "worker": http.StatusForbidden, "": http.StatusUnauthorized} {
			if code, body := get(name, path); code != want {
				t.Errorf("%s as %q: %d %s, want %d", path, name, code, body, want)
			}
		}
	}
}
