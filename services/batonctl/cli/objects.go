package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/batonctl/internal/apply"
	"github.com/batonrun/baton/services/batonctl/internal/manifest"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
)

func cmdApply(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	var files stringsFlag
	fs.Var(&files, "f", "a manifest file, a folder of them, or - for stdin (repeatable)")
	recursive := fs.Bool("R", false, "read folders recursively")
	ns := fs.String("n", "", "namespace for objects whose manifest names none (default \"default\")")
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	if len(files) == 0 || len(pos) > 0 {
		return usagef("usage: batonctl apply -f FILE|DIR|- [-R] [-n NAMESPACE]")
	}
	// Every manifest is checked before anything is written, so a typo in
	// the third file does not leave the first two applied.
	objs, err := manifest.Read(files, *recursive, a.Stdin, *ns, a.manifestKinds(ctx))
	if err != nil {
		return err
	}
	cli, err := a.etcd(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		octx, cancel := a.opCtx(ctx)
		outcome, err := apply.Apply(octx, cli, o.Key(), o.Value, a.now())
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", o.Source, o.Ref(), a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)))
			continue
		}
		fmt.Fprintf(a.Stdout, "%s %s\n", o.Ref(), outcome)
	}
	return errors.Join(errs...)
}

// kinds returns the command's table of kinds: the reference kinds, and the
// kinds controllers declare, which it reads from etcd (/baton/rules/) the
// first time the command names a kind it does not know, as kubectl
// discovers an API server's resources.
func (a *app) kinds() *resource.Table {
	if a.table == nil {
		a.table = resource.NewTable(func(ctx context.Context) ([]kinds.Declaration, error) {
			cli, err := a.etcd(ctx)
			if err != nil {
				return nil, err
			}
			octx, cancel := a.opCtx(ctx)
			defer cancel()
			decls, err := resource.Declared(octx, cli)
			return decls, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)
		})
	}
	return a.table
}

// lookup resolves a resource named on the command line. An unknown name is
// a usage error, unless the declared kinds could not be read.
func (a *app) lookup(ctx context.Context, word string) (resource.Type, error) {
	t, err := a.kinds().Lookup(ctx, word)
	if err == nil {
		return t, nil
	}
	var u *unreachableError
	if errors.As(err, &u) {
		return resource.Type{}, err
	}
	return resource.Type{}, usageError{err.Error()}
}

// manifestKinds resolves the kinds of manifests through the command's table.
func (a *app) manifestKinds(ctx context.Context) manifest.Kinds {
	return func(kind string) (resource.Type, error) { return a.kinds().ByKind(ctx, kind) }
}

// getFlags are the flags shared by get, delete and describe.
type getFlags struct {
	ns     string
	all    bool
	output string
}

func (g *getFlags) register(fs *flag.FlagSet, withOutput bool) {
	fs.StringVar(&g.ns, "n", resource.DefaultNamespace, "namespace")
	fs.StringVar(&g.ns, "namespace", resource.DefaultNamespace, "namespace")
	if withOutput {
		fs.BoolVar(&g.all, "A", false, "every namespace")
		fs.StringVar(&g.output, "o", "", "output format: json, yaml or name (default: a table)")
	}
}

// stored is one object read from etcd.
type stored struct {
	typ   resource.Type
	key   string
	value map[string]any
}

func (s stored) namespace() string { return printer.Str(s.value, "metadata", "namespace") }
func (s stored) name() string      { return printer.Str(s.value, "metadata", "name") }

// list reads the objects of typ in ns ("" = all), in key order.
func (a *app) list(ctx context.Context, cli *clientv3.Client, typ resource.Type, ns string) ([]stored, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := cli.Get(octx, typ.NamespacePrefix(ns), clientv3.WithPrefix())
	if err != nil {
		return nil, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)
	}
	out := make([]stored, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		v, err := apply.Decode(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: stored value is not a JSON object: %w", kv.Key, err)
		}
		out = append(out, stored{typ: typ, key: string(kv.Key), value: v})
	}
	return out, nil
}

// getOne reads one object; a NotFound error names it as kubectl does.
func (a *app) getOne(ctx context.Context, cli *clientv3.Client, typ resource.Type, ns, name string) (stored, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	key := typ.Key(ns, name)
	resp, err := cli.Get(octx, key)
	if err != nil {
		return stored{}, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)
	}
	if len(resp.Kvs) == 0 {
		return stored{}, fmt.Errorf("%s %q not found in namespace %q", typ.Resource, name, ns)
	}
	v, err := apply.Decode(resp.Kvs[0].Value)
	if err != nil {
		return stored{}, fmt.Errorf("%s: stored value is not a JSON object: %w", key, err)
	}
	return stored{typ: typ, key: key, value: v}, nil
}

func cmdGet(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	var g getFlags
	g.register(fs, true)
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("usage: batonctl get <resource> [name] [-n NAMESPACE | -A] [-o json|yaml|name]")
	}
	switch g.output {
	case "", "json", "yaml", "name", "wide":
	default:
		return usagef("unknown output format %q (json, yaml or name)", g.output)
	}
	// "all" (the reference kinds, as kubectl's all leaves out custom
	// resources) or a comma-separated list ("deploy,rs"), as kubectl.
	var types []resource.Type
	for _, word := range strings.Split(pos[0], ",") {
		if strings.ToLower(word) == "all" {
			types = append(types, resource.Reference()...)
			continue
		}
		t, err := a.lookup(ctx, word)
		if err != nil {
			return err
		}
		types = append(types, t)
	}
	if len(types) > 1 && len(pos) == 2 {
		return usagef("a name needs exactly one resource, not %q", pos[0])
	}
	cli, err := a.etcd(ctx)
	if err != nil {
		return err
	}
	ns := g.ns
	if g.all {
		ns = ""
	}
	var objs []stored
	if len(pos) == 2 {
		if g.all {
			return usagef("a name needs a namespace, not -A")
		}
		o, err := a.getOne(ctx, cli, types[0], ns, pos[1])
		if err != nil {
			return err
		}
		objs = []stored{o}
		if g.output == "json" {
			return printer.JSON(a.Stdout, o.value)
		}
		if g.output == "yaml" {
			return printer.YAML(a.Stdout, o.value)
		}
	} else {
		for _, t := range types {
			l, err := a.list(ctx, cli, t, ns)
			if err != nil {
				return err
			}
			objs = append(objs, l...)
		}
	}
	switch g.output {
	case "json", "yaml":
		items := make([]any, len(objs))
		for i, o := range objs {
			items[i] = o.value
		}
		list := map[string]any{"kind": "List", "items": items}
		if g.output == "json" {
			return printer.JSON(a.Stdout, list)
		}
		return printer.YAML(a.Stdout, list)
	case "name":
		for _, o := range objs {
			fmt.Fprintf(a.Stdout, "%s/%s\n", o.typ.Singular(), o.name())
		}
		return nil
	}
	if len(objs) == 0 {
		if ns == "" {
			fmt.Fprintln(a.Stderr, "No resources found.")
		} else {
			fmt.Fprintf(a.Stderr, "No resources found in %s namespace.\n", ns)
		}
		return nil
	}
	return a.printTables(objs, g.all, len(types) > 1)
}

// printTables prints objects grouped by kind, one table each, with a
// NAMESPACE column for -A and "kind/name" names for `get all`, as kubectl.
func (a *app) printTables(objs []stored, withNamespace, qualify bool) error {
	first := true
	for _, t := range a.kinds().Known() {
		var rows []stored
		for _, o := range objs {
			if o.typ.Kind == t.Kind {
				rows = append(rows, o)
			}
		}
		if len(rows) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(a.Stdout)
		}
		first = false
		headers, row := printer.Columns(t.Kind, a.now())
		if withNamespace {
			headers = append([]string{"NAMESPACE"}, headers...)
		}
		tbl := printer.NewTable(a.Stdout, headers...)
		for _, o := range rows {
			cells := row(o.value)
			if qualify {
				cells[0] = t.Singular() + "/" + cells[0]
			}
			if withNamespace {
				cells = append([]string{o.namespace()}, cells...)
			}
			tbl.Row(cells...)
		}
		if err := tbl.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func cmdDelete(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	var g getFlags
	g.register(fs, false)
	var files stringsFlag
	fs.Var(&files, "f", "delete the objects in these manifests (file, folder or -)")
	recursive := fs.Bool("R", false, "read folders recursively")
	ignore := fs.Bool("ignore-not-found", false, "treat a missing object as deleted")
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	type target struct {
		typ       resource.Type
		ns, name  string
		uid       string // from a manifest: delete only that object
		describes string // for errors: where it came from
	}
	var targets []target
	switch {
	case len(files) > 0 && len(pos) == 0:
		ns := ""
		if fs.Lookup("n").Value.String() != resource.DefaultNamespace || fs.Lookup("namespace").Value.String() != resource.DefaultNamespace {
			ns = g.ns
		}
		objs, err := manifest.Read(files, *recursive, a.Stdin, ns, a.manifestKinds(ctx))
		if err != nil {
			return err
		}
		for _, o := range objs {
			uid := printer.Str(o.Value, "metadata", "uid")
			targets = append(targets, target{o.Type, o.Namespace, o.Name, uid, o.Source.String() + ": "})
		}
	case len(files) == 0 && len(pos) >= 2:
		t, err := a.lookup(ctx, pos[0])
		if err != nil {
			return err
		}
		for _, name := range pos[1:] {
			targets = append(targets, target{t, g.ns, name, "", ""})
		}
	default:
		return usagef("usage: batonctl delete <resource> <name>... [-n NAMESPACE] | delete -f FILE|DIR|-")
	}
	cli, err := a.etcd(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range targets {
		octx, cancel := a.opCtx(ctx)
		err := apply.Delete(octx, cli, t.typ.Key(t.ns, t.name), t.uid)
		cancel()
		switch {
		case errors.Is(err, apply.ErrNotFound) && *ignore:
		case errors.Is(err, apply.ErrNotFound):
			errs = append(errs, fmt.Errorf("%s%s %q not found in namespace %q", t.describes, t.typ.Resource, t.name, t.ns))
		case errors.Is(err, apply.ErrUIDMismatch):
			errs = append(errs, fmt.Errorf("%s%s/%s: not deleted: %w", t.describes, t.typ.Singular(), t.name, err))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s%w", t.describes, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)))
		default:
			fmt.Fprintf(a.Stdout, "%s/%s deleted\n", t.typ.Singular(), t.name)
		}
	}
	return errors.Join(errs...)
}

func cmdDescribe(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("describe", flag.ContinueOnError)
	var g getFlags
	g.register(fs, false)
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("usage: batonctl describe <resource> <name> [-n NAMESPACE]")
	}
	typ, err := a.lookup(ctx, pos[0])
	if err != nil {
		return err
	}
	cli, err := a.etcd(ctx)
	if err != nil {
		return err
	}
	obj, err := a.getOne(ctx, cli, typ, g.ns, pos[1])
	if err != nil {
		return err
	}
	v := obj.value
	w := a.Stdout
	field := func(name, value string) { fmt.Fprintf(w, "%-14s%s\n", name+":", value) }
	field("Name", obj.name())
	field("Namespace", obj.namespace())
	field("Kind", typ.Kind)
	field("Key", obj.key)
	field("UID", orNone(printer.Str(v, "metadata", "uid")))
	field("Generation", fmt.Sprint(printer.Int(v, "metadata", "generation")))
	if ts := printer.Str(v, "metadata", "creationTimestamp"); ts != "" {
		field("Created", ts+" ("+printer.Age(ts, a.now())+" ago)")
	}
	field("Labels", labels(v))
	field("Owner", orNone(printer.Owner(v)))
	for _, part := range []string{"spec", "status"} {
		fmt.Fprintf(w, "%s:\n", strings.ToUpper(part[:1])+part[1:])
		if val, ok := v[part]; ok {
			var b strings.Builder
			if err := printer.YAML(&b, val); err != nil {
				return err
			}
			for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
				fmt.Fprintln(w, "  "+line)
			}
		} else {
			fmt.Fprintln(w, "  <none>")
		}
	}

	// The queue item: what the controller is doing about this object.
	var errs []error
	qkey := resource.QueueKey(obj.namespace(), obj.name())
	queue := a.kinds().Queue(typ)
	fmt.Fprintf(w, "Queue item (queue %s, key %s):\n", queue, qkey)
	if err := a.describeItem(ctx, queue, qkey); err != nil {
		fmt.Fprintf(w, "  <unavailable: %v>\n", err)
		errs = append(errs, err)
	}

	// The children, of the kinds its controller declares it owns, found by
	// their ownerReferences; and theirs (a Deployment's pods belong to its
	// ReplicaSets).
	for _, ct := range a.kinds().Children(typ) {
		owned, err := a.owned(ctx, cli, ct, typ, []stored{obj})
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		fmt.Fprintf(w, "Children (%s):\n", ct.Resource)
		if err := a.indentedTable(ct, owned); err != nil {
			return err
		}
		if len(owned) == 0 {
			continue
		}
		for _, gt := range a.kinds().Children(ct) {
			theirs, err := a.owned(ctx, cli, gt, ct, owned)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			fmt.Fprintf(w, "%s of those %s:\n", strings.ToUpper(gt.Resource[:1])+gt.Resource[1:], ct.Resource)
			if err := a.indentedTable(gt, theirs); err != nil {
				return err
			}
		}
	}
	return errors.Join(errs...)
}

// owned lists the objects of typ in the owners' namespace that one of
// owners (of type ownerType) owns, in key order.
func (a *app) owned(ctx context.Context, cli *clientv3.Client, typ, ownerType resource.Type, owners []stored) ([]stored, error) {
	all, err := a.list(ctx, cli, typ, owners[0].namespace())
	if err != nil {
		return nil, err
	}
	var out []stored
	for _, o := range all {
		for _, owner := range owners {
			if ownedBy(o.value, ownerType.Kind, owner.name(), printer.Str(owner.value, "metadata", "uid")) {
				out = append(out, o)
				break
			}
		}
	}
	return out, nil
}

// indentedTable prints objs of typ as describe does: a table indented two
// spaces, or "<none>".
func (a *app) indentedTable(typ resource.Type, objs []stored) error {
	if len(objs) == 0 {
		fmt.Fprintln(a.Stdout, "  <none>")
		return nil
	}
	headers, row := printer.Columns(typ.Kind, a.now())
	var b strings.Builder
	tbl := printer.NewTable(&b, headers...)
	for _, o := range objs {
		tbl.Row(row(o.value)...)
	}
	if err := tbl.Flush(); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintln(a.Stdout, "  "+line)
	}
	return nil
}

func (a *app) describeItem(ctx context.Context, queue, key string) error {
	q, err := a.queue()
	if err != nil {
		return err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	item, err := q.Inspect(octx, queue, key)
	if err != nil {
		return a.unreachable("the queue", a.queueAddr, "--queue-addr", err)
	}
	printItem(a.Stdout, "  ", item, a.now())
	return nil
}

// ownedBy reports whether obj names the owner in its ownerReferences: by
// kind and name, and by uid when both sides have one (a new owner with the
// same name does not adopt an old owner's children).
func ownedBy(obj map[string]any, kind, name, uid string) bool {
	meta, _ := obj["metadata"].(map[string]any)
	refs, _ := meta["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if ref == nil || ref["kind"] != kind || ref["name"] != name {
			continue
		}
		if ru, _ := ref["uid"].(string); ru != "" && uid != "" && ru != uid {
			continue
		}
		return true
	}
	return false
}

func labels(v map[string]any) string {
	meta, _ := v["metadata"].(map[string]any)
	l, _ := meta["labels"].(map[string]any)
	if len(l) == 0 {
		return "<none>"
	}
	parts := make([]string, 0, len(l))
	for k, val := range l {
		parts = append(parts, fmt.Sprintf("%s=%v", k, val))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
