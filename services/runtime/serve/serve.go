// Package serve runs a Baton service's network side the same way in every
// binary: a gRPC server with panic recovery, slog logging and Prometheus
// metrics interceptors, explicit message-size and keepalive limits,
// grpc.health.v1 that follows the service's readiness, server reflection; and
// an HTTP server with /metrics, /healthz and /readyz. On cancellation it flips
// health to NOT_SERVING, drains with GracefulStop and falls back to Stop after
// the grace period (grpc-go's examples/features/gracefulstop).
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
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

// DefaultMaxRecvBytes bounds the requests a server accepts unless its
// Options say otherwise: etcd's default for its own requests (1.5 MiB).
// Larger ones get RESOURCE_EXHAUSTED from gRPC before any handler runs.
const DefaultMaxRecvBytes = 1536 << 10

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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	g, err := listenGRPC(o, log, reg)
	if err != nil {
		return err
	}
	g.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	hlis, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		g.close()
		return fmt.Errorf("listen http %s: %w", o.HTTPAddr, err)
	}
	hsrv := &http.Server{Handler: httpMux(o, reg), ReadHeaderTimeout: 10 * time.Second}
	if o.OnListen != nil {
		o.OnListen(g.addr(), hlis.Addr())
	}
	log.Info("serving", "service", o.Name, "grpc", addrString(g.addr()), "http", hlis.Addr().String())

	errc := make(chan error, 2)
	var wg sync.WaitGroup
	if g.srv != nil {
		wg.Go(func() {
			if err := g.srv.Serve(g.lis); err != nil {
				errc <- fmt.Errorf("serve grpc: %w", err)
			}
		})
	}
	wg.Go(func() {
		if err := hsrv.Serve(hlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve http: %w", err)
		}
	})
	healthDone := make(chan struct{})
	wg.Go(func() { g.followReadiness(ctx, healthDone, o.Ready) })

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

// listenGRPC builds the gRPC server with every Baton interceptor, registers
// the service, health and reflection, and opens its listener.
func listenGRPC(o Options, log *slog.Logger, reg *prometheus.Registry) (*grpcSide, error) {
	g := &grpcSide{health: health.NewServer()}
	if o.GRPCAddr == "" {
		return g, nil
	}
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(metrics)
	maxRecv := o.MaxRecvBytes
	if maxRecv <= 0 {
		maxRecv = DefaultMaxRecvBytes
	}
	g.srv = grpc.NewServer(serverOptions(log, metrics, maxRecv)...)
	if o.Register != nil {
		g.svcs = o.Register(g.srv)
	}
	healthpb.RegisterHealthServer(g.srv, g.health)
	reflection.Register(g.srv)
	metrics.InitializeMetrics(g.srv)
	lis, err := net.Listen("tcp", o.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen grpc %s: %w", o.GRPCAddr, err)
	}
	g.lis = lis
	return g, nil
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

// followReadiness sets health from readiness every second until ctx or done
// ends, so a load balancer stops sending work to a service whose store or
// upstream is gone (a health check that always says SERVING is worse than
// none).
func (g *grpcSide) followReadiness(ctx context.Context, done <-chan struct{}, readyFn func(context.Context) error) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if ready(ctx, readyFn) == nil {
			g.setHealth(healthpb.HealthCheckResponse_SERVING)
		} else {
			g.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
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
// message-size limits and keepalive enforcement.
func serverOptions(log *slog.Logger, metrics *grpcprom.ServerMetrics, maxRecv int) []grpc.ServerOption {
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
	return []grpc.ServerOption{
		// Handlers run on reused goroutines whose stacks have already grown,
		// instead of a new goroutine per call that grows its stack again (a
		// tenth of a small call's CPU). Calls beyond the workers still get a
		// goroutine of their own.
		grpc.NumStreamWorkers(StreamWorkers),
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             5 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    30 * time.Second,
			Timeout: 10 * time.Second,
		}),
		grpc.ChainUnaryInterceptor(
			metrics.UnaryServerInterceptor(),
			logWritten(log, logging.UnaryServerInterceptor(logger, logOpts...)),
			recovery.UnaryServerInterceptor(recover),
		),
		grpc.ChainStreamInterceptor(
			metrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(logger, logOpts...),
			recovery.StreamServerInterceptor(recover),
		),
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
