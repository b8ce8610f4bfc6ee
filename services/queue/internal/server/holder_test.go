package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	serverlimits "github.com/batonrun/baton/services/runtime/limits"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"
)

func workerCert(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: []string{tlsfiles.RolePrefix + tlsfiles.RoleWorker}}}
}

func tlsContext(cs tls.ConnectionState) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: cs}})
}

// TestHolderOfIsTheIdentitysName holds holderOf to tlsfiles.IdentityFromPeer,
// whose certificate it reads without collecting roles: the identity's name,
// noCN for an identity without a CN, and "" for a call without an identity
// (no peer, plaintext, TLS without a client certificate).
func TestHolderOfIsTheIdentitysName(t *testing.T) {
	cases := map[string]context.Context{
		"no peer":                          context.Background(),
		"plaintext":                        peer.NewContext(context.Background(), &peer.Peer{}),
		"TLS without a client certificate": tlsContext(tls.ConnectionState{}),
		"a client certificate":             tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{workerCert("worker-1")}}),
		"a verified chain":                 tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{workerCert("sent")}, VerifiedChains: [][]*x509.Certificate{{workerCert("verified")}}}),
		"an empty chain":                   tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{workerCert("sent")}, VerifiedChains: [][]*x509.Certificate{{}}}),
		"a certificate without a CN":       tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{workerCert("")}}),
	}
	for name, ctx := range cases {
		got := holderOf(ctx)
		id, ok := tlsfiles.IdentityFromPeer(ctx)
		switch {
		case !ok && got != nil:
			t.Errorf("%s: holderOf = %q, want nil: no identity", name, *got)
		case ok && got == nil:
			t.Errorf("%s: holderOf = nil, want %q", name, id.Name)
		case ok && id.Name == "" && got != &noCN:
			t.Errorf("%s: holderOf = %q, want noCN", name, *got)
		case ok && id.Name != "" && *got != id.Name:
			t.Errorf("%s: holderOf = %q, want %q", name, *got, id.Name)
		}
	}
}

// TestHolderOfAllocatesNothing: the holder is the certificate's own CN, not
// a copy, found without an allocation.
func TestHolderOfAllocatesNothing(t *testing.T) {
	cert := workerCert(string([]byte("worker-1")))
	ctx := tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}})
	if got := holderOf(ctx); got != &cert.Subject.CommonName {
		t.Errorf("holderOf = %v, not the certificate's own CN", got)
	}
	if n := testing.AllocsPerRun(100, func() { holderOf(ctx) }); n != 0 {
		t.Errorf("holderOf allocates %v times per call", n)
	}
}

// TestForwardedHolderOnlyFromTheTrustingLimiter: holderOf takes the holder
// a member handed on only for a call that a Limiter trusting forwarded
// calls (the peer listener's) found forwarded. The same metadata anywhere
// else, even from a certificate with the queue-peer role beside its own,
// leaves the caller its own identity.
func TestForwardedHolderOnlyFromTheTrustingLimiter(t *testing.T) {
	cert := workerCert("worker-peer")
	cert.Subject.Organization = append(cert.Subject.Organization, tlsfiles.RolePrefix+tlsfiles.RoleQueuePeer)
	ctx := metadata.NewIncomingContext(tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}),
		metadata.Pairs(serverlimits.ForwardedKey, "1", serverlimits.ForwardedHolderKey, "worker-1"))
	through := func(cfg serverlimits.Config) string {
		l, err := serverlimits.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got *string
		if _, err := l.UnaryServerInterceptor()(ctx, &queuev1.AckRequest{}, &grpc.UnaryServerInfo{FullMethod: queuev1.QueueService_Ack_FullMethodName},
			func(ctx context.Context, _ any) (any, error) {
				got = holderOf(ctx)
				return nil, nil
			}); err != nil {
			t.Fatal(err)
		}
		if got == nil {
			return "<nil>"
		}
		return *got
	}
	if got := holderOf(ctx); got == nil || *got != "worker-peer" {
		t.Errorf("holderOf a call claiming to be forwarded, outside any Limiter: %v, want worker-peer", got)
	}
	if got := through(serverlimits.Config{}); got != "worker-peer" {
		t.Errorf("holderOf such a call through a client listener's Limiter: %s, want worker-peer", got)
	}
	if got := through(serverlimits.Config{TrustForwarded: true}); got != "worker-1" {
		t.Errorf("holderOf such a call through the peer listener's Limiter: %s, want the holder handed on, worker-1", got)
	}
}

// TestHandOnCarriesAnyHolder: the holder a member hands a call on with
// crosses a real gRPC connection whatever its bytes: the empty CN's marker
// (a NUL) and a CN in another script, which gRPC refuses as the value of a
// text metadata key (the forwarded call then failed INTERNAL), travel as
// binary metadata; a plain name as before, readable by an earlier version.
func TestHandOnCarriesAnyHolder(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan metadata.MD, 1)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		var in emptypb.Empty
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		got <- md
		return ss.SendMsg(&emptypb.Empty{})
	}))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, cn := range []string{"worker-1", "", "wörker", "работник"} {
		ctx := tlsContext(tls.ConnectionState{PeerCertificates: []*x509.Certificate{workerCert(cn)}})
		want := cn
		if cn == "" {
			want = noCN
		}
		cctx, cancel := context.WithTimeout(handOn(ctx), 5*time.Second)
		err := conn.Invoke(cctx, "/test.Echo/Call", &emptypb.Empty{}, &emptypb.Empty{})
		cancel()
		if err != nil {
			t.Errorf("a call handed on for %q: %v", cn, err)
			continue
		}
		md := <-got
		if h, ok := serverlimits.HolderFromMetadata(md); !ok || h != want {
			t.Errorf("handed on for %q, the holder arrived as %q (%v)", cn, h, ok)
		}
		if plain := md.Get(serverlimits.ForwardedHolderKey); cn == "worker-1" && (len(plain) != 1 || plain[0] != cn) {
			t.Errorf("a plain name travels under %s, as earlier versions read it: %v", serverlimits.ForwardedHolderKey, md)
		}
	}
}
