package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/batonrun/baton/services/batonctl/internal/experiment"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

const experimentUse = `usage: batonctl experiment <name> [flags] [-o json]

  burst    [--discover 1000/s] [--execute 10/s] [--duration 1s] [--keys N]
           who holds the backlog when changes arrive faster than reconciles finish?
  repeat   [--notifications 3]
           how many reconciles do rapid changes to one object cost?
  failure  [--replicas 3] [--failures 2]
           does the work survive a reconcile that fails half-way?
  clean    remove what killed runs left: objects under /registry/experiments/
           and the keys of the experiment-* queues (not while one runs)

Each runs against the live etcd and queue (--etcd-endpoints, --queue-addr),
once through direct reaction and once through Baton. See docs/experiments.md.`

func cmdExperiment(ctx context.Context, a *app, args []string) error {
	if len(args) == 0 {
		return usagef("%s", experimentUse)
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(a.Stdout, experimentUse)
		return nil
	}
	name := args[0]
	fs := flag.NewFlagSet("experiment "+name, flag.ContinueOnError)
	output := fs.String("o", "", "output format: json (default: tables)")
	var (
		run   func(context.Context, experiment.Env) (any, error)
		print func(io.Writer, any) error
		// validate checks the options before any connection is made, so
		// a mistake is reported as one even when the stack is down.
		validate = func() error { return nil }
	)
	switch name {
	case "burst":
		discover := rateFlag(1000)
		execute := rateFlag(10)
		fs.Var(&discover, "discover", "changes written to etcd per second (N or N/s, N/m)")
		fs.Var(&execute, "execute", "reconciles the worker finishes per second (N or N/s, N/m)")
		duration := fs.Duration("duration", time.Second, "how long changes keep arriving")
		keys := fs.Int("keys", 0, "cycle the changes over N objects (0: every change a new object)")
		opts := func() experiment.BurstOptions {
			return experiment.BurstOptions{Discover: float64(discover), Execute: float64(execute), Duration: *duration, Keys: *keys}
		}
		validate = func() error { return opts().Validate() }
		run = func(ctx context.Context, e experiment.Env) (any, error) { return experiment.Burst(ctx, e, opts()) }
		print = func(w io.Writer, r any) error { return printBurst(w, r.(*experiment.BurstResult)) }
	case "repeat":
		notes := fs.Int("notifications", 3, "rapid changes made to the one object")
		opts := func() experiment.RepeatOptions { return experiment.RepeatOptions{Notifications: *notes} }
		validate = func() error { return opts().Validate() }
		run = func(ctx context.Context, e experiment.Env) (any, error) { return experiment.Repeat(ctx, e, opts()) }
		print = func(w io.Writer, r any) error { return printRepeat(w, r.(*experiment.RepeatResult)) }
	case "failure":
		replicas := fs.Int("replicas", 3, "pods the set needs")
		failures := fs.Int("failures", 2, "reconcile attempts whose second pod write is refused")
		opts := func() experiment.FailureOptions {
			return experiment.FailureOptions{Replicas: *replicas, Failures: *failures}
		}
		validate = func() error { return opts().Validate() }
		run = func(ctx context.Context, e experiment.Env) (any, error) { return experiment.Failure(ctx, e, opts()) }
		print = func(w io.Writer, r any) error { return printFailure(w, r.(*experiment.FailureResult)) }
	case "clean":
		run = func(ctx context.Context, e experiment.Env) (any, error) { return experiment.Clean(ctx, e) }
		print = func(w io.Writer, r any) error {
			c := r.(*experiment.Cleaned)
			fmt.Fprintf(w, "deleted %d objects under %s\n", c.Objects, experiment.Prefix)
			for _, q := range []string{experiment.QueueBurst, experiment.QueueRepeat, experiment.QueueFailure} {
				fmt.Fprintf(w, "forgot %d keys in queue %s\n", c.Keys[q], q)
			}
			return nil
		}
	default:
		return usagef("unknown experiment %q\n%s", name, experimentUse)
	}
	pos, err := parse(fs, args[1:], a.Stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q\n%s", pos[0], experimentUse)
	}
	if *output != "" && *output != "json" {
		return usagef("unknown output format %q (json)", *output)
	}
	if err := validate(); err != nil {
		return usagef("experiment %s: --%s", name, err)
	}
	etcd, err := a.etcd(ctx)
	if err != nil {
		return err
	}
	q, err := a.queue()
	if err != nil {
		return err
	}
	// Say at once when the queue cannot be reached, naming its flag.
	pctx, cancel := a.opCtx(ctx)
	_, err = q.Stats(pctx, "")
	cancel()
	if err != nil && isUnreachable(err) {
		return a.unreachable("the queue", a.queueAddr, "--queue-addr", err)
	}
	res, err := run(ctx, experiment.Env{Etcd: etcd, Queue: q})
	if err != nil {
		return fmt.Errorf("experiment %s: %w", name, err)
	}
	if *output == "json" {
		return printer.JSON(a.Stdout, res)
	}
	return print(a.Stdout, res)
}

// rateFlag is a per-second rate written "1000", "1000/s" or "60/m".
type rateFlag float64

func (r *rateFlag) String() string { return strconv.FormatFloat(float64(*r), 'f', -1, 64) + "/s" }

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

func rate(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "/s" }

func printBurst(w io.Writer, r *experiment.BurstResult) error {
	objects := "every change a new object"
	if r.Keys > 0 {
		objects = fmt.Sprintf("changes cycle over %d objects", r.Keys)
	}
	fmt.Fprintf(w, "Burst: changes at %s, one worker at %s, for %s (%s).\n", rate(r.Discover), rate(r.Execute), time.Duration(r.Duration*float64(time.Second)), objects)
	fmt.Fprintf(w, "Objects under %s%s/, queue %s.\n", experiment.Prefix, r.RunID, r.Queue)
	fmt.Fprintf(w, "Baton's changes reach the queue through an announcer inside batonctl that Adds\n")
	fmt.Fprintf(w, "each watch response's keys, as the observer does (the observer's rules do not\n")
	fmt.Fprintf(w, "watch %s).\n\n", experiment.Prefix)
	d, b := r.Direct, r.Baton
	holder := "the queue"
	if b.QueueDepth != nil {
		holder = fmt.Sprintf("the queue: depth %d", b.QueueDepth.Total())
	}
	t := printer.NewTable(w, "", "DIRECT REACTION", "BATON")
	t.Row("Discovered / second", num(d.DiscoveredPerSecond), num(b.DiscoveredPerSecond))
	t.Row("Completed / second", num(d.CompletedPerSecond), num(b.CompletedPerSecond))
	t.Row(fmt.Sprintf("Backlog after the run (%s | %s)", secs(d.WindowSeconds), secs(b.WindowSeconds)), strconv.Itoa(d.Backlog), strconv.Itoa(b.Backlog))
	t.Row("Who holds the backlog", d.HeldBy, holder)
	t.Row("Collapsed announcements", strconv.Itoa(d.Collapsed), strconv.Itoa(b.Collapsed))
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nDirect reaction: %d changes, %d reconciled. ", d.Changes, d.Completed)
	if d.HandlerSaw < d.Changes {
		fmt.Fprintf(w, "The handler took only %d of the %d\n", d.HandlerSaw, d.Changes)
		fmt.Fprintf(w, "watch events: it takes the next one after reconciling, so observation waited on\n")
		fmt.Fprintf(w, "execution. The other %d sat in the watch stream, owned by no one, and were\n", d.Changes-d.HandlerSaw)
		fmt.Fprintf(w, "dropped when the run ended.\n")
	} else {
		fmt.Fprintf(w, "The handler kept up: it took all %d watch events.\n", d.Changes)
	}
	fmt.Fprintf(w, "Baton: %d changes, %d keys announced (%d queued, %d collapsed), %d reconciled.\n", b.Changes, b.Announced, b.Queued, b.Collapsed, b.Completed)
	if q := b.QueueDepth; q != nil && q.Total() > 0 {
		fmt.Fprintf(w, "The queue held %d keys after the run (pending %d, delayed %d, leased %d, parked %d)\n", q.Total(), q.Pending, q.Delayed, q.Leased, q.Parked)
		fmt.Fprintf(w, "until a worker acked each; this run then forgot them and deleted its objects.\n")
	} else if q != nil {
		fmt.Fprintf(w, "The queue was empty after the run: the worker kept up.\n")
	}
	return nil
}

func printRepeat(w io.Writer, r *experiment.RepeatResult) error {
	fmt.Fprintf(w, "Repeat: %d rapid changes to one object (queue %s, key %s).\n\n", r.Notifications, r.Queue, r.Key)
	t := printer.NewTable(w, "", "DIRECT REACTION", "WORK QUEUE")
	t.Row("Notifications observed", strconv.Itoa(r.DirectObserved), strconv.Itoa(r.Observed))
	t.Row("Reconciles", strconv.Itoa(r.DirectReconciles), strconv.Itoa(r.QueueReconciles))
	t.Row("Reconciled against change", seqs(r.DirectReconciledSeqs), seqs(r.QueueReconciledSeqs))
	t.Row("Correct number needed", strconv.Itoa(r.Needed), strconv.Itoa(r.Needed))
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nWork queue, while no worker was free (one Add per notification):\n")
	// Consecutive Adds with the same answer are one line: "Add #2-#10".
	for i := 0; i < len(r.Adds); {
		j := i
		for j+1 < len(r.Adds) && (r.Adds[j+1].Collapsed > 0) == (r.Adds[i].Collapsed > 0) {
			j++
		}
		what := "queued"
		if r.Adds[i].Collapsed > 0 {
			what = "collapsed: the key was already pending"
		}
		if i == j {
			fmt.Fprintf(w, "  Add #%d: %s\n", i+1, what)
		} else {
			fmt.Fprintf(w, "  Add #%d-#%d: %s\n", i+1, j+1, what)
		}
		i = j + 1
	}
	b := r.BeforeWorker
	fmt.Fprintf(w, "  Inspect: %s, announced %d times, attempts %d\n", b.State, b.Announcements, b.Attempts)
	fmt.Fprintf(w, "Then a worker was free: the queue handed the key out %s (leases_total +%d), and\n", times(int(r.QueueLeases)), r.QueueLeases)
	fmt.Fprintf(w, "the worker reconciled the object as it was then.\n")
	return nil
}

func printFailure(w io.Writer, r *experiment.FailureResult) error {
	fmt.Fprintf(w, "Failure: a set needs %d pods. In each of the first %d reconcile attempts the\n", r.Replicas, r.Failures)
	fmt.Fprintf(w, "second pod write is refused (an injected fault), so the attempt creates one pod\n")
	fmt.Fprintf(w, "and fails.\n\n")
	d := r.Direct
	fmt.Fprintf(w, "Direct reaction: the handler ran %s and returned\n  %q\n", times(d.Attempts), d.Error)
	fmt.Fprintf(w, "  pods %d/%d, counted again %s after the handler returned.\n\n", d.Pods, r.Replicas, printer.Duration(time.Duration(r.DirectCheckedAfterMS*float64(time.Millisecond))))
	fmt.Fprintf(w, "Baton (queue %s, key %s), Inspect at the start of each attempt:\n", r.Queue, r.Key)
	t := printer.NewTable(w, "ATTEMPT", "AT", "STATE", "ATTEMPTS", "PODS", "RESULT", "LAST ERROR")
	for _, s := range r.Baton.Steps {
		result := "succeeded"
		if s.Error != "" {
			result = "failed"
		}
		t.Row(strconv.Itoa(s.Attempt), fmt.Sprintf("%.1fms", s.AtMS), s.Item.State, strconv.Itoa(int(s.Item.Attempts)),
			fmt.Sprintf("%d→%d", s.PodsBefore, s.PodsAfter), result, orDash(s.Item.LastError))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if f := r.Baton.Final; f != nil {
		fmt.Fprintf(w, "After the last attempt: %s (the queue forgot the key when the success was acked).\n\n", f.State)
	}
	t = printer.NewTable(w, "", "DIRECT REACTION", "BATON")
	t.Row("Pods", fmt.Sprintf("%d/%d", d.Pods, r.Replicas), fmt.Sprintf("%d/%d", r.Baton.Pods, r.Replicas))
	t.Row("Reconcile attempts", strconv.Itoa(d.Attempts), strconv.Itoa(r.Baton.Attempts))
	t.Row("Unfinished work held by", d.RemainingWork, r.Baton.RemainingWork)
	return t.Flush()
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return strconv.Itoa(n) + " times"
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func secs(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "s" }

func seqs(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = "#" + strconv.FormatInt(x, 10)
	}
	return strings.Join(s, ", ")
}
