package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

// Events are objects of the kind Event (package sdk/events writes them):
// `get events` lists them as any kind, in the order they last happened,
// and describe ends with those about the object it describes, as
// kubectl's does.

// sortEvents orders events by when they were last recorded, oldest first,
// so that the newest is the last line, next to the prompt (kubectl events'
// order). Events recorded at the same time keep their key order.
func sortEvents(evs []stored) {
	slices.SortStableFunc(evs, func(a, b stored) int { return lastSeen(a).Compare(lastSeen(b)) })
}

// lastSeen is when ev was last recorded: its lastTimestamp, or, without
// one, its firstTimestamp or its creationTimestamp; the zero time when it
// has none of them.
func lastSeen(ev stored) time.Time {
	for _, path := range [][]string{{"lastTimestamp"}, {"firstTimestamp"}, {"metadata", "creationTimestamp"}} {
		if t, err := time.Parse(time.RFC3339Nano, printer.Str(ev.value, path...)); err == nil {
			return t
		}
	}
	return time.Time{}
}

// isEvent reports whether objects of kind are Events.
func isEvent(kind string) bool { return kind == kinds.Event }

// about reports whether ev is about the object of kind obj.typ named like
// obj in its namespace: by uid too when both sides have one, so that the
// events of an earlier object of the same name are not shown as this
// one's.
func about(ev, obj stored) bool {
	v := ev.value
	if printer.Str(v, "involvedObject", "kind") != obj.typ.Kind ||
		printer.Str(v, "involvedObject", "name") != obj.name() ||
		printer.Str(v, "involvedObject", "namespace") != obj.namespace() {
		return false
	}
	evUID, objUID := printer.Str(v, "involvedObject", "uid"), printer.Str(obj.value, "metadata", "uid")
	return evUID == "" || objUID == "" || evUID == objUID
}

// describeEvents prints the Events section of describe: the events about
// obj, oldest first, in kubectl's columns, or "<none>".
func (a *app) describeEvents(ctx context.Context, cli *clientv3.Client, obj stored) error {
	all, err := a.list(ctx, cli, kinds.EventKind(), obj.namespace())
	if err != nil {
		return err
	}
	var evs []stored
	for _, ev := range all {
		if about(ev, obj) {
			evs = append(evs, ev)
		}
	}
	w := a.Stdout
	if len(evs) == 0 {
		fmt.Fprintf(w, "%-14s%s\n", "Events:", "<none>")
		return nil
	}
	sortEvents(evs)
	fmt.Fprintln(w, "Events:")
	var b strings.Builder
	tbl := printer.NewTable(&b, "Type", "Reason", "Age", "From", "Message")
	tbl.Row("----", "------", "----", "----", "-------")
	now := a.now()
	for _, ev := range evs {
		v := ev.value
		tbl.Row(printer.Str(v, "type"), printer.Str(v, "reason"), printer.EventAge(v, now),
			eventSource(v), printer.OneLine(printer.Str(v, "message")))
	}
	if err := tbl.Flush(); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintln(w, "  "+line)
	}
	return nil
}

// eventSource is who recorded the event, as kubectl's From column has it:
// the component, and the host after a comma when there is one.
func eventSource(v map[string]any) string {
	from := printer.Str(v, "source", "component")
	if from == "" {
		from = printer.Str(v, "reportingController")
	}
	if host := printer.Str(v, "source", "host"); host != "" {
		from += ", " + host
	}
	if from == "" {
		return "-"
	}
	return from
}
