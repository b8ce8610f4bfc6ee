// Command baton-observer is Baton's shared informer: it watches etcd once
// per prefix for every controller, keeps an indexed cache served over gRPC
// (baton.observer.v1), and announces changed keys to baton-queue.
//
//	baton-observer [flags]          serve
//	baton-observer healthcheck      probe the local service, exit 0 or 1
//
// Every flag can also be set as BATON_OBSERVER_<FLAG>, e.g.
// BATON_OBSERVER_ETCD_ENDPOINTS.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/batonrun/baton/services/observer/service"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
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
	fs := flag.NewFlagSet("baton-observer", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, "BATON_OBSERVER", args, nil); err != nil {
		fmt.Fprintln(os.Stderr, "baton-observer:", err)
		return 2
	}
	if health {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := serve.Probe(ctx, cfg.GRPCAddr, cfg.HTTPAddr); err != nil {
			fmt.Fprintln(os.Stderr, "baton-observer: unhealthy:", err)
			return 1
		}
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(os.Stderr, "baton-observer: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := service.Run(serve.SignalContext(), cfg, log); err != nil {
		log.Error("baton-observer failed", "error", err)
		return 1
	}
	return 0
}
