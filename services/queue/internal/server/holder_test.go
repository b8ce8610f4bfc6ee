package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"github.com/batonrun/baton/client/tlsfiles"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
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
