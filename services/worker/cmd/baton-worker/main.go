// Command baton-worker runs Baton's reference controllers (ReplicaSet,
// Deployment, Job, StatefulSet and the pod runtime): it leases keys from the
// queue, reads through the observer's cache, writes to etcd and acks.
// Run as many as the load needs; the queue gives each key to one at a time.
//
//	baton-worker [flags]          run the controllers
//	baton-worker healthcheck      probe the local /readyz, exit 0 or 1
//
// Every flag can also be set as BATON_WORKER_<FLAG>, e.g.
// BATON_WORKER_QUEUE_ADDR.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/worker/service"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	health := len(args) > 0 && args[0] == "healthcheck"
	if health {
		args = args[1:]
	}
	cfg := service.DefaultConfig()
	fs := flag.NewFlagSet("baton-worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, "BATON_WORKER", args, nil); err != nil {
		fmt.Fprintln(os.Stderr, "baton-worker:", err)
		return 2
	}
	if health {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := serve.Probe(ctx, "", cfg.HTTPAddr); err != nil {
			fmt.Fprintln(os.Stderr, "baton-worker: unhealthy:", err)
			return 1
		}
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(os.Stderr, "baton-worker: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := service.Run(serve.SignalContext(), cfg, log); err != nil {
		log.Error("baton-worker failed", "error", err)
		return 1
	}
	return 0
}
