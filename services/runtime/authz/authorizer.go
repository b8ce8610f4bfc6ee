package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// DeniedMetric counts the calls and requests refused, by method and
// identity.
const DeniedMetric = "baton_authz_denied_total"

// Attribute keys of the denial log lines.
const (
	logKeyIdentity = "identity"
	logKeyRoles    = "roles"
	logKeyMethod   = "method"
	logKeyQueue    = "queue"
	logKeyPath     = "path"
	logKeyErr      = "err"
)

// Options configures New.
type Options struct {
	// Policy is what each role may call; nil means Default().
	Policy *Policy
	// Logger receives one WARN line per refused call or request; nil
	// discards.
	Logger *slog.Logger
	// Registerer receives DeniedMetric; nil registers it nowhere. Two
	// Authorizers given one Registerer share the counter.
	Registerer prometheus.Registerer
}

// Authorizer enforces a Policy on a server's gRPC calls and HTTP requests,
// with the identity of the client's verified certificate.
type Authorizer struct {
	policy *Policy
	log    *slog.Logger
	denied *prometheus.CounterVec
}

// New returns an Authorizer; it fails only when the Registerer refuses the
// counter.
func New(o Options) (*Authorizer, error) {
	a := &Authorizer{policy: o.Policy, log: o.Logger}
	if a.policy == nil {
		a.policy = Default()
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.denied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: DeniedMetric,
		Help: "Calls and requests refused by authorization, by method (a full gRPC method name, or HTTP and the policy path that covers the request) and identity (the client certificate's CN, empty without one; escaped and cut to 128 bytes as tlsfiles.Shown does).",
	}, []string{"method", "identity"})
	if o.Registerer != nil {
		if err := o.Registerer.Register(a.denied); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, fmt.Errorf("authz: register %s: %w", DeniedMetric, err)
			}
			existing, ok := already.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, fmt.Errorf("authz: register %s: %w", DeniedMetric, err)
			}
			a.denied = existing
		}
	}
	return a, nil
}

// Policy returns the policy the Authorizer enforces.
func (a *Authorizer) Policy() *Policy { return a.policy }

// UnaryServerInterceptor refuses a call without a verified client
// certificate (UNAUTHENTICATED) and one the policy does not allow
// (PERMISSION_DENIED, with the queue of a request that names one) before
// the handler runs.
func (a *Authorizer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, ok := tlsfiles.IdentityFromPeer(ctx)
		if !ok {
			return nil, a.unauthenticated(ctx, info.FullMethod)
		}
		q := queueOf(req)
		if err := a.policy.Authorize(id, info.FullMethod, q); err != nil {
			a.refused(ctx, id, info.FullMethod, q, isQueued(info.FullMethod), err)
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor refuses a stream without a verified client
// certificate, or whose method the identity's roles may not call on any
// queue, before the handler runs. When its roles may call the method on
// some queues only, the stream's first message decides: the handler's
// first RecvMsg returns it only when its queue (the message's, or its
// open's, as Work's) is allowed, and otherwise PERMISSION_DENIED, which the
// stream then ends with whatever the handler returns. Such a handler must
// send nothing before its first RecvMsg.
func (a *Authorizer) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		id, ok := tlsfiles.IdentityFromPeer(ctx)
		if !ok {
			return a.unauthenticated(ctx, info.FullMethod)
		}
		checkQueue, err := a.policy.authorizeMethod(id, info.FullMethod)
		if err != nil {
			a.refused(ctx, id, info.FullMethod, "", false, err)
			return err
		}
		if !checkQueue {
			return handler(srv, ss)
		}
		cs := &queueCheckedStream{ServerStream: ss, a: a, id: id, method: info.FullMethod}
		herr := handler(srv, cs)
		if derr := cs.denial(); derr != nil {
			return derr
		}
		return herr
	}
}

// queueCheckedStream lets a stream's messages through once its first
// message's queue is allowed.
type queueCheckedStream struct {
	grpc.ServerStream
	a      *Authorizer
	id     tlsfiles.Identity
	method string

	mu      sync.Mutex
	checked bool  // the first message has been received and decided
	err     error // its denial
}

// errSentFirst is returned by a SendMsg before the stream's first message
// was allowed.
func (s *queueCheckedStream) errSentFirst() error {
	return status.Errorf(codes.Internal, "authz: the handler of %s sent before receiving the first message, whose queue decides whether the call is allowed", s.method)
}

func (s *queueCheckedStream) RecvMsg(m any) error {
	s.mu.Lock()
	checked, denied := s.checked, s.err
	s.mu.Unlock()
	if denied != nil {
		return denied
	}
	if checked {
		return s.ServerStream.RecvMsg(m)
	}
	// gRPC allows one RecvMsg at a time, so this is the only one deciding.
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	q := firstQueueOf(m)
	err := s.a.policy.Authorize(s.id, s.method, q)
	s.mu.Lock()
	s.checked, s.err = true, err
	s.mu.Unlock()
	if err != nil {
		s.a.refused(s.Context(), s.id, s.method, q, true, err)
		return err
	}
	return nil
}

func (s *queueCheckedStream) SendMsg(m any) error {
	s.mu.Lock()
	checked, denied := s.checked, s.err
	s.mu.Unlock()
	switch {
	case denied != nil:
		return denied
	case !checked:
		return s.errSentFirst()
	}
	return s.ServerStream.SendMsg(m)
}

func (s *queueCheckedStream) denial() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// queueNamer is a request that names its queue: every QueueService
// request.
type queueNamer interface{ GetQueue() string }

// queueOf returns the queue a request names, "" if none.
func queueOf(req any) string {
	if q, ok := req.(queueNamer); ok {
		return q.GetQueue()
	}
	return ""
}

// firstQueueOf returns the queue the first message of a stream names: its
// own queue field, or that of its open field (a WorkRequest's first message
// is open {queue, …}); "" if neither.
func firstQueueOf(m any) string {
	if q, ok := m.(queueNamer); ok {
		return q.GetQueue()
	}
	pm, ok := m.(interface{ ProtoReflect() protoreflect.Message })
	if !ok {
		return ""
	}
	msg := pm.ProtoReflect()
	open := msg.Descriptor().Fields().ByName("open")
	if open == nil || open.Message() == nil || open.IsList() || open.IsMap() || !msg.Has(open) {
		return ""
	}
	inner := msg.Get(open).Message()
	if q, ok := inner.Interface().(queueNamer); ok {
		return q.GetQueue()
	}
	qf := inner.Descriptor().Fields().ByName("queue")
	if qf == nil || qf.Kind() != protoreflect.StringKind || qf.IsList() || qf.IsMap() {
		return ""
	}
	return inner.Get(qf).String()
}

// unauthenticated logs, counts and returns the refusal of a call without a
// verified client certificate.
func (a *Authorizer) unauthenticated(ctx context.Context, method string) error {
	err := status.Errorf(codes.Unauthenticated, "authz: %s needs a verified client certificate", method)
	a.log.WarnContext(ctx, "call refused", logKeyMethod, method, logKeyErr, err.Error())
	a.denied.WithLabelValues(method, "").Inc()
	return err
}

// refused logs and counts a call the policy does not allow.
func (a *Authorizer) refused(ctx context.Context, id tlsfiles.Identity, method, queue string, withQueue bool, err error) {
	attrs := []any{logKeyIdentity, id.ShownName(), logKeyRoles, id.ShownRoles(), logKeyMethod, method}
	if withQueue {
		attrs = append(attrs, logKeyQueue, tlsfiles.Shown(queue))
	}
	attrs = append(attrs, logKeyErr, status.Convert(err).Message())
	a.log.WarnContext(ctx, "call denied", attrs...)
	a.denied.WithLabelValues(method, id.ShownName()).Inc()
}

// HTTP wraps a server's handler with the policy's paths: /healthz and
// /readyz are served to anyone; any other request needs a verified client
// certificate (401 without one) whose roles the policy allows the path
// (403 otherwise, the message naming the identity and the path). Serve it
// over TLS with tlsfiles.VerifyClientCertIfGiven: a request over plaintext
// has no certificate, and only the probes are served.
func (a *Authorizer) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clean := cleanPath(r.URL.Path)
		if isOpenPath(clean) {
			next.ServeHTTP(w, r)
			return
		}
		label := "HTTP"
		if g, ok := a.policy.route(clean); ok {
			label = "HTTP " + g.pattern
		}
		id, ok := tlsfiles.IdentityFromRequest(r)
		if !ok {
			// Anyone may send any path: it is shown bounded and escaped.
			msg := fmt.Sprintf("authz: %s needs a verified client certificate", tlsfiles.Shown(clean))
			a.log.WarnContext(r.Context(), "request refused", logKeyPath, tlsfiles.Shown(clean), logKeyErr, msg)
			a.denied.WithLabelValues(label, "").Inc()
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		if err := a.policy.AuthorizePath(id, clean); err != nil {
			a.log.WarnContext(r.Context(), "request denied", logKeyIdentity, id.ShownName(), logKeyRoles, id.ShownRoles(),
				logKeyPath, tlsfiles.Shown(clean), logKeyErr, err.Error())
			a.denied.WithLabelValues(label, id.ShownName()).Inc()
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isOpenPath(clean string) bool {
	for _, p := range openPaths {
		if p == clean {
			return true
		}
	}
	return false
}
