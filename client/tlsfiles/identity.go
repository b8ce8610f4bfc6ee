package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// RolePrefix begins each subject O value of a certificate that is a role.
const RolePrefix = "baton:"

// The roles of docs/design.md, "Trust".
const (
	RoleObserver  = "observer"
	RoleWorker    = "worker"
	RoleViewer    = "viewer"
	RoleAdmin     = "admin"
	RoleQueuePeer = "queue-peer" // a member of a replicated queue
)

// KnownRoles returns the roles of docs/design.md, in the order it lists
// them.
func KnownRoles() []string {
	return []string{RoleObserver, RoleWorker, RoleViewer, RoleAdmin, RoleQueuePeer}
}

// Identity is who a verified peer certificate says the peer is.
type Identity struct {
	// Name is the certificate's subject CN.
	Name string
	// Roles are the subject O values that begin with RolePrefix, without
	// it, in the certificate's order, each once.
	Roles []string
}

// IdentityOf returns the identity cert states. It does not verify cert.
func IdentityOf(cert *x509.Certificate) Identity {
	id := Identity{Name: cert.Subject.CommonName}
	for _, o := range cert.Subject.Organization {
		role, ok := strings.CutPrefix(o, RolePrefix)
		if ok && role != "" && !slices.Contains(id.Roles, role) {
			id.Roles = append(id.Roles, role)
		}
	}
	return id
}

// HasRole reports whether the identity has role.
func (id Identity) HasRole(role string) bool { return slices.Contains(id.Roles, role) }

// String is the identity as messages name it: `"observer-1" (roles
// observer)`, or `"x" (no roles)`.
func (id Identity) String() string {
	if len(id.Roles) == 0 {
		return fmt.Sprintf("%q (no roles)", id.Name)
	}
	return fmt.Sprintf("%q (roles %s)", id.Name, strings.Join(id.Roles, ", "))
}

// IdentityFromState returns the identity of the peer of a connection, and
// false when the peer presented no certificate. The connection's
// configuration must have verified the certificate, as ServerConfig's and
// ClientConfig's do; the chain Go verified is used when there is one.
func IdentityFromState(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil {
		return Identity{}, false
	}
	if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		return IdentityOf(cs.VerifiedChains[0][0]), true
	}
	if len(cs.PeerCertificates) > 0 {
		return IdentityOf(cs.PeerCertificates[0]), true
	}
	return Identity{}, false
}

// IdentityFromAuthInfo returns the identity of a gRPC peer's TLS
// credentials, and false when they are not TLS or carry no certificate.
func IdentityFromAuthInfo(info credentials.AuthInfo) (Identity, bool) {
	ti, ok := info.(credentials.TLSInfo)
	if !ok {
		return Identity{}, false
	}
	return IdentityFromState(&ti.State)
}

// IdentityFromPeer returns the identity of the caller of the gRPC call of
// ctx (a handler's or an interceptor's context), and false without one.
func IdentityFromPeer(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	return IdentityFromAuthInfo(p.AuthInfo)
}

// IdentityFromRequest returns the identity of the client of an HTTP
// request served over TLS, and false without one (plaintext, or no
// certificate sent to a VerifyClientCertIfGiven server).
func IdentityFromRequest(r *http.Request) (Identity, bool) {
	return IdentityFromState(r.TLS)
}
