package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

// setupWatch redraws a table of every queue until the context ends
// (Ctrl-C): depth by state, rates since the previous sample, and the age
// of the oldest pending key. On a terminal it redraws in place; otherwise
// it appends one table per sample, so it can be piped to a file.
func setupWatch(fs *flag.FlagSet, a *app) runFunc {
	interval := fs.Duration("interval", 2*time.Second, "time between samples")
	once := fs.Bool("once", false, "print one sample and exit")
	return func(ctx context.Context, pos []string) error {
		if len(pos) > 1 {
			return usagef("usage: batonctl watch [queue] [--interval D] [--once]")
		}
		if *interval <= 0 {
			return usagef("--interval must be positive")
		}
		return a.watchQueues(ctx, pos, *interval, *once)
	}
}

func (a *app) watchQueues(ctx context.Context, pos []string, interval time.Duration, once bool) error {
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	q, err := a.queue()
	if err != nil {
		return err
	}
	clear := stdoutIsTerminal(a.Stdout) && !once
	var (
		prev   map[string]*queuev1.QueueStats
		prevAt time.Time
		tick   = time.NewTicker(interval)
	)
	defer tick.Stop()
	for {
		octx, cancel := a.opCtx(ctx)
		stats, err := q.Stats(octx, name)
		cancel()
		now := a.now()
		if ctx.Err() != nil {
			return nil // Ctrl-C: a normal way to leave
		}
		if err != nil {
			err = a.unreachable("the queue", a.queueAddr, "--queue-addr", err)
			if once {
				return err
			}
		}
		var b strings.Builder
		if clear {
			b.WriteString("\x1b[H\x1b[2J")
		}
		fmt.Fprintf(&b, "queue %s   %s   every %s, Ctrl-C to quit\n\n", printer.Escape(a.queueAddr), now.Format("15:04:05"), interval)
		if err != nil {
			fmt.Fprintf(&b, "error: %s\n", printer.Escape(err.Error()))
		} else {
			writeWatchTable(&b, stats, prev, now.Sub(prevAt))
			prev = map[string]*queuev1.QueueStats{}
			for _, s := range stats {
				prev[s.GetQueue()] = s
			}
			prevAt = now
		}
		if !clear {
			b.WriteString("\n")
		}
		if _, werr := io.WriteString(a.Stdout, b.String()); werr != nil {
			return werr
		}
		if once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func writeWatchTable(w io.Writer, stats []*queuev1.QueueStats, prev map[string]*queuev1.QueueStats, elapsed time.Duration) {
	tbl := printer.NewTable(w, "QUEUE", "DEPTH", "DELAYED", "LEASED", "DIRTY", "PARKED", "ADDS/S", "LEASES/S", "ACKS/S", "FAILS/S", "OLDEST")
	rate := func(cur, old uint64, ok bool) string {
		if !ok || elapsed <= 0 || cur < old {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(cur-old)/elapsed.Seconds())
	}
	for _, s := range stats {
		p, ok := prev[s.GetQueue()]
		tbl.Row(s.GetQueue(), n(s.GetPending()), n(s.GetDelayed()), n(s.GetLeased()), n(s.GetDirty()), n(s.GetParked()),
			rate(s.GetAddsTotal(), p.GetAddsTotal(), ok), rate(s.GetLeasesTotal(), p.GetLeasesTotal(), ok),
			rate(s.GetAcksTotal(), p.GetAcksTotal(), ok), rate(s.GetFailuresTotal(), p.GetFailuresTotal(), ok),
			dur(s.GetOldestPendingAge()))
	}
	if len(stats) == 0 {
		fmt.Fprintln(w, "no queues yet (a queue exists from its first Add)")
	}
	_ = tbl.Flush()
}
