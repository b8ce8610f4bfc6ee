// Command baton-dev runs Baton's embedded development stack in one process:
// etcd (embedded), the queue, the observer and a worker with every reference
// controller, on the default ports, with state under --data-dir. It prints
// the endpoints when ready; Ctrl-C stops it cleanly, and starting it again
// keeps the state. `make run` builds and starts it.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

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
	cfg.OnReady = func(e stack.Endpoints) {
		fmt.Printf("Baton is running: etcd, queue, observer and a worker in one process.\n\n%s\n", e)
		fmt.Printf("Try:  bin/batonctl apply -f examples/\n      bin/batonctl get all\n      bin/batonctl watch\n\nCtrl-C stops; starting again keeps the state in %s.\n", e.DataDir)
	}
	ctx := serve.SignalContext()
	if err := stack.Run(ctx, cfg, log); err != nil {
		log.Error("baton-dev stopped", "err", err)
		return 1
	}
	log.Info("baton-dev stopped cleanly")
	return 0
}
