// Package serve runs a Baton service's network side the same way in every
// binary: a gRPC server with panic recovery, slog logging and Prometheus
// metrics interceptors, explicit message-size, stream and keepalive limits,
// per-client bounds on waiting Leases (services/runtime/limits),
// grpc.health.v1 that follows the service's readiness, server reflection; and
// an HTTP server with /metrics, /healthz and /readyz. On cancellation it flips
// health to NOT_SERVING, drains with GracefulStop and falls back to Stop after
// the grace period (grpc-go's examples/features/gracefulstop).
//
// # TLS
//
// With Options.TLS both servers serve TLS with the process's certificate
// (client/tlsfiles, re-read when the files change). When the Source has a
// CA bundle, the gRPC server requires a client certificate that verifies
// against it (mutual TLS) and the HTTP server verifies one if it is given
// (a kubelet's probe sends none), and every call and request is authorized
// by services/runtime/authz: /healthz and /readyz to anyone, the rest by
// the client's roles. Without TLS, Run serves plaintext, without
// authorization, and refuses an address that is not loopback unless
// Options.Insecure (services/runtime/trust).
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/batonrun/baton/services/runtime/limits"
	"github.com/batonrun/baton/services/runtime/rpcmetrics"
	"github.com/batonrun/baton/services/runtime/trust"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// MaxMessageBytes bounds every gRPC message a Baton server sends, and what
// Baton's clients accept: an observer List page of 10,000 objects fits.
const MaxMessageBytes = 16 << 20

// ReadyMetric is the gauge of a service's readiness: 1 while Options.Ready
// passes (what /readyz answers and grpc.health.v1 reports), else 0. It is
// checked once a second whether or not anyone asks, so an alert on it sees a
// member that is up but not ready, which a scrape that succeeds does not.
const ReadyMetric = "baton_ready"

// DefaultMaxRecvBytes bounds the requests a server accepts unless its
// Options say otherwise: etcd's default for its own requests (1.5 MiB).
// Larger ones get RESOURCE_EXHAUSTED from gRPC before any handler runs.
const DefaultMaxRecvBytes = 1536 << 10

// MaxConcurrentStreams bounds the calls one client connection has open at
// once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS; grpc-go's default is no
// bound). Each open call holds a goroutine and its buffers, so without a
// bound one connection can hold as many as it likes. A grpc-go client
// queues calls beyond it rather than failing them, so the bound costs a
// well-behaved client nothing: the busiest (a queue benchmark's 64 callers,
// a worker's Lease per controller and its Acks, the observer's Adds) use
// tens. It is four times limits.DefaultWaitingLeasesPerConnection, so a
// connection whose waiting Leases are at their bound still has streams for
// the Acks and Extends that end them.
const MaxConcurrentStreams = 1024

// PeerMaxConcurrentStreams bounds the calls one connection to the peer
// listener has open: not at all. A member of a replicated queue forwards
// every call of all its clients to the leader over its one connection
// there, and each was admitted by that member under its own client's
// bounds (MaxConcurrentStreams on the client's connection, the waiting
// Leases of limits). A bound here would be one budget that all the
// member's clients share, which one of them, within its own bounds, could
// fill with idle work streams, leaving every other client's calls queued
// behind them. The peer listener admits the members alone.
const PeerMaxConcurrentStreams = math.MaxUint32

// KeepaliveMinTime is the shortest interval between a client's keepalive
// pings the server tolerates; a client that pings faster is sent GOAWAY
// (ENHANCE_YOUR_CALM, "too_many_pings") and disconnected. grpc-go clients
// never ping more often than every 10 s, so every Baton client is within
// it, while a client that floods pings is cut off.
const KeepaliveMinTime = 5 * time.Second

// Options configures Run.
type Options struct {
	// Name is the service name for logs, e.g. "baton-queue".
	Name string
	// GRPCAddr is the gRPC listen address; empty means no gRPC server.
	GRPCAddr string
	// HTTPAddr is the HTTP listen address for /metrics, /healthz, /readyz.
	HTTPAddr string
	// Register registers the service's gRPC services and returns their full
	// names (for health).
	Register func(*grpc.Server) []string
	// Ready reports readiness: nil when the service can do its work.
	Ready func(context.Context) error
	// Registry holds the service's metrics; the gRPC and Go runtime metrics
	// are added to it. Nil means a new registry.
	Registry *prometheus.Registry
	// Handle adds HTTP handlers (e.g. a dashboard at /) beside the defaults.
	Handle func(*http.ServeMux)
	// Pprof serves net/http/pprof under /debug/pprof/ (as etcd's
	// --enable-pprof does), for profiling a live process.
	Pprof bool
	// MaxRecvBytes bounds a request's encoded size; 0 means
	// DefaultMaxRecvBytes.
	MaxRecvBytes int
	// GracePeriod bounds the drain on shutdown; 0 means 10 s.
	GracePeriod time.Duration
	// Logger receives the request log; nil discards.
	Logger *slog.Logger
	// OnListen, if set, is called with the bound addresses once listening
	// (tests pass :0 and learn the ports here).
	OnListen func(grpcAddr, httpAddr net.Addr)

	// TLS, if set, is the process's certificate, served on both listeners
	// (see the package doc); nil serves plaintext.
	TLS *tlsfiles.Source
	// GRPCClientCerts is what the gRPC listener asks of clients when TLS
	// has a CA bundle: RequireClientCert (the zero value) or
	// VerifyClientCertIfGiven. HTTP always verifies one if given.
	GRPCClientCerts tlsfiles.ClientCerts
	// AuthzPolicy is what each role may call when TLS has a CA bundle; nil
	// means the default role table (authz.Default).
	AuthzPolicy *authz.Policy
	// Insecure allows plaintext on an address that is not loopback
	// (--insecure); without it and without TLS, Run refuses one.
	Insecure bool
	// Limits bounds the Lease calls waiting for work that one connection
	// and one identity have in flight (services/runtime/limits); the zero
	// value is the package's defaults. When TLS has a CA bundle and
	// RoleWaitingLeases is nil, it is the limits section of AuthzPolicy
	// (or of the default table, which has none). Without identities (no
	// CA), only the per-connection bound applies.
	Limits limits.Config

	// PeerAddr, if set, is a second gRPC listener, for the service's own
	// peers (the members of a replicated queue): RegisterPeer registers
	// its services. It is served with the same certificate, interceptors,
	// authorization and limits as GRPCAddr, and OnPeerListen learns its
	// bound address.
	PeerAddr     string
	RegisterPeer func(*grpc.Server)
	OnPeerListen func(net.Addr)
	// PeerAuthzPolicy, if set, is what the peer listener allows in place
	// of AuthzPolicy (the members' port admits the members alone);
	// PeerLimits are its waiting-Lease bounds in place of Limits. The peer
	// listener trusts forwarded calls (limits.Config.TrustForwarded,
	// whatever PeerLimits says): a call a member forwards is counted
	// against the client the member names, which was bounded where it
	// arrived, and its handler learns that client (limits.ForwardedCaller).
	// Its connections may open any number of calls
	// (PeerMaxConcurrentStreams).
	PeerAuthzPolicy *authz.Policy
	PeerLimits      limits.Config
}

// Run serves until ctx is cancelled, then drains and returns nil; it returns
// an error if a listener cannot be opened or a server fails.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = 10 * time.Second
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if o.TLS == nil {
		addrs := []string{o.GRPCAddr, o.HTTPAddr}
		if o.PeerAddr != "" {
			addrs = append(addrs, o.PeerAddr)
		}
		if err := (trust.Config{Insecure: o.Insecure}).CheckListen(addrs...); err != nil {
			return err
		}
	}
	readyGauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: ReadyMetric,
		Help: "1 while this service is ready (its /readyz answers ok and grpc.health.v1 says SERVING), checked every second; else 0, also while it drains."})
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), readyGauge)
	sec, err := newSecurity(o, log, reg)
	if err != nil {
		return err
	}

	lim, err := newLimiter(o, sec, reg)
	if err != nil {
		return err
	}
	metrics := rpcmetrics.New()
	reg.MustRegister(metrics)
	g, err := listenGRPC(o, log, metrics, sec, lim)
	if err != nil {
		return err
	}
	peerSec, peerLim := sec, lim
	if o.PeerAddr != "" {
		if sec.authz != nil && o.PeerAuthzPolicy != nil {
			if peerSec.authz, err = authz.New(authz.Options{Policy: o.PeerAuthzPolicy, Logger: log, Registerer: reg}); err != nil {
				return err
			}
		}
		pl := o.PeerLimits
		pl.TrustForwarded = true
		if peerLim, err = limits.New(pl, reg); err != nil {
			return fmt.Errorf("serve: peer limits: %w", err)
		}
	}
	peer, err := listenPeer(o, log, metrics, peerSec, peerLim)
	if err != nil {
		g.close()
		return err
	}
	g.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	hlis, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		g.close()
		peer.close()
		return fmt.Errorf("listen http %s: %w", o.HTTPAddr, err)
	}
	var handler http.Handler = httpMux(o, reg)
	if sec.authz != nil {
		handler = sec.authz.HTTP(handler)
	}
	hsrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: sec.httpTLS}
	if o.OnListen != nil {
		o.OnListen(g.addr(), hlis.Addr())
	}
	if o.OnPeerListen != nil && peer.lis != nil {
		o.OnPeerListen(peer.addr())
	}
	log.Info("serving", "service", o.Name, "grpc", addrString(g.addr()), "http", hlis.Addr().String(), "tls", sec.mode)

	errc := make(chan error, 3)
	var wg sync.WaitGroup
	if g.srv != nil {
		wg.Go(func() {
			if err := g.srv.Serve(g.lis); err != nil {
				errc <- fmt.Errorf("serve grpc: %w", err)
			}
		})
	}
	if peer.srv != nil {
		wg.Go(func() {
			if err := peer.srv.Serve(peer.lis); err != nil {
				errc <- fmt.Errorf("serve peer grpc: %w", err)
			}
		})
	}
	wg.Go(func() {
		var err error
		if hsrv.TLSConfig != nil {
			err = hsrv.ServeTLS(hlis, "", "") // the certificate is TLSConfig's
		} else {
			err = hsrv.Serve(hlis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve http: %w", err)
		}
	})
	healthDone := make(chan struct{})
	wg.Go(func() { g.followReadiness(ctx, healthDone, o.Ready, readyGauge) })

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	close(healthDone)
	g.health.Shutdown() // NOT_SERVING for every service, and it stays so
	log.Info("draining", "service", o.Name, "grace", o.GracePeriod)
	stopCtx, cancel := context.WithTimeout(context.Background(), o.GracePeriod)
	defer cancel()
	g.drain(stopCtx)
	// The peers' streams last as long as the members, so a graceful stop
	// would wait out the whole grace period: stopped at once instead (a
	// member that stops is what raft survives).
	if peer.srv != nil {
		peer.srv.Stop()
	}
	_ = hsrv.Shutdown(stopCtx)
	wg.Wait()
	return runErr
}

// grpcSide is the gRPC server of a service with its listener and health
// service; srv and lis are nil for a service without gRPC (the worker).
type grpcSide struct {
	srv    *grpc.Server
	lis    net.Listener
	health *health.Server
	svcs   []string
}

// security is what Options.TLS makes of the servers.
type security struct {
	mode     string // "off", "on" (no client certificates) or "mutual", for the serving line
	grpcOpts []grpc.ServerOption
	httpTLS  *tls.Config       // nil: plaintext
	authz    *authz.Authorizer // nil: every call allowed (no TLS, or no CA)
}

// newSecurity builds the servers' TLS configurations and, with a CA
// bundle, the authorizer.
func newSecurity(o Options, log *slog.Logger, reg *prometheus.Registry) (security, error) {
	if o.TLS == nil {
		return security{mode: "off"}, nil
	}
	creds, err := o.TLS.ServerCredentials(o.GRPCClientCerts)
	if err != nil {
		return security{}, err
	}
	httpTLS, err := o.TLS.ServerConfig(tlsfiles.VerifyClientCertIfGiven)
	if err != nil {
		return security{}, err
	}
	sec := security{mode: "on", grpcOpts: []grpc.ServerOption{grpc.Creds(creds)}, httpTLS: httpTLS}
	if o.TLS.Config().CAFile == "" {
		return sec, nil
	}
	sec.mode = "mutual"
	if sec.authz, err = authz.New(authz.Options{Policy: o.AuthzPolicy, Logger: log, Registerer: reg}); err != nil {
		return security{}, err
	}
	return sec, nil
}

// newLimiter returns the limiter of o.Limits, with the role bounds of the
// enforced policy when calls are authorized.
func newLimiter(o Options, sec security, reg *prometheus.Registry) (*limits.Limiter, error) {
	cfg := o.Limits
	if sec.authz != nil && cfg.RoleWaitingLeases == nil {
		cfg.RoleWaitingLeases = sec.authz.Policy().RoleWaitingLeases()
	}
	l, err := limits.New(cfg, reg)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return l, nil
}

// listenGRPC builds the gRPC server with every Baton interceptor, registers
// the service, health and reflection, and opens its listener.
func listenGRPC(o Options, log *slog.Logger, metrics *rpcmetrics.Metrics, sec security, lim *limits.Limiter) (*grpcSide, error) {
	g := &grpcSide{health: health.NewServer()}
	if o.GRPCAddr == "" {
		return g, nil
	}
	g.srv = newServer(o, log, metrics, sec, lim)
	if o.Register != nil {
		g.svcs = o.Register(g.srv)
	}
	healthpb.RegisterHealthServer(g.srv, g.health)
	reflection.Register(g.srv)
	metrics.Init(g.srv)
	lis, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen grpc %s: %w", o.GRPCAddr, err)
	}
	g.lis = lis
	return g, nil
}

// listenPeer builds and opens the peers' gRPC server of Options.PeerAddr,
// if there is one: the interceptors of the main one, no health or
// reflection (nothing but peers dials it).
func listenPeer(o Options, log *slog.Logger, metrics *rpcmetrics.Metrics, sec security, lim *limits.Limiter) (*grpcSide, error) {
	p := &grpcSide{health: health.NewServer()}
	if o.PeerAddr == "" {
		return p, nil
	}
	p.srv = newServer(o, log, metrics, sec, lim, grpc.MaxConcurrentStreams(PeerMaxConcurrentStreams))
	if o.RegisterPeer != nil {
		o.RegisterPeer(p.srv)
	}
	metrics.Init(p.srv)
	lis, err := net.Listen("tcp", o.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("listen peer grpc %s: %w", o.PeerAddr, err)
	}
	p.lis = lis
	return p, nil
}

func (g *grpcSide) addr() net.Addr {
	if g.lis == nil {
		return nil
	}
	return g.lis.Addr()
}

func (g *grpcSide) close() {
	if g.lis != nil {
		g.lis.Close()
	}
}

func (g *grpcSide) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	g.health.SetServingStatus("", st)
	for _, s := range g.svcs {
		g.health.SetServingStatus(s, st)
	}
}

// followReadiness sets health and gauge from readiness every second until
// ctx or done ends, so a load balancer stops sending work to a service whose
// store or upstream is gone (a health check that always says SERVING is
// worse than none); the gauge reads 0 once it returns (the service drains).
func (g *grpcSide) followReadiness(ctx context.Context, done <-chan struct{}, readyFn func(context.Context) error, gauge prometheus.Gauge) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	defer gauge.Set(0)
	for {
		if ready(ctx, readyFn) == nil {
			g.setHealth(healthpb.HealthCheckResponse_SERVING)
			gauge.Set(1)
		} else {
			g.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
			gauge.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
		}
	}
}

// drain lets calls in flight finish until ctx ends, then cuts the rest.
func (g *grpcSide) drain(ctx context.Context) {
	if g.srv == nil {
		return
	}
	done := make(chan struct{})
	go func() { g.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.srv.Stop()
		<-done
	}
}

// httpMux serves /metrics, /healthz, /readyz, pprof when asked for, and the
// service's own handlers.
func httpMux(o Options, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context(), o.Ready); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if o.Handle != nil {
		o.Handle(mux)
	}
	return mux
}

// serverOptions returns the options every Baton gRPC server uses: recovery
// (a panic becomes codes.Internal, never a crash), request logging, metrics,
// authorization when az is set, the limiter, message-size and stream
// limits and keepalive enforcement. A call authorization refuses is counted
// in the metrics and logged once, by the authorizer, not again as a failed
// call. The limiter runs after authorization (a refused call takes no
// place) and inside the request log, whose line for a call it refuses
// (RESOURCE_EXHAUSTED, at WARN) is that refusal's one log line.
// newServer is a gRPC server with every Baton interceptor and o's message
// bound, for the main listener and the peers' alike, with extra applied
// last (so overriding serverOptions').
func newServer(o Options, log *slog.Logger, metrics *rpcmetrics.Metrics, sec security, lim *limits.Limiter, extra ...grpc.ServerOption) *grpc.Server {
	maxRecv := o.MaxRecvBytes
	if maxRecv <= 0 {
		maxRecv = DefaultMaxRecvBytes
	}
	opts := append(serverOptions(log, metrics, maxRecv, sec.authz, lim), sec.grpcOpts...)
	return grpc.NewServer(append(opts, extra...)...)
}

func serverOptions(log *slog.Logger, metrics *rpcmetrics.Metrics, maxRecv int, az *authz.Authorizer, lim *limits.Limiter) []grpc.ServerOption {
	recover := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error: %v", p)
	})
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(callLevel),
	}
	unary := []grpc.UnaryServerInterceptor{metrics.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{metrics.StreamServerInterceptor()}
	if az != nil {
		unary = append(unary, az.UnaryServerInterceptor())
		stream = append(stream, az.StreamServerInterceptor())
	}
	unary = append(unary,
		logWritten(log, logging.UnaryServerInterceptor(logger, logOpts...)),
		lim.UnaryServerInterceptor(),
		recovery.UnaryServerInterceptor(recover))
	stream = append(stream,
		logging.StreamServerInterceptor(logger, logOpts...),
		lim.StreamServerInterceptor(),
		recovery.StreamServerInterceptor(recover))
	return []grpc.ServerOption{
		// Handlers run on reused goroutines whose stacks have already grown,
		// instead of a new goroutine per call that grows its stack again (a
		// tenth of a small call's CPU). Calls beyond the workers still get a
		// goroutine of their own.
		grpc.NumStreamWorkers(StreamWorkers),
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    30 * time.Second,
			Timeout: 10 * time.Second,
		}),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
}

// StreamWorkers is the number of goroutines kept to run calls (see
// grpc.NumStreamWorkers): enough for the 64 concurrent callers a busy queue
// sees, each blocked for a group commit.
const StreamWorkers = 64

// callLevel is the level of a finished call's log line. Successful calls log
// at debug: a busy queue answers tens of thousands of calls a second, and
// errors are what an operator looks for.
func callLevel(c codes.Code) logging.Level {
	switch c {
	case codes.OK, codes.Canceled, codes.DeadlineExceeded, codes.NotFound:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return logging.LevelError
	default:
		return logging.LevelWarn
	}
}

// logWritten runs the logging interceptor only for calls whose line will be
// written. The interceptor gathers its fields (peer address, start time,
// method) before the call, whether or not the line is ever written; on a
// small call that was a fifth of the server's CPU, spent on successful calls
// logged at a disabled debug level. So unless debug is enabled, the call runs
// first, and only a result whose level is enabled goes through the
// interceptor, replayed, with the call's real duration as grpc.time_ms (its
// grpc.start_time is then the call's end).
func logWritten(log *slog.Logger, inner grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if log.Enabled(ctx, slog.LevelDebug) {
			return inner(ctx, req, info, handler)
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		if !log.Enabled(ctx, slog.Level(callLevel(status.Code(err)))) {
			return resp, err
		}
		took := time.Since(start)
		ctx = logging.InjectFields(ctx, logging.Fields{"grpc.time_ms", fmt.Sprintf("%v", float32(took.Nanoseconds()/1000)/1000)})
		return inner(ctx, req, info, func(context.Context, any) (any, error) { return resp, err })
	}
}

func ready(ctx context.Context, f func(context.Context) error) error {
	if f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return f(ctx)
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
