// Command baton-queue is Baton's queue owner: a durable work queue with
// client-go's workqueue semantics, served over gRPC (baton.queue.v1).
//
//	baton-queue [flags]                                 serve
//	baton-queue healthcheck                             probe the local service, exit 0 or 1
//	baton-queue repair --data-dir DIR [--dry-run]       make a log the queue refuses as corrupt readable again
//	baton-queue restore --from FILE|- --data-dir DIR [--name N --initial-cluster …]
//	                                                    seed a new queue from a backup (batonctl queue snapshot save)
//
// Every flag can also be set as BATON_QUEUE_<FLAG>, e.g. BATON_QUEUE_DATA_DIR.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/batonrun/baton/services/queue/service"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "repair" {
		return repair(args[1:])
	}
	if len(args) > 0 && args[0] == "restore" {
		return restore(args[1:])
	}
	cfg := service.DefaultConfig()
	// A bad flag value is a usage error, exit 2 with one line, as serve.Main
	// treats flags it cannot parse; Run would report it as a failure (exit
	// 1, in the JSON log). So the values are checked first, once parsed.
	var invalid error
	code := serve.Main(serve.Command{
		Name:      "baton-queue",
		EnvPrefix: "BATON_QUEUE",
		Flags:     cfg.RegisterFlags,
		Probe:     func() (string, string) { return cfg.GRPCAddr, cfg.HTTPAddr },
		Trust:     &cfg.TLS,
		Run: func(ctx context.Context, log *slog.Logger) error {
			if invalid = cfg.Validate(); invalid != nil {
				return nil
			}
			return service.Run(ctx, cfg, log)
		},
		Usage: []string{repairUsage, restoreUsage},
	}, args)
	if invalid != nil {
		fmt.Fprintf(os.Stderr, "baton-queue: %v\n", invalid)
		return 2
	}
	return code
}

const repairUsage = "repair --data-dir DIR [--dry-run]"

func repair(args []string) int {
	fs := flag.NewFlagSet("baton-queue repair", flag.ContinueOnError)
	dir := fs.String("data-dir", service.DefaultConfig().DataDir, "the queue's data directory")
	dry := fs.Bool("dry-run", false, "report the damage, change nothing")
	if err := flagenv.Parse(fs, "BATON_QUEUE", args, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "baton-queue repair: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "baton-queue repair: unknown argument %q\nusage: baton-queue %s\n", fs.Arg(0), repairUsage)
		return 2
	}
	log := serve.NewLogger(os.Stderr, slog.LevelInfo)
	if err := service.Repair(*dir, *dry, os.Stdout, log); err != nil {
		fmt.Fprintf(os.Stderr, "baton-queue repair: %v\n", err)
		return 1
	}
	return 0
}

const restoreUsage = "restore --from FILE|- --data-dir DIR [--name N --initial-cluster name=host:port,…]"

// restore seeds a new queue from a backup: a single member, or, with
// --initial-cluster, the one member of a new replicated queue that holds
// the state, which the others join on empty data directories.
func restore(args []string) int {
	fs := flag.NewFlagSet("baton-queue restore", flag.ContinueOnError)
	var cfg service.RestoreConfig
	fs.StringVar(&cfg.From, "from", "", "the backup file (batonctl queue snapshot save's), - for the standard input; required")
	fs.StringVar(&cfg.DataDir, "data-dir", service.DefaultConfig().DataDir, "the new member's data directory: empty or not there yet")
	fs.StringVar(&cfg.Name, "name", service.DefaultConfig().Name, "this member's name, as --name will be when it serves (with --initial-cluster)")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", "", "name=host:port,… of every member of the new replicated queue (empty: a single member)")
	if err := flagenv.Parse(fs, "BATON_QUEUE", args, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "baton-queue restore: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 || cfg.From == "" {
		fmt.Fprintf(os.Stderr, "baton-queue restore: --from is required, and nothing else\nusage: baton-queue %s\n", restoreUsage)
		return 2
	}
	cfg.In = os.Stdin
	log := serve.NewLogger(os.Stderr, slog.LevelInfo)
	if err := service.Restore(cfg, os.Stdout, log); err != nil {
		fmt.Fprintf(os.Stderr, "baton-queue restore: %v\n", err)
		return 1
	}
	return 0
}
