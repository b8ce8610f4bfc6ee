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
	"log/slog"
	"os"

	"github.com/batonrun/baton/services/queue/service"
	"github.com/batonrun/baton/services/runtime/serve"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg := service.DefaultConfig()
	return serve.Main(serve.Command{
		Name:      "baton-queue",
		EnvPrefix: "BATON_QUEUE",
		Flags:     cfg.RegisterFlags,
		Probe:     func() (string, string) { return cfg.GRPCAddr, cfg.HTTPAddr },
		Run:       func(ctx context.Context, log *slog.Logger) error { return service.Run(ctx, cfg, log) },
	}, args)
}
