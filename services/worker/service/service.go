// Package service runs baton-worker: the reference controllers (or a chosen
// subset) leasing from the queue, reading through the observer's cache and
// writing to etcd, with /metrics, /healthz and /readyz over HTTP. The worker
// serves no gRPC: it is a client of the queue, the observer and etcd. Before
// it leases, it publishes what each of its controllers watches (client/kinds'
// built-in declarations, at /baton/rules/<queue>); the garbage collector
// declares nothing (the observer feeds its one queue every kind in force,
// package garbagecollector). Whatever the kinds declared, it holds one work
// stream per controller on its one connection to the queue, six with
// --controllers=all, far below the queue's limits of waiting Leases per
// connection and per identity. The baton-worker binary and the embedded dev
// stack both call Run.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	observerclient "github.com/batonrun/baton/client/observer"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/runtime/trust"
	"github.com/batonrun/baton/services/worker/controllers"
	"github.com/batonrun/baton/services/worker/garbagecollector"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Config is baton-worker's configuration; the flags of the design
// (docs/design.md) map onto it.
type Config struct {
	HTTPAddr string
	// QueueAddr is the queue's gRPC address (host:port).
	QueueAddr string
	// ObserverAddr is the observer's gRPC address; empty means read etcd
	// directly.
	ObserverAddr string
	// EtcdEndpoints are etcd's client URLs (the flag takes them
	// comma-separated).
	EtcdEndpoints []string
	// Etcd is etcd's TLS and authentication (--etcd-cacert …).
	Etcd etcdconn.Config
	// Controllers is "all" or a comma-separated list of controller names.
	Controllers string
	// Concurrency is the number of keys each controller reconciles at once.
	Concurrency int
	// LeaseDuration is the lease each key is held with (and extended by).
	LeaseDuration time.Duration
	// ReconcileTimeout bounds one reconcile.
	ReconcileTimeout time.Duration
	// GracePeriod bounds the wait for reconciles in flight on shutdown.
	GracePeriod time.Duration
	// CallTimeout bounds each etcd or observer call of a reconcile.
	CallTimeout time.Duration
	// Worker names this process to the queue; empty means hostname-pid.
	Worker string
	// EnablePprof serves /debug/pprof/ on the HTTP address.
	EnablePprof bool
	// TLS is the worker's certificate: presented to the queue and the
	// observer, whose certificates it verifies against the CA, and served
	// on its HTTP address; or --insecure (docs/security.md).
	TLS trust.Config
	// OnListen, if set, learns the bound HTTP address (tests listen on :0).
	OnListen func(httpAddr net.Addr)
	// Wrap, if set, wraps every controller's reconciler (tests use it to
	// observe or disturb reconciles).
	Wrap func(controller string, r manager.Controller) manager.Controller
}

// DefaultConfig returns the defaults of the design (docs/design.md).
func DefaultConfig() Config {
	return Config{
		HTTPAddr: ":9092", QueueAddr: "127.0.0.1:7070", ObserverAddr: "127.0.0.1:7071",
		EtcdEndpoints: []string{"http://127.0.0.1:2379"}, Controllers: "all", Concurrency: 16,
		LeaseDuration: limits.DefaultLease, ReconcileTimeout: manager.DefaultReconcileTimeout, GracePeriod: 10 * time.Second,
		CallTimeout: objects.DefaultOpTimeout,
	}
}

// RegisterFlags binds the configuration to fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address for /metrics, /healthz, /readyz")
	fs.StringVar(&c.QueueAddr, "queue-addr", c.QueueAddr, "queue gRPC address")
	fs.StringVar(&c.ObserverAddr, "observer-addr", c.ObserverAddr, "observer gRPC address (empty: read etcd directly)")
	flagenv.ListVar(fs, &c.EtcdEndpoints, "etcd-endpoints", "comma-separated etcd client URLs")
	c.Etcd.RegisterFlags(fs)
	fs.StringVar(&c.Controllers, "controllers", c.Controllers, "all, or a comma-separated list of "+strings.Join(controllers.Names, ","))
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "keys reconciled at once, per controller")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", c.LeaseDuration, "lease asked for each key, extended while it is reconciled")
	fs.DurationVar(&c.ReconcileTimeout, "reconcile-timeout", c.ReconcileTimeout, "longest one reconcile may take")
	fs.DurationVar(&c.GracePeriod, "grace-period", c.GracePeriod, "how long SIGTERM waits for reconciles in flight")
	fs.DurationVar(&c.CallTimeout, "call-timeout", c.CallTimeout, "longest one etcd or observer call may take before the reconcile fails and is retried")
	fs.StringVar(&c.Worker, "worker", c.Worker, "name shown as the lease holder (default hostname-pid)")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve /debug/pprof/ on the HTTP address")
	c.TLS.RegisterFlags(fs)
}

// ControllerNames resolves Controllers.
func (c Config) ControllerNames() ([]string, error) {
	if strings.TrimSpace(c.Controllers) == "all" {
		return controllers.Names, nil
	}
	var out []string
	for n := range strings.SplitSeq(c.Controllers, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(controllers.Names, n) {
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: all, %s)", n, strings.Join(controllers.Names, ", "))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--controllers is empty")
	}
	return out, nil
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.HTTPAddr == "":
		return errors.New("--http-addr is empty")
	case c.QueueAddr == "":
		return errors.New("--queue-addr is empty")
	case len(c.EtcdEndpoints) == 0:
		return errors.New("--etcd-endpoints is empty")
	case c.Concurrency <= 0:
		return fmt.Errorf("--concurrency must be positive, not %d", c.Concurrency)
	case c.LeaseDuration < 100*time.Millisecond || c.LeaseDuration > 10*time.Minute:
		return fmt.Errorf("--lease-duration must be in [100ms, 10m], not %v", c.LeaseDuration)
	case c.ReconcileTimeout <= 0:
		return fmt.Errorf("--reconcile-timeout must be positive, not %v", c.ReconcileTimeout)
	case c.CallTimeout <= 0:
		return fmt.Errorf("--call-timeout must be positive, not %v", c.CallTimeout)
	case c.GracePeriod < 0:
		return fmt.Errorf("--grace-period must not be negative, not %v", c.GracePeriod)
	}
	if _, err := c.ControllerNames(); err != nil {
		return err
	}
	if err := c.Etcd.Validate(c.EtcdEndpoints); err != nil {
		return err
	}
	return c.TLS.ValidateServe()
}

// Run connects to etcd, the queue and the observer and runs the controllers
// until ctx is cancelled; then it stops leasing, lets reconciles in flight
// finish within the grace period and returns nil.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	names, _ := cfg.ControllerNames()
	tlsSrc, err := cfg.TLS.Load(log)
	if err != nil {
		return err
	}
	policy, err := cfg.TLS.Policy()
	if err != nil {
		return err
	}
	var queueOpts []queueclient.Option
	var observerOpts []observerclient.Option
	if tlsSrc != nil {
		queueOpts = append(queueOpts, queueclient.WithTLS(tlsSrc))
		observerOpts = append(observerOpts, observerclient.WithTLS(tlsSrc))
	}

	etcdCfg := clientv3.Config{
		Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(),
		// gRPC's default reconnect backoff grows to 2 minutes; a worker
		// should be back within seconds of etcd.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		})},
	}
	if err := cfg.Etcd.Apply(&etcdCfg, log); err != nil {
		return err
	}
	etcd, err := clientv3.New(etcdCfg)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()

	queue, err := queueclient.Dial(cfg.QueueAddr, queueOpts...)
	if err != nil {
		return err
	}
	defer queue.Close()

	var observer *observerclient.Client
	if cfg.ObserverAddr != "" {
		if observer, err = observerclient.Dial(cfg.ObserverAddr, observerOpts...); err != nil {
			return err
		}
		defer observer.Close()
	}

	reg := prometheus.NewRegistry()
	objs := objects.NewClient(etcd, observer)
	objs.SetOpTimeout(cfg.CallTimeout)
	registerReads(reg, objs)
	// What the controllers do to their objects, recorded as Events with
	// the worker's etcd client (its TLS and credentials); each controller
	// records as its own component (controllers.Component).
	rec, err := events.NewRecorder(etcd, events.Options{Component: "baton-worker", Logger: log, Registerer: reg, OpTimeout: cfg.CallTimeout})
	if err != nil {
		return err
	}
	// The manager publishes what each controller watches (its declaration
	// in client/kinds) before it leases, and runs the recorder.
	m := manager.New(queue, manager.Options{Worker: cfg.Worker, GracePeriod: cfg.GracePeriod, Logger: log, Registerer: reg, Etcd: etcd, Events: rec})
	var gc *garbagecollector.Collector
	for _, n := range names {
		c := manager.Controller{Name: n, Concurrency: cfg.Concurrency, LeaseDuration: cfg.LeaseDuration, ReconcileTimeout: cfg.ReconcileTimeout}
		if n == controllers.GarbageCollectorName {
			// One controller for every kind, on the queue the observer
			// feeds; it declares nothing.
			o := garbagecollector.Options{Objects: objs, Log: log.With("controller", n), Etcd: etcd}
			if observer != nil {
				o.Kinds = garbagecollector.ObserverKinds(observer)
			} else {
				log.Info("without an observer the garbage collector knows the reference kinds alone (it learns the declared ones from the observer's Status)")
			}
			if gc, err = garbagecollector.New(o); err != nil {
				return err
			}
			c.Reconciler = gc
		} else {
			r, err := controllers.New(n, controllers.Deps{Objects: objs, Log: log.With("controller", n), Events: rec})
			if err != nil {
				return err
			}
			decl, err := controllers.Declaration(n)
			if err != nil {
				return err
			}
			c.Reconciler, c.For, c.Owns, c.IgnoreOwnStatus = r, decl.For, decl.Owns, decl.IgnoreOwnStatus
			c.Schema, c.PrinterColumns = decl.Schema, decl.PrinterColumns
		}
		if cfg.Wrap != nil {
			c = cfg.Wrap(n, c)
		}
		if err := m.Add(c); err != nil {
			return err
		}
	}

	ready := func(ctx context.Context) error {
		if err := queue.Healthy(ctx); err != nil {
			return err
		}
		if _, err := etcd.Get(ctx, "health"); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		return nil
	}

	log.Info("starting controllers", "controllers", names, "concurrency", cfg.Concurrency)
	var wg sync.WaitGroup
	var serveErr, runErr error
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	wg.Go(func() {
		serveErr = serve.Run(sctx, serve.Options{
			Name: "baton-worker", HTTPAddr: cfg.HTTPAddr, Ready: ready, Registry: reg,
			GracePeriod: cfg.GracePeriod, Pprof: cfg.EnablePprof, Logger: log,
			TLS: tlsSrc, AuthzPolicy: policy, Insecure: cfg.TLS.Insecure,
			OnListen: func(_, h net.Addr) {
				if cfg.OnListen != nil {
					cfg.OnListen(h)
				}
			},
		})
		if serveErr != nil {
			stopServe()
		}
	})
	if gc != nil {
		wg.Go(func() { _ = gc.Run(sctx) })
	}
	runErr = m.Run(sctx)
	stopServe()
	wg.Wait()
	return errors.Join(serveErr, runErr)
}

// ReadsMetric counts the controllers' reads of objects, by source: "etcd"
// (linearizable reads of etcd itself: confirming that an owner is gone
// before its children are deleted, re-reading after a write conflict, and
// every read when no observer is configured) or "cache" (the observer's).
const ReadsMetric = "baton_worker_store_reads_total"

func registerReads(reg prometheus.Registerer, st *objects.Client) {
	for _, src := range []string{"etcd", "cache"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        ReadsMetric,
			Help:        "Reads of objects by the reference controllers, by source: etcd itself, or the observer's cache.",
			ConstLabels: prometheus.Labels{"source": src},
		}, func() float64 {
			r := st.Reads()
			if src == "etcd" {
				return float64(r.Etcd)
			}
			return float64(r.Cache)
		}))
	}
}
