package baton

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestWriteCerts: a server serving the queue's files as baton-queue does
// (requiring a client certificate of the CA) accepts the bench's client,
// dialed as StartWith dials it, and sees the client's identity with the
// roles the cycle needs.
func TestWriteCerts(t *testing.T) {
	tl, err := WriteCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: tl.CertFile, KeyFile: tl.KeyFile, CAFile: tl.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	creds, err := src.ServerCredentials(tlsfiles.RequireClientCert)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		ids []tlsfiles.Identity
	)
	srv := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id, ok := tlsfiles.IdentityFromPeer(ctx); ok {
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		}
		return h(ctx, req)
	}))
	hs := health.NewServer()
	hs.SetServingStatus("baton.queue.v1.QueueService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	c, err := queueclient.Dial(lis.Addr().String(), queueclient.WithTLS(tl.Client))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Healthy(ctx); err != nil {
		t.Fatalf("health over mTLS: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The certificate's order of roles is client/certs' business.
	if len(ids) != 1 || ids[0].Name != CertClient || !slices.Equal(slices.Sorted(slices.Values(ids[0].Roles)), slices.Sorted(slices.Values(ClientRoles))) {
		t.Fatalf("identities seen: %v, want %q with roles %v", ids, CertClient, ClientRoles)
	}

	// Without the client's certificate the queue refuses the handshake.
	anon, err := tlsfiles.Load(tlsfiles.Config{CAFile: tl.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := queueclient.Dial(lis.Addr().String(), queueclient.WithTLS(anon), queueclient.WithBackoff(queueclient.Backoff{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Healthy(ctx); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}
