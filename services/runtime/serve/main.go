package serve

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/batonrun/baton/services/runtime/flagenv"
)

// Command describes one binary for Main.
type Command struct {
	// Name is the binary's name, e.g. "baton-queue".
	Name string
	// EnvPrefix mirrors each flag from the environment, e.g. "BATON_QUEUE".
	EnvPrefix string
	// Flags registers the service's flags.
	Flags func(*flag.FlagSet)
	// Probe returns, once flags are parsed, the addresses the healthcheck
	// subcommand probes ("" skips one).
	Probe func() (grpcAddr, httpAddr string)
	// Run serves until ctx is cancelled.
	Run func(ctx context.Context, log *slog.Logger) error
}

// Main is every Baton binary's main: flags (each also from the
// environment), a `healthcheck` subcommand for containers that have no
// shell, a JSON slog logger at --log-level, and Run under a context that the
// first SIGINT or SIGTERM cancels. It returns the exit status: 0, 1 on
// failure or an unhealthy probe, 2 for bad flags.
func Main(c Command, args []string) int {
	health := len(args) > 0 && args[0] == "healthcheck"
	if health {
		args = args[1:]
	}
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	c.Flags(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, c.EnvPrefix, args, nil); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.Name, err)
		return 2
	}
	if health {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		g, h := c.Probe()
		if err := Probe(ctx, g, h); err != nil {
			fmt.Fprintf(os.Stderr, "%s: unhealthy: %v\n", c.Name, err)
			return 1
		}
		return 0
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --log-level: %v\n", c.Name, err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := c.Run(SignalContext(), log); err != nil {
		log.Error(c.Name+" failed", "error", err)
		return 1
	}
	return 0
}
