package service

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batonrun/baton/services/experiment/internal/experiment"
)

// table writes rows aligned in columns separated by three spaces, as
// batonctl's tables are.
type table struct{ w *tabwriter.Writer }

func newTable(w io.Writer, headers ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.w.Flush() }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printBurst(w io.Writer, r *experiment.BurstResult) error {
	objects := "every change a new object"
	if r.Keys > 0 {
		objects = fmt.Sprintf("changes cycle over %d objects", r.Keys)
	}
	watched := "/registry/" + r.Queue + "/"
	fmt.Fprintf(w, "Burst: changes at %s, one worker at %s, for %s (%s).\n", rate(r.Discover), rate(r.Execute), time.Duration(r.Duration*float64(time.Second)), objects)
	fmt.Fprintf(w, "Objects under %s%s/direct/ (direct reaction) and\n%s%s/ (Baton), queue %s.\n", experiment.Unwatched, r.RunID, watched, r.RunID, r.Queue)
	fmt.Fprintf(w, "Baton's changes reach the queue through the running observer, whose rule sends\n")
	fmt.Fprintf(w, "%s to queue %s.\n\n", watched, r.Queue)
	d, b := r.Direct, r.Baton
	holder := "the queue"
	if b.QueueDepth != nil {
		holder = fmt.Sprintf("the queue: depth %d", b.QueueDepth.Total())
	}
	t := newTable(w, "", "DIRECT REACTION", "BATON")
	t.row("Discovered / second", num(d.DiscoveredPerSecond), num(b.DiscoveredPerSecond))
	t.row("Completed / second", num(d.CompletedPerSecond), num(b.CompletedPerSecond))
	t.row(fmt.Sprintf("Backlog after the run (%s | %s)", secs(d.WindowSeconds), secs(b.WindowSeconds)), strconv.Itoa(d.Backlog), strconv.Itoa(b.Backlog))
	t.row("Who holds the backlog", d.HeldBy, holder)
	t.row("Collapsed announcements", strconv.Itoa(d.Collapsed), strconv.Itoa(b.Collapsed))
	if err := t.flush(); err != nil {
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
	fmt.Fprintf(w, "Baton: %d changes, %d watch events at the observer, %d keys announced\n(", b.Changes, b.Observed, b.Announced)
	if b.ObserverMerged != 0 {
		fmt.Fprintf(w, "%d changes merged in its outbox first; ", b.ObserverMerged)
	}
	fmt.Fprintf(w, "%d queued, %d collapsed by the queue), %d reconciled.\n", b.Queued, b.Announced-b.Queued, b.Completed)
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
	t := newTable(w, "", "DIRECT REACTION", "WORK QUEUE")
	t.row("Notifications observed", strconv.Itoa(r.DirectObserved), strconv.Itoa(r.Observed))
	t.row("Reconciles", strconv.Itoa(r.DirectReconciles), strconv.Itoa(r.QueueReconciles))
	t.row("Reconciled against change", seqs(r.DirectReconciledSeqs), seqs(r.QueueReconciledSeqs))
	t.row("Correct number needed", strconv.Itoa(r.Needed), strconv.Itoa(r.Needed))
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nWork queue, while no worker was free (the observer's Add for each notification):\n")
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
	fmt.Fprintf(w, "  pods %d/%d, counted again %s after the handler returned.\n\n", d.Pods, r.Replicas, duration(time.Duration(r.DirectCheckedAfterMS*float64(time.Millisecond))))
	fmt.Fprintf(w, "Baton (queue %s, key %s), Inspect at the start of each attempt:\n", r.Queue, r.Key)
	t := newTable(w, "ATTEMPT", "AT", "STATE", "ATTEMPTS", "PODS", "RESULT", "LAST ERROR")
	for _, s := range r.Baton.Steps {
		result := "succeeded"
		if s.Error != "" {
			result = "failed"
		}
		t.row(strconv.Itoa(s.Attempt), fmt.Sprintf("%.1fms", s.AtMS), s.Item.State, strconv.Itoa(int(s.Item.Attempts)),
			fmt.Sprintf("%d→%d", s.PodsBefore, s.PodsAfter), result, orDash(s.Item.LastError))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if f := r.Baton.Final; f != nil {
		fmt.Fprintf(w, "After the last attempt: %s (the queue forgot the key when the success was acked).\n\n", f.State)
	}
	t = newTable(w, "", "DIRECT REACTION", "BATON")
	t.row("Pods", fmt.Sprintf("%d/%d", d.Pods, r.Replicas), fmt.Sprintf("%d/%d", r.Baton.Pods, r.Replicas))
	t.row("Reconcile attempts", strconv.Itoa(d.Attempts), strconv.Itoa(r.Baton.Attempts))
	t.row("Unfinished work held by", d.RemainingWork, r.Baton.RemainingWork)
	return t.flush()
}

func printClean(w io.Writer, c *experiment.Cleaned) error {
	for _, p := range experiment.Prefixes() {
		fmt.Fprintf(w, "deleted %d objects under %s\n", c.ObjectsUnder[p], p)
	}
	for _, x := range experiment.Watches() {
		fmt.Fprintf(w, "forgot %d keys in queue %s\n", c.Keys[x.Queue], x.Queue)
	}
	return nil
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

func rate(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "/s" }

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func secs(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "s" }

func seqs(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = "#" + strconv.FormatInt(x, 10)
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// duration renders d briefly, as batonctl does: "850ms", "45s", "3m10s".
func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
}
