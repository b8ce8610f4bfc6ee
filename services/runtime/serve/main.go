package serve

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/trust"
)

// Command describes one binary for Main.
type Command struct {
	// Name is the binary's name, e.g. "baton-queue".
	Name string
	// EnvPrefix mirrors each flag from the environment, e.g. "BATON_QUEUE".
	EnvPrefix string
	// Flags registers the service's flags.
	Flags func(*flag.FlagSet)
	// Probe returns, once flags are parsed, the addresses the service
	// listens on, which the healthcheck subcommand probes ("" skips one).
	Probe func() (grpcAddr, httpAddr string)
	// Trust, if set, is the service's trust flags (services/runtime/trust;
	// Flags registers them): Main refuses bad ones, and a plaintext
	// listener on an address that is not loopback, before Run, and the
	// healthcheck probes over TLS with the service's own certificate.
	Trust *trust.Config
	// Run serves until ctx is cancelled.
	Run func(ctx context.Context, log *slog.Logger) error
	// Usage lists the binary's other subcommands, one usage line each
	// (e.g. "repair --data-dir DIR [--dry-run]"), for the usage message.
	Usage []string
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
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\nFlags (each also %s_<FLAG> in the environment):\n", usageLine(c), c.EnvPrefix)
		fs.PrintDefaults()
	}
	if err := flagenv.Parse(fs, c.EnvPrefix, args, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.Name, err)
		return 2
	}
	if fs.NArg() > 0 {
		// A stray word is a mistake (a subcommand misspelt, a flag without
		// its dashes): serving anyway would, for the queue, create a data
		// directory wherever it was run.
		what := "argument"
		if !health && len(args) > 0 && args[0] == fs.Arg(0) {
			what = "subcommand"
		}
		fmt.Fprintf(os.Stderr, "%s: unknown %s %q\n%s\n", c.Name, what, fs.Arg(0), usageLine(c))
		return 2
	}
	if health {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		g, h := c.Probe()
		var po ProbeOptions
		if c.Trust != nil {
			src, err := c.Trust.Load(nil)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: unhealthy: %v\n", c.Name, err)
				return 1
			}
			po = SelfProbe(src, cmp.Or(g, h))
		}
		if err := Probe(ctx, g, h, po); err != nil {
			fmt.Fprintf(os.Stderr, "%s: unhealthy: %v\n", c.Name, err)
			return 1
		}
		return 0
	}
	if c.Trust != nil {
		err := c.Trust.CheckServe(c.Probe())
		if err == nil && c.Trust.AuthzPolicy != "" {
			_, err = c.Trust.Policy() // a policy file that does not parse is a bad flag too
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", c.Name, err)
			return 2
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --log-level: %v\n", c.Name, err)
		return 2
	}
	log := NewLogger(os.Stderr, lvl)
	if err := c.Run(SignalContext(), log); err != nil {
		log.Error(c.Name+" failed", "error", err)
		return 1
	}
	return 0
}

// usageLine is the one-line usage of c.
func usageLine(c Command) string {
	lines := []string{c.Name + " [flags]", c.Name + " healthcheck [flags]"}
	for _, u := range c.Usage {
		lines = append(lines, c.Name+" "+u)
	}
	return "usage: " + strings.Join(lines, "\n       ")
}

// NewLogger returns the JSON logger every Baton binary writes with, at
// level. Durations are written as Go duration strings ("1.5s"), as etcd
// writes them, not as integers of nanoseconds.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}))
}

func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
