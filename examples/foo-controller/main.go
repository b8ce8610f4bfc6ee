// Command foo-controller is Kubernetes' sample-controller written with
// Baton's worker SDK: the second complete example of docs/workers.md, a
// module of its own that requires the SDK as any controller outside the
// repository does.
//
// A Foo (/registry/foos/<namespace>/<name>) asks for a Deployment:
//
//	{"kind": "Foo", "metadata": {"name": "example-foo", "namespace": "default", "uid": "…"},
//	 "spec": {"deploymentName": "example-foo", "replicas": 2}}
//
// and the controller keeps a Deployment of that name with that many
// replicas, which names the Foo as its controlling owner, and reports in
// the Foo's status how many of its pods run:
//
//	"status": {"availableReplicas": 2, "observedGeneration": 1}
//
// Before it leases, its manager publishes its declaration: the observer
// then announces every Foo, and the Foo of every Deployment that names one
// as owner, to the "foos" queue; batonctl learns the kind, its printer
// columns, and its schema, which every writer that knows it checks (a Foo
// with replicas "three" is refused before it is stored). The
// reference controllers of baton-worker do the rest: the Deployment's
// ReplicaSet and pods, and, when the Foo is deleted, the garbage
// collection of its Deployment.
//
// # Flags
//
// --queue-addr, --observer-addr and --etcd-endpoints say where the stack
// is (make run's defaults). Against a stack that serves mutual TLS it
// presents a certificate with the worker role (--tls-cert-file,
// --tls-key-file) and verifies the queue and the observer against
// --tls-ca-file; etcd takes etcdctl's flags (--etcd-cacert, --etcd-cert,
// --etcd-key). Every flag can also be set as BATON_FOO_<FLAG>, e.g.
// BATON_FOO_QUEUE_ADDR; a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// envPrefix prefixes the environment variables that mirror the flags:
// --queue-addr is also BATON_FOO_QUEUE_ADDR.
const envPrefix = "BATON_FOO"

// defaultQueueWait bounds how long the controller waits at start for the
// queue to accept its connection.
const defaultQueueWait = 10 * time.Second

// config is what the flags say.
type config struct {
	QueueAddr, ObserverAddr string
	EtcdEndpoints           []string
	// CertFile, KeyFile and CAFile are the certificate presented to the
	// queue and the observer and the CA bundle that verifies them.
	CertFile, KeyFile, CAFile string
	// EtcdCACert, EtcdCert and EtcdKey are the same for etcd.
	EtcdCACert, EtcdCert, EtcdKey string
	// Concurrency is how many Foos are reconciled at once.
	Concurrency int
	// QueueWait bounds the wait for the queue at start; not a flag.
	QueueWait time.Duration
}

// parseFlags reads the flags from args and, for those not given, from the
// environment (lookup; os.LookupEnv when nil), and checks them.
func parseFlags(args []string, lookup func(string) (string, bool)) (config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	cfg := config{QueueAddr: "127.0.0.1:7070", ObserverAddr: "127.0.0.1:7071", Concurrency: 4, QueueWait: defaultQueueWait}
	endpoints := "http://127.0.0.1:2379"
	fs := flag.NewFlagSet("foo-controller", flag.ContinueOnError)
	fs.StringVar(&cfg.QueueAddr, "queue-addr", cfg.QueueAddr, "queue gRPC address (host:port, or a comma-separated list)")
	fs.StringVar(&cfg.ObserverAddr, "observer-addr", cfg.ObserverAddr, "observer gRPC address (host:port, or a comma-separated list)")
	fs.StringVar(&endpoints, "etcd-endpoints", endpoints, "comma-separated etcd client URLs")
	fs.StringVar(&cfg.CertFile, "tls-cert-file", "", "certificate (PEM) presented to the queue and the observer")
	fs.StringVar(&cfg.KeyFile, "tls-key-file", "", "the key of --tls-cert-file (PEM)")
	fs.StringVar(&cfg.CAFile, "tls-ca-file", "", "CA bundle (PEM) that verifies the queue and the observer")
	fs.StringVar(&cfg.EtcdCACert, "etcd-cacert", "", "CA bundle (PEM) that verifies etcd (https:// endpoints)")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", "", "client certificate (PEM) presented to etcd")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", "", "the key of --etcd-cert (PEM)")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "Foos reconciled at once")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unknown argument %q", fs.Arg(0))
	}
	if err := fromEnv(fs, lookup); err != nil {
		return cfg, err
	}
	cfg.EtcdEndpoints = strings.Split(endpoints, ",")
	return cfg, cfg.check()
}

// fromEnv sets each flag not given on the command line from its
// BATON_FOO_<FLAG> variable, if set.
func fromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(name); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// check names the first flag that cannot work.
func (c config) check() error {
	switch {
	case c.QueueAddr == "" || c.ObserverAddr == "":
		return errors.New("--queue-addr and --observer-addr are required")
	case (c.CertFile == "") != (c.KeyFile == ""):
		return errors.New("--tls-cert-file and --tls-key-file go together")
	case (c.EtcdCert == "") != (c.EtcdKey == ""):
		return errors.New("--etcd-cert and --etcd-key go together")
	case c.Concurrency < 1:
		return fmt.Errorf("--concurrency %d: at least 1", c.Concurrency)
	}
	for _, ep := range c.EtcdEndpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL", ep)
		}
		if c.etcdTLS() && u.Scheme != "https" {
			return fmt.Errorf("--etcd-endpoints %s is not https://, but --etcd-cacert, --etcd-cert or --etcd-key is set", ep)
		}
	}
	return nil
}

func (c config) tls() bool     { return c.CertFile != "" || c.CAFile != "" }
func (c config) etcdTLS() bool { return c.EtcdCACert != "" || c.EtcdCert != "" }

func main() {
	cfg, err := parseFlags(os.Args[1:], nil)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "foo-controller:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "foo-controller:", err)
		os.Exit(1)
	}
}

// run connects to the stack, declares the Foo and reconciles Foos until
// ctx ends; then it finishes what is in flight.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var queueOpts []queueclient.Option
	var observerOpts []observerclient.Option
	if cfg.tls() {
		// One Source for both: it re-reads the files when they change,
		// so a renewed certificate is used without a restart.
		src, err := tlsfiles.Load(tlsfiles.Config{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CAFile: cfg.CAFile, Logger: log})
		if err != nil {
			return err
		}
		queueOpts = append(queueOpts, queueclient.WithTLS(src))
		observerOpts = append(observerOpts, observerclient.WithTLS(src))
	}
	etcdCfg := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second}
	if cfg.etcdTLS() {
		src, err := tlsfiles.Load(tlsfiles.Config{CertFile: cfg.EtcdCert, KeyFile: cfg.EtcdKey, CAFile: cfg.EtcdCACert, Logger: log})
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		// These credentials check each member's certificate against the
		// host of its endpoint, which clientv3's fixed tls.Config cannot
		// for an IP address; its dial options come after its own, so they
		// win.
		etcdCfg.DialOptions = append(etcdCfg.DialOptions, grpc.WithTransportCredentials(src.ClientCredentials("")))
	}
	etcd, err := clientv3.New(etcdCfg)
	if err != nil {
		return err
	}
	defer etcd.Close()
	observer, err := observerclient.Dial(cfg.ObserverAddr, observerOpts...)
	if err != nil {
		return err
	}
	defer observer.Close()
	queue, err := queueclient.Dial(cfg.QueueAddr, queueOpts...)
	if err != nil {
		return err
	}
	defer queue.Close()
	if err := awaitQueue(ctx, queue, cfg); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped while waiting
	}

	// Events are written in the background, never blocking a reconcile.
	// The recorder outlives the manager, so that the events of the last
	// reconciles are written before etcd's client closes.
	rec, err := events.NewRecorder(etcd, events.Options{Component: "foo-controller", Logger: log})
	if err != nil {
		return err
	}
	recCtx, stopRec := context.WithCancel(context.Background())
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		if err := rec.Run(recCtx); err != nil && recCtx.Err() == nil {
			log.Error("events stopped", "err", err)
		}
	}()
	defer func() { stopRec(); <-recDone }()

	// With etcd, the manager publishes the controller's declaration, the
	// Foo's schema and columns with it, before it leases.
	m := manager.New(queue, manager.Options{Logger: log, Etcd: etcd})
	if err := m.Add(Controller(&Reconciler{Objects: objects.NewClient(etcd, observer), Events: rec}, cfg.Concurrency)); err != nil {
		return err
	}
	return m.Run(ctx) // until SIGTERM; then finishes what is in flight
}

// awaitQueue waits, up to cfg.QueueWait, until the queue answers its
// health check over the controller's connection. A queue that serves
// mutual TLS refuses a client without a certificate of its CA as if it
// were down, and the client retries that in silence: without this check
// a controller started without its certificates would lease nothing and
// say nothing. A cancelled ctx returns nil.
func awaitQueue(ctx context.Context, queue *queueclient.Client, cfg config) error {
	wctx, cancel := context.WithTimeout(ctx, cfg.QueueWait)
	defer cancel()
	pause := 50 * time.Millisecond
	for {
		err := queue.Healthy(wctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wctx.Done():
			hint := ""
			if !cfg.tls() {
				hint = " (a queue serving mutual TLS needs --tls-cert-file, --tls-key-file and --tls-ca-file)"
			}
			return fmt.Errorf("the queue at %s did not accept the controller within %s: %w%s", cfg.QueueAddr, cfg.QueueWait, err, hint)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
