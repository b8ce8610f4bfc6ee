package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/batonrun/baton/client/kinds"
	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/rules"
	"github.com/batonrun/baton/services/observer/internal/server"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/runtime/trust"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config is baton-observer's configuration; the flags the design
// (docs/design.md) lists map onto it.
type Config struct {
	GRPCAddr      string
	HTTPAddr      string
	EtcdEndpoints []string
	// Etcd is etcd's TLS and authentication (--etcd-cacert …).
	Etcd      etcdconn.Config
	QueueAddr string
	// RulesFile is a YAML rules file; empty means the built-in rules.
	// Either way the controllers' declarations in etcd add to them.
	RulesFile string
	// Resync, if positive, re-announces every cached object at
	// PRIORITY_LOW this often.
	Resync time.Duration
	// GracePeriod bounds the drain on SIGTERM.
	GracePeriod time.Duration
	// ProgressInterval is how often the observer asks etcd for watch
	// progress notifications, which advance the observed revision of idle
	// prefixes (etcd's own periodic ones come only every 10 minutes by
	// default).
	ProgressInterval time.Duration
	// RecordInterval is the least time between two writes of the
	// known-key record (longer for a large one: package checkpoint).
	RecordInterval time.Duration
	// EnablePprof serves /debug/pprof/ on the HTTP address.
	EnablePprof bool
	// TLS is the observer's certificate: served, and presented to the
	// queue, whose certificate it verifies against the CA; or --insecure
	// (docs/security.md).
	TLS trust.Config
	// Rules, if set, are used instead of RulesFile and the built-in rules
	// (for embedding; there is no flag).
	Rules []rules.Rule
	// OnListen, if set, learns the bound addresses (tests listen on :0).
	OnListen func(grpcAddr, httpAddr net.Addr)
}

// DefaultConfig returns the design's defaults (docs/design.md).
func DefaultConfig() Config {
	return Config{
		GRPCAddr: ":7071", HTTPAddr: ":9091",
		EtcdEndpoints: []string{"http://127.0.0.1:2379"}, QueueAddr: "127.0.0.1:7070",
		GracePeriod: 10 * time.Second, ProgressInterval: time.Second, RecordInterval: 5 * time.Second,
	}
}

// RegisterFlags binds the configuration to fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address (ObserverService)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address for /metrics, /healthz, /readyz")
	flagenv.ListVar(fs, &c.EtcdEndpoints, "etcd-endpoints", "comma-separated etcd client URLs")
	c.Etcd.RegisterFlags(fs)
	fs.StringVar(&c.QueueAddr, "queue-addr", c.QueueAddr, "baton-queue gRPC address")
	fs.StringVar(&c.RulesFile, "rules", c.RulesFile, "YAML rules file (default: the built-in rules of the reference controllers and the garbage collector)")
	fs.DurationVar(&c.Resync, "resync", c.Resync, "re-announce every object at low priority this often (0 = off)")
	fs.DurationVar(&c.GracePeriod, "grace-period", c.GracePeriod, "how long SIGTERM waits for calls in flight")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve /debug/pprof/ on the HTTP address")
	c.TLS.RegisterFlags(fs)
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.GRPCAddr == "":
		return errors.New("--grpc-addr is empty")
	case c.HTTPAddr == "":
		return errors.New("--http-addr is empty")
	case len(c.EtcdEndpoints) == 0:
		return errors.New("--etcd-endpoints is empty")
	case c.QueueAddr == "":
		return errors.New("--queue-addr is empty")
	case c.Resync < 0:
		return fmt.Errorf("--resync must be 0 or more, not %v", c.Resync)
	case c.GracePeriod < 0:
		return fmt.Errorf("--grace-period must be 0 or more, not %v", c.GracePeriod)
	case c.ProgressInterval <= 0:
		return fmt.Errorf("ProgressInterval must be positive, not %v", c.ProgressInterval)
	case c.RecordInterval <= 0:
		return fmt.Errorf("RecordInterval must be positive, not %v", c.RecordInterval)
	}
	if err := c.Etcd.Validate(c.EtcdEndpoints); err != nil {
		return err
	}
	return c.TLS.ValidateServe()
}

// LoadRules returns the configured rules Run would use: cfg.Rules, else
// the file, else the built-in rules; and warnings about the file. The
// controllers' declarations in etcd add to them while Run runs.
func LoadRules(cfg Config) ([]rules.Rule, []string, error) {
	rs, warnings, err := loadRules(cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rs {
		if strings.HasPrefix(checkpoint.Root, r.Prefix) || strings.HasPrefix(r.Prefix, checkpoint.Root) {
			return nil, nil, fmt.Errorf("rules: prefix %s would watch the observer's own keys under %s (its checkpoint and known-key record)", r.Prefix, checkpoint.Root)
		}
		if strings.HasPrefix(kinds.DeclarationPrefix, r.Prefix) || strings.HasPrefix(r.Prefix, kinds.DeclarationPrefix) {
			return nil, nil, fmt.Errorf("rules: prefix %s would watch the controllers' declarations under %s, which the observer watches itself", r.Prefix, kinds.DeclarationPrefix)
		}
	}
	return rs, warnings, nil
}

func loadRules(cfg Config) ([]rules.Rule, []string, error) {
	switch {
	case len(cfg.Rules) > 0:
		if err := rules.Validate(cfg.Rules); err != nil {
			return nil, nil, fmt.Errorf("rules: %w", err)
		}
		return cfg.Rules, nil, nil
	case cfg.RulesFile != "":
		data, err := os.ReadFile(cfg.RulesFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--rules: %w", err)
		}
		rs, warnings, err := rules.Parse(cfg.RulesFile, data)
		if err != nil {
			return nil, nil, fmt.Errorf("--rules: %w", err)
		}
		return rs, warnings, nil
	default:
		return rules.Builtin(), nil, nil
	}
}

// Run watches etcd and serves until ctx is cancelled, then flushes the
// outboxes (bounded) and returns nil. It returns an error at once for a bad
// configuration or rules file, or if a listener cannot be opened.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rs, warnings, err := LoadRules(cfg)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn("rules", "warning", w)
	}
	tlsSrc, err := cfg.TLS.Load(log)
	if err != nil {
		return err
	}
	policy, err := cfg.TLS.Policy()
	if err != nil {
		return err
	}

	etcdCfg := clientv3.Config{
		Endpoints:            cfg.EtcdEndpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		PermitWithoutStream:  true,
		DialOptions:          []grpc.DialOption{grpc.WithConnectParams(etcdConnectParams)},
		// clientv3 logs every reconnect at length; the informers log what
		// matters (watch breaks, relists) themselves.
		Logger: zap.NewNop(),
	}
	if err := cfg.Etcd.Apply(&etcdCfg, log); err != nil {
		return err
	}
	etcd, err := clientv3.New(etcdCfg)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()
	queueOpts := []queueclient.Option{queueclient.WithBackoff(queueclient.Backoff{Attempts: 1})}
	if tlsSrc != nil {
		queueOpts = append(queueOpts, queueclient.WithTLS(tlsSrc))
	}
	queue, err := queueclient.Dial(cfg.QueueAddr, queueOpts...)
	if err != nil {
		return err
	}
	defer queue.Close()

	o := newObserver(etcd, queue, rs, cfg.RecordInterval, log)
	reg := prometheus.NewRegistry()
	if err := o.metrics.register(reg); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	log.Info("observer starting", "etcd", cfg.EtcdEndpoints, "queue", cfg.QueueAddr, "prefixes", rules.Prefixes(rs), "queues", rules.Queues(rs))

	var wg sync.WaitGroup
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	wg.Go(func() { o.run(workCtx) })
	outboxDone := make(chan struct{})
	go func() {
		defer close(outboxDone)
		o.outbox.Run(workCtx)
	}()
	wg.Go(func() { o.tick(workCtx, cfg.ProgressInterval, cfg.Resync) })
	wg.Go(func() { newEtcdMonitor(etcd, cfg.EtcdEndpoints, log).run(workCtx) })

	err = serve.Run(ctx, serve.Options{
		Name: "baton-observer", GRPCAddr: cfg.GRPCAddr, HTTPAddr: cfg.HTTPAddr,
		Register: func(s *grpc.Server) []string {
			observerv1.RegisterObserverServiceServer(s, server.New(o.cache, o))
			return []string{observerv1.ObserverService_ServiceDesc.ServiceName}
		},
		Ready:       o.ready,
		Registry:    reg,
		GracePeriod: cfg.GracePeriod,
		Pprof:       cfg.EnablePprof,
		Logger:      log,
		OnListen:    cfg.OnListen,
		TLS:         tlsSrc,
		AuthzPolicy: policy,
		Insecure:    cfg.TLS.Insecure,
	})
	// Watches stop only after the gRPC server has drained, so reads in
	// flight (waiting on min_revision) can still be answered; then the
	// outboxes get their last, bounded delivery.
	stopWork()
	wg.Wait()
	<-outboxDone
	log.Info("observer stopped", "outbox_left", o.outbox.Len())
	return err
}
