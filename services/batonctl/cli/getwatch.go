package cli

// get -w, kubectl's watch: the list get read, then a line (or a document)
// for each change of the objects it read, from an etcd watch that begins
// at the revision the list was read at, so no change between the two is
// missed or printed twice.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/services/batonctl/internal/apply"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
)

// watchFlags are get's watch flags, kubectl's.
type watchFlags struct {
	watch, only, events bool
}

func (w *watchFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&w.watch, "w", false, "after the list, print each change until interrupted")
	fs.BoolVar(&w.watch, "watch", false, "the same as -w")
	fs.BoolVar(&w.only, "watch-only", false, "watch without printing the list first")
	fs.BoolVar(&w.events, "output-watch-events", false, "with -w, say of each object whether the change ADDED, MODIFIED or DELETED it (an EVENT column, or {type, object} documents)")
}

// watchTarget is one read get made: the object at key, or with prefix
// every one under it, of typ, at revision rev.
type watchTarget struct {
	typ    resource.Type
	key    string
	prefix bool
	rev    int64
}

// watchOutput is how get -w prints.
type watchOutput struct {
	format        string // "", "wide", "json", "yaml" or "name"
	events        bool   // --output-watch-events
	skipList      bool   // --watch-only
	withNamespace bool   // -A
	qualify       bool   // several kinds: "kind/name"
}

// Watch event types, kubectl's.
const (
	eventAdded    = "ADDED"
	eventModified = "MODIFIED"
	eventDeleted  = "DELETED"
)

// watchEvent is one change of one object.
type watchEvent struct {
	typ   resource.Type
	event string
	obj   map[string]any
	err   error // the watch failed
}

// watchObjects prints the objects get read, unless --watch-only, then
// each change of the targets until ctx ends (Ctrl-C, which is no error)
// or the watch fails.
func (a *app) watchObjects(ctx context.Context, cli *clientv3.Client, targets []watchTarget, initial []stored, o watchOutput) error {
	p := &watchPrinter{a: a, o: o, streams: map[string]*printer.Stream{}}
	if !o.skipList {
		if err := p.list(initial); err != nil {
			return err
		}
	}
	// A watch that loses its etcd member's leader is ended by etcd
	// (WithRequireLeader) rather than left waiting on a member cut off
	// from the others.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	events := make(chan watchEvent)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the Wait: the senders see it
	for _, t := range targets {
		opts := []clientv3.OpOption{clientv3.WithRev(t.rev + 1), clientv3.WithPrevKV()}
		if t.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		wch := cli.Watch(wctx, t.key, opts...)
		wg.Go(func() {
			send := func(ev watchEvent) bool {
				select {
				case events <- ev:
					return true
				case <-wctx.Done():
					return false
				}
			}
			for resp := range wch {
				if err := resp.Err(); err != nil {
					send(watchEvent{err: a.watchError(t, err)})
					return
				}
				for _, ev := range resp.Events {
					if !send(eventOf(t.typ, ev)) {
						return
					}
				}
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return nil // Ctrl-C: the way to leave a watch
		case ev := <-events:
			if ev.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return ev.err
			}
			if err := p.change(ev); err != nil {
				return err
			}
		}
	}
}

// watchError words a watch that etcd ended.
func (a *app) watchError(t watchTarget, err error) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("watch %s from revision %d: etcd has compacted its history past it: run the command again (%w)", t.key, t.rev+1, err)
	}
	return fmt.Errorf("watch %s: %w", t.key, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err))
}

// eventOf turns an etcd event into the object it changed: the value
// written, or for a delete the last value (WithPrevKV), else as much as the
// key says.
func eventOf(typ resource.Type, ev *clientv3.Event) watchEvent {
	out := watchEvent{typ: typ, event: eventModified}
	value := ev.Kv.Value
	switch {
	case ev.Type == mvccpb.DELETE:
		out.event = eventDeleted
		value = nil
		if ev.PrevKv != nil {
			value = ev.PrevKv.Value
		}
	case ev.IsCreate():
		out.event = eventAdded
	}
	if obj, err := apply.Decode(value); err == nil {
		out.obj = obj
		return out
	}
	// Not a JSON object (or a delete etcd kept no value of): the key is
	// /registry/<resource>/<namespace>/<name>.
	rest := strings.TrimPrefix(string(ev.Kv.Key), typ.Prefix())
	ns, name, _ := strings.Cut(rest, "/")
	out.obj = map[string]any{"kind": typ.Kind, "metadata": map[string]any{"name": name, "namespace": ns}}
	return out
}

// watchPrinter prints the list and the changes of get -w.
type watchPrinter struct {
	a *app
	o watchOutput
	// streams are the tables, by kind; printed says whether anything was.
	streams map[string]*printer.Stream
	printed bool
}

// list prints the objects read first: a table per kind (rows of every
// later change line up with them), or a document or name each.
func (p *watchPrinter) list(objs []stored) error {
	if p.o.format != "" && p.o.format != "wide" {
		for _, o := range objs {
			if err := p.change(watchEvent{typ: o.typ, event: eventAdded, obj: o.value}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, t := range p.a.kinds().Known() {
		var rows [][]string
		for _, o := range objs {
			if o.typ.Kind == t.Kind {
				rows = append(rows, p.row(t, eventAdded, o.value))
			}
		}
		if len(rows) == 0 {
			continue
		}
		s := p.stream(t)
		for _, r := range rows {
			s.Fit(r...)
		}
		if p.printed {
			fmt.Fprintln(p.a.Stdout)
		}
		p.printed = true
		for _, r := range rows {
			if err := s.Row(r...); err != nil {
				return err
			}
		}
	}
	return nil
}

// change prints one change.
func (p *watchPrinter) change(ev watchEvent) error {
	switch p.o.format {
	case "json", "yaml":
		var doc any = ev.obj
		if p.o.events {
			doc = map[string]any{"type": ev.event, "object": ev.obj}
		}
		if p.o.format == "json" {
			return printer.JSON(p.a.Stdout, doc)
		}
		if p.printed {
			fmt.Fprintln(p.a.Stdout, "---")
		}
		p.printed = true
		return printer.YAML(p.a.Stdout, doc)
	case "name":
		name := ev.typ.Singular() + "/" + printer.Str(ev.obj, "metadata", "name")
		if p.o.events {
			name = ev.event + " " + name
		}
		_, err := fmt.Fprintln(p.a.Stdout, printer.Escape(name))
		return err
	}
	s := p.stream(ev.typ)
	if !s.Headed() && p.printed {
		fmt.Fprintln(p.a.Stdout)
	}
	p.printed = true
	return s.Row(p.row(ev.typ, ev.event, ev.obj)...)
}

// stream returns the table of typ's objects.
func (p *watchPrinter) stream(typ resource.Type) *printer.Stream {
	if s, ok := p.streams[typ.Kind]; ok {
		return s
	}
	headers, _ := p.a.columns(typ, p.o.format == "wide")
	if p.o.withNamespace {
		headers = append([]string{"NAMESPACE"}, headers...)
	}
	if p.o.events {
		headers = append([]string{"EVENT"}, headers...)
	}
	s := printer.NewStream(p.a.Stdout, headers...)
	if p.o.events {
		s.Fit(eventModified) // the widest event: every row's EVENT fits
	}
	p.streams[typ.Kind] = s
	return s
}

// row is obj's row in typ's table, as get prints it.
func (p *watchPrinter) row(typ resource.Type, event string, obj map[string]any) []string {
	_, row := p.a.columns(typ, p.o.format == "wide")
	cells := row(obj)
	if p.o.qualify && !isEvent(typ.Kind) { // an event's row has no NAME
		cells[0] = typ.Singular() + "/" + cells[0]
	}
	if p.o.withNamespace {
		cells = append([]string{printer.Str(obj, "metadata", "namespace")}, cells...)
	}
	if p.o.events {
		cells = append([]string{event}, cells...)
	}
	return cells
}
