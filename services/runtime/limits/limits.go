// Package limits keeps one client of a Baton server from holding what the
// others need: it bounds the Lease calls that wait for work (long polls) a
// client has in flight at once, per connection and per identity, and
// refuses one more with RESOURCE_EXHAUSTED before the handler runs.
//
// A waiting Lease is cheap while it waits, but not free: it holds a
// goroutine, a stream of its connection and a waiter in the broker for up
// to 30 s. A client that opens thousands (a bug that retries without
// backoff, a loop that forgets to wait for the answer) would take them
// from everyone else. The bounds are far above what a well-behaved worker
// needs (the worker SDK keeps one waiting Lease per controller), so only a
// misbehaving client meets them.
//
//	l, err := limits.New(limits.Config{}, reg) // the defaults
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authorizer, l.UnaryServerInterceptor()))
//
// # Who is a client
//
// The identity is the subject CN of the client's verified certificate
// (tlsfiles.IdentityFromPeer): every connection of "worker-1" shares
// its budget, so opening more connections does not buy more. Without a
// verified certificate (plaintext, TLS without a CA, or a client that sent
// none to a server that does not require one) there is no identity, and
// only the per-connection bound applies. Such a client is deliberately not
// grouped by its IP address: everything behind one NAT, one Kubernetes
// node or one loopback (baton-dev runs all its parts on 127.0.0.1, and
// plaintext is refused beyond loopback unless --insecure) shares an
// address, so an address budget would make unrelated clients starve each
// other, the harm this package exists to prevent.
//
// A connection is its remote address, ip:port, which no two open TCP
// connections to one listener share.
//
// # Refusals
//
// A waiting Lease beyond a bound gets RESOURCE_EXHAUSTED naming the bound,
// the identity or the connection, and the count:
//
//	too many waiting Leases for identity "worker-1": 64 in flight (limit 64)
//	too many waiting Leases on connection 127.0.0.1:53412: 256 in flight (limit 256)
//
// and is counted in baton_limit_rejected_total{limit, identity}. A work
// stream (QueueService Work) counts as one waiting Lease while it is open.
// A Lease without a wait, and every other call, is never limited here: it returns
// at once, and gRPC's MaxConcurrentStreams bounds a connection's calls.
//
// # Calls a member forwards
//
// A member of a replicated queue that does not lead forwards each call of
// its clients to the leader's peer listener, over its one connection
// there (the queue's internal/server/forward.go). Counted as they arrive
// at the leader, every client of that member would share one connection
// and one identity, the member's, and one client within its own bounds
// could fill them for all the others. So each client is counted where it
// connects, by the member's own Limiter, as at any server; and the member
// names the client of each call it forwards in metadata: ForwardedKey
// marks the call, ForwardedConnKey is the client's connection as the
// member saw it, and ForwardedHolderKey is its identity's name (CN). A
// Limiter whose Config trusts forwarded calls (serve gives the peer
// listener one) counts such a call against that client: its connection
// joined with the member's, as in
//
//	too many waiting Leases on connection 10.0.3.7:53412 via 10.0.3.2:40112: 256 in flight (limit 256)
//
// and its identity, with WaitingLeasesPerIdentity as its bound (only the
// name is forwarded, not the roles: those were weighed by the member it
// reached). ForwardedCaller hands the client to the handler, which binds
// the leases it hands out to that identity.
//
// The metadata is believed from a member alone: a caller whose verified
// certificate has the queue-peer role, or any caller where there are no
// identities (plaintext or TLS without a CA, where only the connection
// is taken and no lease is bound to anyone). Any other caller is counted
// as itself. A Limiter that does not trust forwarded calls (every client
// listener) never reads the metadata, so a certificate with the
// queue-peer role beside a worker's is only itself there.
package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The defaults of Config's bounds.
const (
	// DefaultWaitingLeasesPerConnection bounds one connection's waiting
	// Leases: a worker process keeps one per controller, so 256 is room for
	// a process running hundreds of controllers over one connection. It is
	// well below serve.MaxConcurrentStreams (1024), so a connection at this
	// bound still has streams for the Acks and Extends that let its waiting
	// Leases return.
	DefaultWaitingLeasesPerConnection = 256
	// DefaultWaitingLeasesPerIdentity bounds one identity's waiting Leases
	// over all its connections. Replicas of one worker Deployment often
	// share a certificate, so it is four connections at their bound: a
	// fleet of tens of processes with tens of controllers each.
	DefaultWaitingLeasesPerIdentity = 1024
)

// RejectedMetric counts the calls refused by a limit, by limit and
// identity.
const RejectedMetric = "baton_limit_rejected_total"

// The values of RejectedMetric's limit label.
const (
	LimitWaitingLeasesPerConnection = "waiting_leases_per_connection"
	LimitWaitingLeasesPerIdentity   = "waiting_leases_per_identity"
)

// LeaseMethod is the full name of the call whose waiting form is limited.
// It is matched by name, as authz matches methods, so that this package
// (and serve, which every binary links) needs none of the queue's code.
const LeaseMethod = "/baton.queue.v1.QueueService/Lease"

// WorkMethod is the full name of the work stream, which waits for work as
// long as it is open: each counts as one waiting Lease for its whole life.
const WorkMethod = "/baton.queue.v1.QueueService/Work"

// The metadata keys of a call a member forwards (see the package doc).
const (
	// ForwardedKey marks a forwarded call.
	ForwardedKey = "baton-forwarded"
	// ForwardedHolderKey is the name (CN) of the caller's identity, absent
	// when it had none, when the name is printable ASCII; any other name
	// goes under ForwardedHolderBinKey (HolderMetadata).
	ForwardedHolderKey = "baton-forwarded-holder"
	// ForwardedHolderBinKey carries a name that is not printable ASCII,
	// as gRPC's binary metadata: gRPC refuses such a value under any other
	// key, and the whole forwarded call with it.
	ForwardedHolderBinKey = "baton-forwarded-holder-bin"
	// ForwardedConnKey is the caller's connection (its remote address) at
	// the member that forwarded the call.
	ForwardedConnKey = "baton-forwarded-conn"
)

// Config is the bounds of a Limiter. Each bound's zero value is its
// default; a negative one is no bound.
type Config struct {
	// TrustForwarded counts a call a member forwards against the client
	// its metadata names, not against the member (the package doc). Set
	// it on the listener only members reach, never on one clients reach.
	TrustForwarded bool
	// WaitingLeasesPerConnection bounds the waiting Leases of one
	// connection; 0 means DefaultWaitingLeasesPerConnection.
	WaitingLeasesPerConnection int
	// WaitingLeasesPerIdentity bounds the waiting Leases of one identity
	// whose roles RoleWaitingLeases does not name; 0 means
	// DefaultWaitingLeasesPerIdentity.
	WaitingLeasesPerIdentity int
	// RoleWaitingLeases bounds, by role, the waiting Leases of an identity
	// with that role, in place of WaitingLeasesPerIdentity (higher or
	// lower). An identity with several roles named here gets the most
	// generous of them; roles not named add nothing. Values must be
	// positive (authz's policy file refuses others).
	RoleWaitingLeases map[string]int
}

// perConnection and perIdentity resolve the zero values.
func (c Config) perConnection() int {
	if c.WaitingLeasesPerConnection == 0 {
		return DefaultWaitingLeasesPerConnection
	}
	return c.WaitingLeasesPerConnection
}

// identityLimit is the bound of id's waiting Leases.
func (c Config) identityLimit(id tlsfiles.Identity) int {
	best, named := 0, false
	for _, r := range id.Roles {
		if n, ok := c.RoleWaitingLeases[r]; ok && (!named || n > best) {
			best, named = n, true
		}
	}
	if named {
		return best
	}
	if c.WaitingLeasesPerIdentity == 0 {
		return DefaultWaitingLeasesPerIdentity
	}
	return c.WaitingLeasesPerIdentity
}

// Limiter enforces a Config on a server's calls. It is safe for
// concurrent use.
type Limiter struct {
	cfg      Config
	rejected *prometheus.CounterVec

	mu         sync.Mutex
	byConn     map[string]int // remote address → waiting Leases
	byIdentity map[string]int // CN → waiting Leases
}

// New returns a Limiter with cfg's bounds whose refusals are counted in
// RejectedMetric, registered with reg (nil: nowhere). Two Limiters given one
// Registerer share the counter. It fails only when reg refuses it.
func New(cfg Config, reg prometheus.Registerer) (*Limiter, error) {
	l := &Limiter{
		cfg:        cfg,
		byConn:     make(map[string]int),
		byIdentity: make(map[string]int),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RejectedMetric,
			Help: "Calls refused with RESOURCE_EXHAUSTED by a per-client limit, by limit (" + LimitWaitingLeasesPerConnection + " or " + LimitWaitingLeasesPerIdentity + ") and identity (the client certificate's CN, empty without one; escaped and cut to 128 bytes as tlsfiles.Shown does).",
		}, []string{"limit", "identity"}),
	}
	if reg != nil {
		if err := reg.Register(l.rejected); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, fmt.Errorf("limits: register %s: %w", RejectedMetric, err)
			}
			existing, ok := already.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, fmt.Errorf("limits: register %s: %w", RejectedMetric, err)
			}
			l.rejected = existing
		}
	}
	return l, nil
}

// waitNamer is a request that may ask to wait: a LeaseRequest.
type waitNamer interface{ GetWait() *durationpb.Duration }

// IsWaitingLease reports whether a call of method with req is a Lease that
// will wait for work when none is ready: its wait is positive. A Lease
// with an invalid wait (negative, or beyond the queue's maximum) is not
// one, or is refused by its handler at once.
func IsWaitingLease(method string, req any) bool {
	if method != LeaseMethod {
		return false
	}
	w, ok := req.(waitNamer)
	if !ok {
		return false
	}
	d := w.GetWait()
	return d != nil && (d.GetSeconds() > 0 || (d.GetSeconds() == 0 && d.GetNanos() > 0))
}

// Caller is the client of a call a member forwarded, as the member names
// it.
type Caller struct {
	// Conn is the client's connection at the member, joined with the
	// member's connection here: "10.0.3.7:53412 via 10.0.3.2:40112".
	Conn string
	// Holder is the name (CN) of the client's identity, nil when it had
	// none.
	Holder *string
}

type callerKey struct{}

// ForwardedCaller returns the client of a forwarded call, which a Limiter
// that trusts forwarded calls found in its metadata; ok is false for every
// other call, including one that carries the metadata on a listener whose
// Limiter does not trust it.
func ForwardedCaller(ctx context.Context) (c *Caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(*Caller)
	return c, ok
}

// forwardedCaller reads the client of a forwarded call from its metadata:
// nil for a call that is not forwarded, or that comes from a caller that is
// not a member.
func forwardedCaller(ctx context.Context) *Caller {
	if len(metadata.ValueFromIncomingContext(ctx, ForwardedKey)) == 0 {
		return nil
	}
	id, verified := tlsfiles.IdentityFromPeer(ctx)
	if verified && !id.HasRole(tlsfiles.RoleQueuePeer) {
		return nil
	}
	c := &Caller{Conn: connOf(ctx)}
	if v := metadata.ValueFromIncomingContext(ctx, ForwardedConnKey); len(v) > 0 {
		c.Conn = v[0] + " via " + c.Conn
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && verified {
		if h, ok := HolderFromMetadata(md); ok {
			c.Holder = &h
		}
	}
	return c
}

// HolderMetadata is the metadata key and value that carry holder, the name
// of a forwarded call's caller: ForwardedHolderKey for printable ASCII, the
// names of every usual certificate, and ForwardedHolderBinKey for any other
// (a CN of another script, or the empty CN's marker), which gRPC would
// refuse under a text key. Members of an earlier version read the text key
// alone, and still read every usual name.
func HolderMetadata(holder string) (key, value string) {
	for i := 0; i < len(holder); i++ {
		if c := holder[i]; c < 0x20 || c > 0x7e {
			return ForwardedHolderBinKey, holder
		}
	}
	return ForwardedHolderKey, holder
}

// HolderFromMetadata reads the holder HolderMetadata put in md.
func HolderFromMetadata(md metadata.MD) (string, bool) {
	if v := md.Get(ForwardedHolderBinKey); len(v) > 0 {
		return v[0], true
	}
	if v := md.Get(ForwardedHolderKey); len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// withCaller returns ctx with the client of a forwarded call, when the
// Limiter trusts forwarded calls and ctx is one.
func (l *Limiter) withCaller(ctx context.Context) (context.Context, bool) {
	if !l.cfg.TrustForwarded {
		return ctx, false
	}
	c := forwardedCaller(ctx)
	if c == nil {
		return ctx, false
	}
	return context.WithValue(ctx, callerKey{}, c), true
}

// callerStream is a server stream whose context carries its caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s callerStream) Context() context.Context { return s.ctx }

// UnaryServerInterceptor refuses a waiting Lease beyond a bound with
// RESOURCE_EXHAUSTED before the handler runs, and holds its place in both
// counts until the handler returns. Put it after authorization, so that a
// call refused there neither takes a place nor counts as limited.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, _ = l.withCaller(ctx)
		if !IsWaitingLease(info.FullMethod, req) {
			return handler(ctx, req)
		}
		release, err := l.acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor counts each work stream as a waiting Lease for
// as long as it is open, and refuses one beyond a bound before its handler
// runs, as UnaryServerInterceptor refuses a waiting Lease.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if ctx, ok := l.withCaller(ss.Context()); ok {
			ss = callerStream{ServerStream: ss, ctx: ctx}
		}
		if info.FullMethod != WorkMethod {
			return handler(srv, ss)
		}
		release, err := l.acquire(ss.Context())
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// acquire takes a place for a waiting Lease of ctx's client in the count
// of its connection and of its identity, or takes none and returns the
// refusal of the first bound it would cross.
func (l *Limiter) acquire(ctx context.Context) (release func(), err error) {
	var conn string
	var id tlsfiles.Identity
	var hasID bool
	if c, ok := ForwardedCaller(ctx); ok && l.cfg.TrustForwarded {
		conn = c.Conn
		if hasID = c.Holder != nil; hasID {
			id.Name = *c.Holder // no roles: the default bound
		}
	} else {
		conn = connOf(ctx)
		id, hasID = tlsfiles.IdentityFromPeer(ctx)
	}
	connMax := l.cfg.perConnection()
	idMax := -1
	if hasID {
		idMax = l.cfg.identityLimit(id)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	// The identity as a label and in the message is tlsfiles.Shown's: a
	// CN is whatever the CA signed, of any length and with any bytes.
	if n := l.byConn[conn]; connMax >= 0 && n >= connMax {
		l.rejected.WithLabelValues(LimitWaitingLeasesPerConnection, tlsfiles.Shown(id.Name)).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "too many waiting Leases on connection %s: %d in flight (limit %d)", tlsfiles.Shown(conn), n, connMax)
	}
	if n := l.byIdentity[id.Name]; hasID && idMax >= 0 && n >= idMax {
		l.rejected.WithLabelValues(LimitWaitingLeasesPerIdentity, tlsfiles.Shown(id.Name)).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "too many waiting Leases for identity \"%s\": %d in flight (limit %d)", tlsfiles.Shown(id.Name), n, idMax)
	}
	l.byConn[conn]++
	if hasID {
		l.byIdentity[id.Name]++
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		// Entries are removed at zero: the maps hold only the clients
		// waiting now, however many have come and gone.
		decr(l.byConn, conn)
		if hasID {
			decr(l.byIdentity, id.Name)
		}
	}, nil
}

// connOf is the remote address of ctx's connection, "" without one.
func connOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func decr(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
