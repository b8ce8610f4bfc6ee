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
	"log/slog"
	"os"

	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/worker/service"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg := service.DefaultConfig()
	return serve.Main(serve.Command{
		Name:      "baton-worker",
		EnvPrefix: "BATON_WORKER",
		Flags:     cfg.RegisterFlags,
		Probe:     func() (string, string) { return "", cfg.HTTPAddr },
		Trust:     &cfg.TLS,
		Run:       func(ctx context.Context, log *slog.Logger) error { return service.Run(ctx, cfg, log) },
	}, args)
}
