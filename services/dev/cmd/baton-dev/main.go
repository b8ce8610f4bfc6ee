// Command baton-dev runs Baton's embedded development stack in one process:
// etcd (embedded), the queue, the observer and a worker with every reference
// controller, on the default ports, with state under --data-dir. It prints
// the endpoints when ready; Ctrl-C stops it cleanly, and starting it again
// keeps the state. `make run` builds and starts it.
//
// With --tls (`make run TLS=1`) every link is mutual TLS, with
// certificates it makes under --data-dir/certs on its first start, and it
// prints the batonctl flags that reach it as admin.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/batonrun/baton/services/dev/stack"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	cfg := stack.DefaultConfig()
	fs := flag.NewFlagSet("baton-dev", flag.ContinueOnError)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for etcd's data (data-dir/etcd) and the queue's (data-dir/queue)")
	fs.StringVar(&cfg.EtcdClientURL, "etcd-client-url", cfg.EtcdClientURL, "where the embedded etcd listens for clients")
	fs.StringVar(&cfg.Queue.GRPCAddr, "queue-grpc-addr", cfg.Queue.GRPCAddr, "the queue's gRPC listen address")
	fs.StringVar(&cfg.Queue.HTTPAddr, "queue-http-addr", cfg.Queue.HTTPAddr, "the queue's HTTP listen address (metrics, dashboard)")
	fs.StringVar(&cfg.Observer.GRPCAddr, "observer-grpc-addr", cfg.Observer.GRPCAddr, "the observer's gRPC listen address")
	fs.StringVar(&cfg.Observer.HTTPAddr, "observer-http-addr", cfg.Observer.HTTPAddr, "the observer's HTTP listen address")
	fs.StringVar(&cfg.Worker.HTTPAddr, "worker-http-addr", cfg.Worker.HTTPAddr, "the worker's HTTP listen address")
	fs.StringVar(&cfg.Worker.Controllers, "controllers", cfg.Worker.Controllers, "the worker's controllers: all, or a comma-separated list")
	fs.IntVar(&cfg.Worker.Concurrency, "concurrency", cfg.Worker.Concurrency, "keys reconciled at once, per controller")
	fs.IntVar(&cfg.Queue.MaxAttempts, "max-attempts", cfg.Queue.MaxAttempts, "park a key after this many failures (0 = never)")
	fs.DurationVar(&cfg.Observer.Resync, "resync", cfg.Observer.Resync, "re-announce every object this often (0 = off)")
	fs.StringVar(&cfg.Observer.RulesFile, "rules", cfg.Observer.RulesFile, "the observer's YAML rules file (default: the built-in rules of the reference controllers; `builtin: true` in the file keeps them)")
	fs.BoolVar(&cfg.TLS, "tls", cfg.TLS, "mutual TLS on every link, etcd's included, with certificates made under --data-dir/certs on the first start")
	fs.StringVar(&cfg.AuthzPolicy, "authz-policy", cfg.AuthzPolicy, "with --tls, a YAML policy file replacing the default role table")
	fs.StringVar(&cfg.EtcdUsername, "etcd-username", cfg.EtcdUsername, "turn on the embedded etcd's authentication with this user (the root role), as whom the parts log in")
	fs.StringVar(&cfg.EtcdPasswordFile, "etcd-password-file", cfg.EtcdPasswordFile, "the file holding --etcd-username's password")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, "BATON_DEV", args, nil); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "baton-dev:", err)
		return 2
	}
	if fs.NArg() > 0 {
		// Serving anyway would hide a misspelt flag behind a running stack.
		fmt.Fprintf(os.Stderr, "baton-dev: unknown argument %q\nusage: baton-dev [flags] (baton-dev -h lists them)\n", fs.Arg(0))
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(os.Stderr, "baton-dev: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	cfg.OnReady = func(e stack.Endpoints) { fmt.Print(banner(e, cfg)) }
	ctx := serve.SignalContext()
	if err := stack.Run(ctx, cfg, log); err != nil {
		log.Error("baton-dev stopped", "err", err)
		return 1
	}
	log.Info("baton-dev stopped cleanly")
	return 0
}

// banner is what baton-dev prints once every part listens: the endpoints,
// and batonctl command lines to try, with the flags that reach the stack
// when they are not batonctl's defaults (a TLS stack's certificates, other
// ports) as an alias line.
func banner(e stack.Endpoints, cfg stack.Config) string {
	var b strings.Builder
	how := ""
	if e.Certs != "" {
		how = " with mutual TLS"
	}
	fmt.Fprintf(&b, "Baton is running%s: etcd, queue, observer and a worker in one process.\n\n%s\n", how, e)
	ctl := "bin/batonctl"
	flags := append(e.BatonctlAddrs(), e.BatonctlFlags()...)
	if cfg.EtcdUsername != "" {
		flags = append(flags, "--etcd-username", cfg.EtcdUsername, "--etcd-password-file", cfg.EtcdPasswordFile)
	}
	if len(flags) > 0 {
		fmt.Fprintf(&b, "batonctl reaches it (as admin) with these flags:\n\n  alias batonctl='%s %s'\n\n", ctl, strings.Join(flags, " "))
		ctl = "batonctl"
	}
	fmt.Fprintf(&b, "Try:  %s apply -f examples/\n      %s get all\n      %s watch\n\nCtrl-C stops; starting again keeps the state in %s.\n", ctl, ctl, ctl, e.DataDir)
	return b.String()
}
