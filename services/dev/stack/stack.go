// Package stack runs Baton's embedded development stack in one process:
// an etcd server (go.etcd.io/etcd/server/v3/embed), the queue, the observer
// and a worker with every reference controller, each serving its real gRPC
// and HTTP endpoints, wired to one another. It is what `make run` starts
// (through cmd/baton-dev) and what the end-to-end tests start on free ports.
//
//	cfg := stack.DefaultConfig()            // ./data, the default ports
//	cfg.OnReady = func(e stack.Endpoints) { fmt.Println(e.QueueGRPC) }
//	err := stack.Run(ctx, cfg, log)          // until ctx is cancelled
//
// The parts start in dependency order (etcd, queue, observer, worker), each
// once the one before it listens, and stop in the reverse order, so the
// worker hands back or acknowledges its leases while the queue still
// answers, and the queue flushes before etcd goes. State lives under
// DataDir (etcd in DataDir/etcd, the queue in DataDir/queue), so a restart
// picks up where the last run stopped.
//
// With Config.TLS every link is mutual TLS: the first start writes a
// deployment's certificates under DataDir/certs (client/certs, as batonctl
// certs init does), each part serves and dials with its own (the queue's,
// the observer's, the worker's), etcd serves https:// and requires client
// certificates, and Endpoints.BatonctlFlags are what batonctl needs to
// reach it as admin.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/services/etcdembed"
	observerservice "github.com/batonrun/baton/services/observer/service"
	queueservice "github.com/batonrun/baton/services/queue/service"
	"github.com/batonrun/baton/services/runtime/serve"
	workerservice "github.com/batonrun/baton/services/worker/service"
)

// Config configures the stack. Queue, Observer and Worker are each
// service's own configuration; the addresses that wire them together
// (etcd endpoints, queue and observer addresses, the queue's data dir) are
// filled in by Run.
type Config struct {
	// DataDir holds etcd's and the queue's data (default ./data).
	DataDir string
	// EtcdClientURL is where etcd listens for clients (port 0: a free port).
	EtcdClientURL string
	// UnsafeNoFsync turns off etcd's fsync, for tests.
	UnsafeNoFsync bool
	// TLS runs every part with mutual TLS (see the package doc); the
	// parts' own TLS settings are filled in.
	TLS bool
	// EtcdUsername and EtcdPasswordFile, if set, turn on the embedded
	// etcd's authentication with that user and the file's password
	// (etcdembed), and the parts log in as it.
	EtcdUsername, EtcdPasswordFile string
	// AuthzPolicy is the policy file the parts of a TLS stack enforce
	// instead of the default role table (--authz-policy).
	AuthzPolicy string
	Queue       queueservice.Config
	Observer    observerservice.Config
	Worker      workerservice.Config
	// OnReady, if set, is called once every part listens.
	OnReady func(Endpoints)
}

// DefaultConfig returns the stack on the default ports of docs/design.md, bound
// to 127.0.0.1 (a development stack has no business on other interfaces).
func DefaultConfig() Config {
	c := Config{
		DataDir:       "./data",
		EtcdClientURL: etcdembed.DefaultClientURL,
		Queue:         queueservice.DefaultConfig(),
		Observer:      observerservice.DefaultConfig(),
		Worker:        workerservice.DefaultConfig(),
	}
	c.Queue.GRPCAddr, c.Queue.HTTPAddr = "127.0.0.1:7070", "127.0.0.1:9090"
	c.Observer.GRPCAddr, c.Observer.HTTPAddr = "127.0.0.1:7071", "127.0.0.1:9091"
	c.Worker.HTTPAddr = "127.0.0.1:9092"
	return c
}

// FreePorts sets every listen address of c to a free loopback port, for
// tests and for running a second stack beside the default one.
func (c *Config) FreePorts() {
	c.EtcdClientURL = "http://127.0.0.1:0"
	c.Queue.GRPCAddr, c.Queue.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	c.Observer.GRPCAddr, c.Observer.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	c.Worker.HTTPAddr = "127.0.0.1:0"
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("--data-dir is empty")
	case c.EtcdClientURL == "":
		return errors.New("--etcd-client-url is empty")
	case !c.TLS && strings.HasPrefix(c.EtcdClientURL, "https://"):
		return fmt.Errorf("--etcd-client-url %s is https://, which needs --tls", c.EtcdClientURL)
	case (c.EtcdUsername == "") != (c.EtcdPasswordFile == ""):
		return errors.New("--etcd-username and --etcd-password-file go together")
	case c.AuthzPolicy != "" && !c.TLS:
		return errors.New("--authz-policy needs --tls: calls are authorized by the roles of client certificates")
	}
	return nil
}

// Endpoints are where the running parts answer.
type Endpoints struct {
	Etcd         string // client URL
	QueueGRPC    string // host:port
	QueueHTTP    string
	ObserverGRPC string
	ObserverHTTP string
	WorkerHTTP   string
	DataDir      string
	// Certs is the directory of a TLS stack's certificates; "" when the
	// stack is plaintext.
	Certs string
}

// String lists the endpoints for people, one part a line.
func (e Endpoints) String() string {
	var b strings.Builder
	web := "http"
	if e.Certs != "" {
		web = "https"
	}
	fmt.Fprintf(&b, "  etcd       %s\n", e.Etcd)
	fmt.Fprintf(&b, "  queue      grpc %s   %s://%s/metrics\n", e.QueueGRPC, web, e.QueueHTTP)
	fmt.Fprintf(&b, "  observer   grpc %s   %s://%s/metrics\n", e.ObserverGRPC, web, e.ObserverHTTP)
	fmt.Fprintf(&b, "  worker     %s://%s/metrics\n", web, e.WorkerHTTP)
	fmt.Fprintf(&b, "  dashboard  %s://%s/\n", web, e.QueueHTTP)
	fmt.Fprintf(&b, "  data       %s\n", e.DataDir)
	if e.Certs != "" {
		fmt.Fprintf(&b, "  certs      %s (mutual TLS on every link; admin.crt is yours)\n", e.Certs)
	}
	return b.String()
}

// part is one running service.
type part struct {
	name   string
	cancel context.CancelFunc
	done   chan error
}

// startTimeout bounds the wait for one part to listen.
const startTimeout = 60 * time.Second

// Run starts the stack and serves until ctx is cancelled or a part fails,
// then stops every part, newest first, and returns the first failure (nil
// after a clean stop).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var (
		parts  []*part
		failed = make(chan string, 4) // names of parts that stopped on their own
	)
	// stopAll stops the parts in reverse order and collects their errors.
	stopAll := func() error {
		var errs []error
		for i := len(parts) - 1; i >= 0; i-- {
			p := parts[i]
			p.cancel()
			if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			}
			log.Info("stopped", "part", p.name)
		}
		return errors.Join(errs...)
	}
	// start runs one service and waits until it listens (addrs delivered by
	// its OnListen) or fails.
	start := func(name string, run func(ctx context.Context) error, listening <-chan struct{}) error {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p := &part{name: name, cancel: cancel, done: make(chan error, 1)}
		var once sync.Once
		go func() {
			err := run(pctx)
			p.done <- err
			once.Do(func() {
				if pctx.Err() == nil {
					failed <- name
				}
			})
		}()
		parts = append(parts, p)
		timer := time.NewTimer(startTimeout)
		defer timer.Stop()
		select {
		case <-listening:
			return nil
		case err := <-p.done:
			parts = parts[:len(parts)-1] // already stopped: stopAll skips it
			if err == nil {
				err = errors.New("stopped at once")
			}
			return fmt.Errorf("start %s: %w", name, err)
		case <-timer.C:
			return fmt.Errorf("start %s: not listening after %s", name, startTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	// Certificates, and the parts' trust settings.
	ec := etcdembed.Config{
		Dir: filepath.Join(cfg.DataDir, "etcd"), ClientURL: cfg.EtcdClientURL,
		UnsafeNoFsync: cfg.UnsafeNoFsync,
	}
	qc, oc, wc := cfg.Queue, cfg.Observer, cfg.Worker
	var certsDir string
	if cfg.TLS {
		sc, err := ensureCerts(cfg.DataDir, []string{qc.GRPCAddr, qc.HTTPAddr, oc.GRPCAddr, oc.HTTPAddr, wc.HTTPAddr}, time.Now())
		if err != nil {
			return err
		}
		certsDir = sc.dir
		if ec.ClientURL, err = httpsURL(ec.ClientURL); err != nil {
			return err
		}
		ec.ClientTLS = sc.etcdServer()
		qc.TLS, oc.TLS, wc.TLS = sc.service("queue"), sc.service("observer"), sc.service("worker")
		qc.TLS.AuthzPolicy, oc.TLS.AuthzPolicy, wc.TLS.AuthzPolicy = cfg.AuthzPolicy, cfg.AuthzPolicy, cfg.AuthzPolicy
		oc.Etcd, wc.Etcd = sc.etcdClient(), sc.etcdClient()
		log.Info("mutual TLS", "certs", certsDir)
	}
	if cfg.EtcdUsername != "" {
		pw, err := etcdconn.ReadPassword(cfg.EtcdPasswordFile)
		if err != nil {
			return err
		}
		ec.AuthUser, ec.AuthPassword = cfg.EtcdUsername, pw
		oc.Etcd.Username, oc.Etcd.PasswordFile = cfg.EtcdUsername, cfg.EtcdPasswordFile
		wc.Etcd.Username, wc.Etcd.PasswordFile = cfg.EtcdUsername, cfg.EtcdPasswordFile
	}

	// etcd.
	var etcdStopping atomic.Bool
	ec.Logger = newEtcdLog(log, &etcdStopping)
	etcd, err := etcdembed.Start(ctx, ec)
	if err != nil {
		return err
	}
	defer func() {
		etcdStopping.Store(true)
		etcd.Close()
		log.Info("stopped", "part", "etcd")
	}()
	ep := Endpoints{Etcd: etcd.Endpoints()[0], DataDir: cfg.DataDir, Certs: certsDir}
	log.Info("started", "part", "etcd", "client", ep.Etcd, "dir", etcd.Dir())

	// The queue. Its dashboard shows the observer, which listens only
	// after the queue does: the address reaches it once known.
	qc.DataDir = filepath.Join(cfg.DataDir, "queue")
	var observerAddr atomic.Pointer[string]
	if qc.ObserverAddr == "" && qc.ObserverAddrFunc == nil {
		qc.ObserverAddrFunc = func() string {
			if a := observerAddr.Load(); a != nil {
				return *a
			}
			return ""
		}
	}
	qListening := make(chan struct{})
	qc.OnListen = func(g, h net.Addr) {
		ep.QueueGRPC, ep.QueueHTTP = serve.LocalAddr(g.String()), serve.LocalAddr(h.String())
		close(qListening)
	}
	if err := start("queue", func(ctx context.Context) error { return queueservice.Run(ctx, qc, log.With("part", "queue")) }, qListening); err != nil {
		return errors.Join(err, stopAll())
	}

	// The observer, announcing to the queue.
	oc.EtcdEndpoints, oc.QueueAddr = etcd.Endpoints(), ep.QueueGRPC
	oListening := make(chan struct{})
	oc.OnListen = func(g, h net.Addr) {
		ep.ObserverGRPC, ep.ObserverHTTP = serve.LocalAddr(g.String()), serve.LocalAddr(h.String())
		a := ep.ObserverGRPC
		observerAddr.Store(&a)
		close(oListening)
	}
	if err := start("observer", func(ctx context.Context) error { return observerservice.Run(ctx, oc, log.With("part", "observer")) }, oListening); err != nil {
		return errors.Join(err, stopAll())
	}

	// A worker with every reference controller.
	wc.EtcdEndpoints, wc.QueueAddr, wc.ObserverAddr = etcd.Endpoints(), ep.QueueGRPC, ep.ObserverGRPC
	wListening := make(chan struct{})
	wc.OnListen = func(h net.Addr) {
		ep.WorkerHTTP = serve.LocalAddr(h.String())
		close(wListening)
	}
	if err := start("worker", func(ctx context.Context) error { return workerservice.Run(ctx, wc, log.With("part", "worker")) }, wListening); err != nil {
		return errors.Join(err, stopAll())
	}

	if cfg.OnReady != nil {
		cfg.OnReady(ep)
	}
	var cause error
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case name := <-failed:
		cause = fmt.Errorf("%s stopped unexpectedly", name)
		log.Error("a part stopped; stopping the rest", "part", name)
	}
	return errors.Join(cause, stopAll())
}
