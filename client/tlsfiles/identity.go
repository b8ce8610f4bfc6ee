package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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
// observer)`, or `"x" (no roles)`, with its name as ShownName and its roles
// as ShownRoles return them.
func (id Identity) String() string {
	if len(id.Roles) == 0 {
		return `"` + id.ShownName() + `" (no roles)`
	}
	return `"` + id.ShownName() + `" (roles ` + strings.Join(id.ShownRoles(), ", ") + ")"
}

// MaxShownBytes is the most of a name from a certificate (a CN, a role) or
// a request that a log field, a metric label or a message holds. A CA may
// sign a CN of any length, and each refused call logs and counts it:
// without a bound a 60,000-byte CN makes a 120 KB log line a call, and a
// label as long. A real CN is at most 64 bytes (RFC 5280's upper bound).
const MaxShownBytes = 128

// Shown returns s as a log field, a metric label or a message may hold it:
// a character that is not printable (a control character such as NUL, a
// format character such as U+202E, which reverses the text after it), a
// byte that is not UTF-8, a backslash and a double quote are escaped as Go
// writes them (\x00, \u202e, \xff, \\, \"), and a result longer than
// MaxShownBytes is cut to that, ending in "…(N bytes)" with s's length.
// Printable text, a name such as "worker-1" or "trabajador-ñ", is
// returned as it is.
func Shown(s string) string {
	if len(s) <= MaxShownBytes && !strings.ContainsFunc(s, needsEscape) {
		return s
	}
	mark := "…(" + strconv.Itoa(len(s)) + " bytes)"
	room := MaxShownBytes - len(mark)
	b := make([]byte, 0, MaxShownBytes)
	fit := 0 // len(b) at the last escape's end within room
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var next []byte
		switch {
		case r == utf8.RuneError && size == 1:
			next = fmt.Appendf(nil, `\x%02x`, s[i])
		case r == '\\' || r == '"':
			next = []byte{'\\', byte(r)}
		case !needsEscape(r):
			next = []byte(s[i : i+size])
		case r < utf8.RuneSelf:
			next = fmt.Appendf(nil, `\x%02x`, r)
		case r <= 0xffff:
			next = fmt.Appendf(nil, `\u%04x`, r)
		default:
			next = fmt.Appendf(nil, `\U%08x`, r)
		}
		if len(b)+len(next) > MaxShownBytes {
			return string(b[:fit]) + mark
		}
		b = append(b, next...)
		if len(b) <= room {
			fit = len(b)
		}
		i += size
	}
	return string(b)
}

// needsEscape reports whether Shown escapes r (utf8.RuneError stands for
// a byte that is not UTF-8).
func needsEscape(r rune) bool {
	return r == utf8.RuneError || r == '\\' || r == '"' || !unicode.IsPrint(r)
}

// ShownName returns the identity's name as Shown returns it: for a log
// field or a metric label (baton_authz_denied_total's identity).
func (id Identity) ShownName() string { return Shown(id.Name) }

// ShownRoles returns the identity's roles as Shown returns each, as many
// as fit in MaxShownBytes together, and then "… N more" when that is not
// all (a certificate may carry any number of O values).
func (id Identity) ShownRoles() []string {
	var out []string
	total := 0
	for i, r := range id.Roles {
		shown := Shown(r)
		if total += len(shown); total > MaxShownBytes && i > 0 {
			return append(out, fmt.Sprintf("… %d more", len(id.Roles)-i))
		}
		out = append(out, shown)
	}
	return out
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
