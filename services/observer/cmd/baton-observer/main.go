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
	"log/slog"
	"os"

	"github.com/batonrun/baton/services/observer/service"
	"github.com/batonrun/baton/services/runtime/serve"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg := service.DefaultConfig()
	return serve.Main(serve.Command{
		Name:      "baton-observer",
		EnvPrefix: "BATON_OBSERVER",
		Flags:     cfg.RegisterFlags,
		Probe:     func() (string, string) { return cfg.GRPCAddr, cfg.HTTPAddr },
		Trust:     &cfg.TLS,
		Run:       func(ctx context.Context, log *slog.Logger) error { return service.Run(ctx, cfg, log) },
	}, args)
}
