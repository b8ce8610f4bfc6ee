// Package service is baton-experiment: it runs one of the investigations'
// experiments (burst, repeat, failure) against a running stack — etcd, the
// queue and the observer, the last with the experiments' rules — and prints
// the investigation's table, or the whole result as JSON; clean removes what
// killed runs left behind.
//
//	baton-experiment [global flags] burst|repeat|failure|clean [flags] [-o json]
//
// `batonctl experiment …` runs the baton-experiment binary it finds beside
// itself or on PATH, passing its global flags on, so users see one command
// line. Main is the whole program behind a function, so tests drive it
// in-process as a user drives the binary; Parse, Config.Validate and Run are
// its steps.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/services/experiment/internal/experiment"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/trust"
)

// EnvPrefix prefixes the environment variables that mirror the global flags:
// BATON_EXPERIMENT_ETCD_ENDPOINTS, BATON_EXPERIMENT_QUEUE_ADDR, …
const EnvPrefix = "BATON_EXPERIMENT"

// Config is one run of baton-experiment.
type Config struct {
	// EtcdEndpoints is a comma-separated list of etcd client URLs.
	EtcdEndpoints string
	// QueueAddr and ObserverAddr are the gRPC addresses (host:port).
	QueueAddr    string
	ObserverAddr string
	// TLS is the certificate the queue and the observer are dialed with,
	// and the CA that verifies theirs (--tls-cert-file …).
	TLS trust.Config
	// Etcd is etcd's TLS and authentication (--etcd-cacert …).
	Etcd etcdconn.Config
	// Timeout bounds the wait for each server to answer at the start.
	Timeout time.Duration
	// LogLevel is the least level logged to stderr (cleanup failures are
	// warnings).
	LogLevel string
	// Experiment is burst, repeat, failure or clean.
	Experiment string
	// Output is "" for tables, or "json".
	Output string
	// The options of each experiment; only Experiment's are used.
	Burst   experiment.BurstOptions
	Repeat  experiment.RepeatOptions
	Failure experiment.FailureOptions
}

// DefaultConfig returns the defaults: the servers where `make run` and
// `docker compose up` put them, and the investigations' numbers.
func DefaultConfig() Config {
	return Config{
		EtcdEndpoints: "http://127.0.0.1:2379", QueueAddr: "127.0.0.1:7070", ObserverAddr: "127.0.0.1:7071",
		Timeout: 5 * time.Second, LogLevel: "warn",
		Burst:   experiment.BurstOptions{Discover: 1000, Execute: 10, Duration: time.Second},
		Repeat:  experiment.RepeatOptions{Notifications: 3},
		Failure: experiment.FailureOptions{Replicas: 3, Failures: 2},
	}
}

// RegisterFlags binds the global flags to fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.EtcdEndpoints, "etcd-endpoints", c.EtcdEndpoints, "etcd client URLs, comma-separated")
	fs.StringVar(&c.QueueAddr, "queue-addr", c.QueueAddr, "the queue's gRPC address (host:port)")
	fs.StringVar(&c.ObserverAddr, "observer-addr", c.ObserverAddr, "the observer's gRPC address (host:port)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "how long to wait for a server before giving up")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (on stderr)")
	c.TLS.RegisterClientFlags(fs)
	c.Etcd.RegisterFlags(fs)
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case len(flagenv.SplitList(c.EtcdEndpoints)) == 0:
		return errors.New("--etcd-endpoints is empty")
	case c.QueueAddr == "":
		return errors.New("--queue-addr is empty")
	case c.ObserverAddr == "":
		return errors.New("--observer-addr is empty")
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout must be positive, not %v", c.Timeout)
	case c.Output != "" && c.Output != "json":
		return fmt.Errorf("unknown output format %q (json)", c.Output)
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	if err := c.Etcd.Validate(flagenv.SplitList(c.EtcdEndpoints)); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	var err error
	switch c.Experiment {
	case "burst":
		err = c.Burst.Validate()
	case "repeat":
		err = c.Repeat.Validate()
	case "failure":
		err = c.Failure.Validate()
	case "clean":
	default:
		return fmt.Errorf("unknown experiment %q", c.Experiment)
	}
	if err != nil {
		return fmt.Errorf("experiment %s: --%w", c.Experiment, err)
	}
	return nil
}

// Usage is the command's usage, printed for `help` and usage errors.
const Usage = `usage: batonctl [global flags] experiment <name> [flags] [-o json]
       baton-experiment [global flags] <name> [flags] [-o json]

  burst    [--discover 1000/s] [--execute 10/s] [--duration 1s] [--keys N]
           who holds the backlog when changes arrive faster than reconciles finish?
  repeat   [--notifications 3]
           how many reconciles do rapid changes to one object cost?
  failure  [--replicas 3] [--failures 2]
           does the work survive a reconcile that fails half-way?
  clean    remove what killed runs left: objects under /registry/experiments/
           and /registry/experiment-*/, and the keys of the experiment-* queues
           (not while one runs)

Each runs against the live etcd, queue and observer (--etcd-endpoints,
--queue-addr, --observer-addr), once through direct reaction and once through
Baton. The observer needs the experiments' rules (` + experiment.RulesFile + `;
make run and docker compose load it). See docs/experiments.md.`

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errHelp means help was asked for and printed.
var errHelp = errors.New("help")

// Parse reads the command line: global flags (each also EnvPrefix_<FLAG>
// in the environment, read through lookup; nil means the process's), the
// experiment's name, then its flags, among which the global flags may
// appear too. It does not validate the values (Config.Validate does).
func Parse(args []string, lookup func(string) (string, bool), help io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("baton-experiment", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	cfg.RegisterFlags(fs)
	if err := flagenv.Parse(fs, EnvPrefix, args, lookup); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(help, Usage)
			return cfg, errHelp
		}
		return cfg, usagef("%v (baton-experiment -h lists the flags)", err)
	}
	if fs.NArg() == 0 {
		return cfg, usagef("%s", Usage)
	}
	cfg.Experiment = fs.Arg(0)
	if cfg.Experiment == "help" {
		fmt.Fprintln(help, Usage)
		return cfg, errHelp
	}
	sub := flag.NewFlagSet("experiment "+cfg.Experiment, flag.ContinueOnError)
	sub.SetOutput(io.Discard)
	sub.Usage = func() {}
	cfg.RegisterFlags(sub)
	sub.StringVar(&cfg.Output, "o", cfg.Output, "output format: json (default: tables)")
	switch cfg.Experiment {
	case "burst":
		b := &cfg.Burst
		sub.Var((*rateFlag)(&b.Discover), "discover", "changes written to etcd per second (N or N/s, N/m, N/h)")
		sub.Var((*rateFlag)(&b.Execute), "execute", "reconciles the worker finishes per second (N or N/s, N/m, N/h)")
		sub.DurationVar(&b.Duration, "duration", b.Duration, "how long changes keep arriving")
		sub.IntVar(&b.Keys, "keys", b.Keys, "cycle the changes over N objects (0: every change a new object)")
	case "repeat":
		sub.IntVar(&cfg.Repeat.Notifications, "notifications", cfg.Repeat.Notifications, "rapid changes made to the one object")
	case "failure":
		sub.IntVar(&cfg.Failure.Replicas, "replicas", cfg.Failure.Replicas, "pods the set needs")
		sub.IntVar(&cfg.Failure.Failures, "failures", cfg.Failure.Failures, "reconcile attempts whose second pod write is refused")
	case "clean":
	default:
		return cfg, usagef("unknown experiment %q\n%s", cfg.Experiment, Usage)
	}
	if err := sub.Parse(fs.Args()[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			sub.SetOutput(help)
			fmt.Fprintf(help, "Flags of %s:\n", sub.Name())
			sub.PrintDefaults()
			return cfg, errHelp
		}
		return cfg, usagef("%v (%s -h lists its flags)", err, sub.Name())
	}
	if sub.NArg() > 0 {
		return cfg, usagef("unexpected argument %q\n%s", sub.Arg(0), Usage)
	}
	return cfg, nil
}

// IO is what a run of baton-experiment reads and writes.
type IO struct {
	Stdout, Stderr io.Writer
	// Lookup reads the environment; nil means os.LookupEnv.
	Lookup func(string) (string, bool)
}

// Main runs baton-experiment with args (without the program name) and
// returns the exit status: 0 when the run completed (whatever the numbers),
// 1 when it could not run, 2 on a usage error. Errors go to stderr, one line
// each.
func Main(ctx context.Context, args []string, stdio IO) int {
	cfg, err := Parse(args, stdio.Lookup, stdio.Stdout)
	if err == nil {
		err = cfg.Validate()
		if err != nil {
			err = usageError{err.Error()}
		}
	}
	var ue usageError
	switch {
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stdio.Stderr, "error: %v\n", err)
		return 2
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // checked by Validate
	log := slog.New(slog.NewTextHandler(stdio.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := Run(ctx, cfg, stdio.Stdout, log); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stdio.Stderr, "error:", line)
		}
		return 1
	}
	return 0
}

// Run reaches etcd, the queue and the observer, runs cfg.Experiment and
// writes its result to w. A nil log discards.
func Run(ctx context.Context, cfg Config, w io.Writer, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	env, closeEnv, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeEnv()
	env.Log = log
	var (
		res   any
		print func(io.Writer) error
	)
	switch cfg.Experiment {
	case "burst":
		r, err := experiment.Burst(ctx, env, cfg.Burst)
		res, print = r, func(w io.Writer) error { return printBurst(w, r) }
		if err != nil {
			return interrupted(ctx, "burst", err)
		}
	case "repeat":
		r, err := experiment.Repeat(ctx, env, cfg.Repeat)
		res, print = r, func(w io.Writer) error { return printRepeat(w, r) }
		if err != nil {
			return interrupted(ctx, "repeat", err)
		}
	case "failure":
		r, err := experiment.Failure(ctx, env, cfg.Failure)
		res, print = r, func(w io.Writer) error { return printFailure(w, r) }
		if err != nil {
			return interrupted(ctx, "failure", err)
		}
	case "clean":
		r, err := experiment.Clean(ctx, env)
		res, print = r, func(w io.Writer) error { return printClean(w, r) }
		if err != nil {
			return interrupted(ctx, "clean", err)
		}
	}
	if cfg.Output == "json" {
		return printJSON(w, res)
	}
	return print(w)
}

// interrupted words an experiment's error when ctx was cancelled (Ctrl-C):
// the run stopped and cleaned up, and the error it stopped with says no
// more than that, unless the cleanup failed.
func interrupted(ctx context.Context, name string, err error) error {
	if ctx.Err() == nil {
		return fmt.Errorf("experiment %s: %w", name, err)
	}
	var ce *experiment.CleanupError
	if errors.As(err, &ce) {
		return fmt.Errorf("experiment %s: interrupted; %w", name, ce)
	}
	return fmt.Errorf("experiment %s: interrupted; the run deleted its objects and forgot its queue keys", name)
}

// rateFlag is a per-second rate written "1000", "1000/s", "60/m" or "1/h".
type rateFlag float64

func (r *rateFlag) String() string {
	if r == nil {
		return ""
	}
	return strconv.FormatFloat(float64(*r), 'f', -1, 64) + "/s"
}

func (r *rateFlag) Set(s string) error {
	num, unit, _ := strings.Cut(s, "/")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return errors.New("want a positive rate such as 1000/s")
	}
	switch unit {
	case "", "s":
	case "m", "min":
		v /= 60
	case "h":
		v /= 3600
	default:
		return fmt.Errorf("unknown unit /%s (use /s, /m or /h)", unit)
	}
	*r = rateFlag(v)
	return nil
}
