// Command baton-queue is Baton's queue owner: a durable work queue with
// client-go's workqueue semantics, served over gRPC (baton.queue.v1).
//
//	baton-queue [flags]          serve
//	baton-queue healthcheck      probe the local service, exit 0 or 1
//
// Every flag can also be set as BATON_QUEUE_<FLAG>, e.g. BATON_QUEUE_DATA_DIR.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/batonrun/baton/services/queue/service"
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
	fs := flag.NewFlagSet("baton-queue", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, "BATON_QUEUE", args, nil); err != nil {
		fmt.Fprintln(os.Stderr, "baton-queue:", err)
		return 2
	}
	if health {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := serve.Probe(ctx, cfg.GRPCAddr, cfg.HTTPAddr); err != nil {
			fmt.Fprintln(os.Stderr, "baton-queue: unhealthy:", err)
			return 1
		}
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(os.Stderr, "baton-queue: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := service.Run(serve.SignalContext(), cfg, log); err != nil {
		log.Error("baton-queue failed", "error", err)
		return 1
	}
	return 0
}
