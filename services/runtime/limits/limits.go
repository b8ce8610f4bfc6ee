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

// Config is the bounds of a Limiter. Each bound's zero value is its
// default; a negative one is no bound.
type Config struct {
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
			Help: "Calls refused with RESOURCE_EXHAUSTED by a per-client limit, by limit (" + LimitWaitingLeasesPerConnection + " or " + LimitWaitingLeasesPerIdentity + ") and identity (the client certificate's CN, empty without one).",
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

// UnaryServerInterceptor refuses a waiting Lease beyond a bound with
// RESOURCE_EXHAUSTED before the handler runs, and holds its place in both
// counts until the handler returns. Put it after authorization, so that a
// call refused there neither takes a place nor counts as limited.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
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
	conn := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		conn = p.Addr.String()
	}
	id, hasID := tlsfiles.IdentityFromPeer(ctx)
	connMax := l.cfg.perConnection()
	idMax := -1
	if hasID {
		idMax = l.cfg.identityLimit(id)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.byConn[conn]; connMax >= 0 && n >= connMax {
		l.rejected.WithLabelValues(LimitWaitingLeasesPerConnection, id.Name).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "too many waiting Leases on connection %s: %d in flight (limit %d)", conn, n, connMax)
	}
	if n := l.byIdentity[id.Name]; hasID && idMax >= 0 && n >= idMax {
		l.rejected.WithLabelValues(LimitWaitingLeasesPerIdentity, id.Name).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "too many waiting Leases for identity %q: %d in flight (limit %d)", id.Name, n, idMax)
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

func decr(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
