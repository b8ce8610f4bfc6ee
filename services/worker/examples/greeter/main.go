// Command greeter is the complete example of docs/workers.md: a Baton
// controller for a resource of its own, written with the worker SDK.
//
// A Greeting (/registry/greetings/<namespace>/<name>) asks for a greeting:
//
//	{"kind": "Greeting", "metadata": {"name": "hi", "namespace": "default", "uid": "…", "generation": 1},
//	 "spec": {"name": "world"}}
//
// and the greeter's one invariant is that its status says hello to spec.name:
//
//	"status": {"message": "hello, world", "observedGeneration": 1}
//
// The greeter declares what it watches (For Greeting, Owns Pod): before it
// leases, the manager publishes that at /baton/rules/greetings in etcd, the
// observer announces every change under /registry/greetings/ to the
// "greetings" queue, and batonctl learns the kind (batonctl get greetings).
// No rules file is needed; see docs/workers.md.
//
// # Flags
//
// --queue-addr, --observer-addr and --etcd-endpoints say where the stack
// is (make run's defaults). Every flag can also be set as
// BATON_GREETER_<FLAG>, e.g. BATON_GREETER_TLS_CERT_FILE; a flag given on
// the command line wins.
//
// # Mutual TLS
//
// Against a stack that serves mutual TLS, the greeter presents a
// certificate with the worker role (--tls-cert-file, --tls-key-file) and
// verifies the queue and the observer against --tls-ca-file: the same
// flags as the Baton binaries (docs/security.md). Etcd takes etcdctl's
// flags, --etcd-cacert, --etcd-cert and --etcd-key (and --etcd-username
// with --etcd-password-file for an etcd with authentication on). The
// files are re-read when they change. Against `make run TLS=1`, whose
// certificates are under data/certs, from the repository's root:
//
//	go run ./services/worker/examples/greeter \
//		--tls-cert-file data/certs/worker.crt --tls-key-file data/certs/worker.key \
//		--tls-ca-file data/certs/ca.crt \
//		--etcd-endpoints https://127.0.0.1:2379 --etcd-cacert data/certs/ca.crt \
//		--etcd-cert data/certs/etcd-client.crt --etcd-key data/certs/etcd-client.key
//
// Without the certificates a TLS queue refuses the connection, and the
// greeter exits within 10 s with the refusal and the flags to give,
// instead of retrying in silence. A certificate without the worker role
// connects, and every Lease is refused with PERMISSION_DENIED, which the
// greeter logs as it retries.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/runtime/trust"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// GreetingKind is the Greeting's kind, its resource in etcd keys and the
// names batonctl accepts for it.
var GreetingKind = kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}}

// GreetingSpec is what the user asks for.
type GreetingSpec struct {
	Name string `json:"name"`
}

// GreetingStatus is what the greeter reports.
type GreetingStatus struct {
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
}

// Greeting is one object: kind, metadata, spec, status.
type Greeting = objects.Object[GreetingSpec, GreetingStatus]

// Greeter reconciles Greetings.
type Greeter struct {
	Objects *objects.Client
}

// Reconcile is level-based: it reads the current object, whatever change
// announced it, and makes the status true.
func (g *Greeter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := objects.SplitKey(req.Key)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err) // a malformed key never heals
	}
	key := GreetingKind.Key(ns, name)
	// Through the observer's cache, at least as new as this worker's writes.
	g1, _, err := objects.Get[Greeting](ctx, g.Objects, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // deleted: it owned nothing, nothing to clean up
	}
	if err != nil {
		return reconcile.Result{}, err // the queue retries with backoff
	}
	if g1.Spec.Name == "" {
		return reconcile.Result{}, reconcile.Terminal(errors.New("spec.name is empty"))
	}
	// A compare-and-swap on the stored object that re-reads and retries on a
	// conflict, and writes nothing when the status is already right (so the
	// write does not announce the key again for nothing).
	return reconcile.Result{}, g.Objects.UpdateStatus(ctx, key, g1.Metadata.UID, GreetingStatus{
		Message:            "hello, " + g1.Spec.Name,
		ObservedGeneration: g1.Metadata.Generation,
	})
}

// envPrefix is the prefix of the environment variables that mirror the
// flags, as the binaries' BATON_<SERVICE>_<FLAG>: --tls-cert-file is also
// BATON_GREETER_TLS_CERT_FILE.
const envPrefix = "BATON_GREETER"

// defaultQueueWait bounds how long the greeter waits at start for the
// queue to accept its connection.
const defaultQueueWait = 10 * time.Second

// config is what the greeter's flags say.
type config struct {
	QueueAddr, ObserverAddr string
	EtcdEndpoints           []string
	// TLS is the greeter's certificate, presented to the queue and the
	// observer, and the CA bundle that verifies them: the flags and the
	// files of every Baton binary (services/runtime/trust). Without them
	// the greeter dials plaintext.
	TLS trust.Config
	// Etcd is how it reaches etcd: https:// with --etcd-cacert,
	// --etcd-cert and --etcd-key, and a user (sdk/etcdconn).
	Etcd etcdconn.Config
	// QueueWait bounds the wait at start for the queue to accept the
	// connection (see awaitQueue); not a flag.
	QueueWait time.Duration
}

// parseFlags reads the flags from args and, for those not given, from
// the environment (lookup; os.LookupEnv when nil), and checks them.
func parseFlags(args []string, lookup func(string) (string, bool)) (config, error) {
	cfg := config{
		QueueAddr: "127.0.0.1:7070", ObserverAddr: "127.0.0.1:7071",
		EtcdEndpoints: []string{"http://127.0.0.1:2379"}, QueueWait: defaultQueueWait,
	}
	fs := flag.NewFlagSet("greeter", flag.ContinueOnError)
	fs.StringVar(&cfg.QueueAddr, "queue-addr", cfg.QueueAddr, "queue gRPC address (host:port, or a comma-separated list)")
	fs.StringVar(&cfg.ObserverAddr, "observer-addr", cfg.ObserverAddr, "observer gRPC address (host:port, or a comma-separated list)")
	flagenv.ListVar(fs, &cfg.EtcdEndpoints, "etcd-endpoints", "comma-separated etcd client URLs")
	cfg.Etcd.RegisterFlags(fs)
	// The certificate flags only: the greeter dials and serves nothing.
	cfg.TLS.RegisterClientFlags(fs)
	if err := flagenv.Parse(fs, envPrefix, args, lookup); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unknown argument %q", fs.Arg(0))
	}
	if err := cfg.TLS.Validate(); err != nil {
		return cfg, err
	}
	return cfg, cfg.Etcd.Validate(cfg.EtcdEndpoints)
}

func main() {
	cfg, err := parseFlags(os.Args[1:], nil)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(serve.SignalContext(), cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// One Source for both services: it re-reads the files when they
	// change, so a renewed certificate is used without a restart.
	tlsSrc, err := cfg.TLS.Load(log)
	if err != nil {
		return err
	}
	var queueOpts []queueclient.Option
	var observerOpts []observerclient.Option
	if tlsSrc != nil {
		queueOpts = append(queueOpts, queueclient.WithTLS(tlsSrc))
		observerOpts = append(observerOpts, observerclient.WithTLS(tlsSrc))
	}
	etcdCfg := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second}
	if err := cfg.Etcd.Apply(&etcdCfg, log); err != nil {
		return err
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

	objs := objects.NewClient(etcd, observer)
	// With etcd, the manager publishes the controllers' declarations
	// before it leases.
	m := manager.New(queue, manager.Options{Logger: log, Etcd: etcd})
	if err := m.Add(manager.Controller{
		Name: "greetings", Reconciler: &Greeter{Objects: objs}, Concurrency: 2,
		// What it watches: Greetings, and the pods that name one as owner
		// (a change of such a pod announces the Greeting's key).
		For: GreetingKind, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)},
	}); err != nil {
		return err
	}
	return m.Run(ctx) // until SIGTERM; then finishes what is in flight
}

// awaitQueue waits, up to cfg.QueueWait, until the queue answers its
// health check over the greeter's connection. The queue client retries a
// refused connection in silence until its call's context ends, and a TLS
// queue refuses a plaintext client or one without a certificate of its CA
// that way (UNAVAILABLE, as if it were down), so without this check a
// greeter started without its certificates would lease nothing and say
// nothing. It returns the last refusal instead, as the manager's bounded
// etcd retry does for etcd. The health service is open to every verified
// certificate: roles are the queue's to check, and a Lease it refuses
// (PERMISSION_DENIED, a certificate without the worker role) is logged by
// the manager at each retry. A cancelled ctx returns nil.
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
			if !cfg.TLS.Enabled() {
				hint = fmt.Sprintf(" (a queue serving mutual TLS, as make run TLS=1's does, needs --%s, --%s and --%s)",
					trust.FlagCertFile, trust.FlagKeyFile, trust.FlagCAFile)
			}
			return fmt.Errorf("the queue at %s did not accept the greeter within %s: %w%s", cfg.QueueAddr, cfg.QueueWait, err, hint)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
