package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/batonctl/internal/apply"
	"github.com/batonrun/baton/services/batonctl/internal/manifest"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
)

func setupApply(fs *flag.FlagSet, a *app) runFunc {
	var files stringsFlag
	fs.Var(&files, "f", "a manifest file, a folder of them, or - for stdin (repeatable)")
	recursive := fs.Bool("R", false, "read folders recursively")
	ns := fs.String("n", "", "namespace for objects whose manifest names none (default \"default\")")
	return func(ctx context.Context, pos []string) error {
		if len(files) == 0 || len(pos) > 0 {
			return usagef("usage: batonctl apply -f FILE|DIR|- [-R] [-n NAMESPACE]")
		}
		// Every manifest is checked before anything is written, so a typo
		// in the third file does not leave the first two applied.
		objs, err := a.readManifests(ctx, files, *recursive, *ns, "applied")
		if err != nil {
			return err
		}
		cli, err := a.etcd(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for i, o := range objs {
			if ctx.Err() != nil {
				// Interrupted between two writes: the objects before
				// are applied (printed), and no more.
				return errors.Join(append(errs, fmt.Errorf("interrupted (%v) after %d of %d objects: %s: %s and those after it were not applied", context.Cause(ctx), i, len(objs), o.Source, o.Ref()))...)
			}
			octx, cancel := a.opCtx(ctx)
			outcome, err := apply.Apply(octx, cli, o.Key(), o.Value, a.now())
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", o.Source, o.Ref(), a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)))
				continue
			}
			fmt.Fprintf(a.Stdout, "%s %s\n", printer.Escape(o.Ref()), outcome)
		}
		return errors.Join(errs...)
	}
}

// readManifests reads the manifests of apply -f or delete -f (done:
// "applied" or "deleted"). A command interrupted while it reads them (a
// FIFO, stdin, the declared kinds) writes nothing, and says so.
func (a *app) readManifests(ctx context.Context, files []string, recursive bool, ns, done string) ([]manifest.Object, error) {
	objs, err := manifest.Read(ctx, files, recursive, a.Stdin, ns, a.manifestKinds(ctx))
	switch {
	case errors.As(err, new(*manifest.Interrupted)):
		return nil, fmt.Errorf("%w; nothing was %s", err, done)
	case ctx.Err() != nil:
		return nil, errors.Join(err, fmt.Errorf("interrupted (%v): nothing was %s", context.Cause(ctx), done))
	}
	return objs, err
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

// manifestKinds resolves the kinds of manifests, and their schemas,
// through the command's table.
func (a *app) manifestKinds(ctx context.Context) manifest.Kinds {
	return manifest.TableKinds(ctx, a.kinds())
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
	objs, _, err := a.read(ctx, cli, typ, typ.NamespacePrefix(ns), true)
	return objs, err
}

// getOne reads one object; a NotFound error names it as kubectl does.
func (a *app) getOne(ctx context.Context, cli *clientv3.Client, typ resource.Type, ns, name string) (stored, error) {
	o, _, err := a.getOneAt(ctx, cli, typ, ns, name)
	return o, err
}

// getOneAt is getOne, with the revision of etcd it read at.
func (a *app) getOneAt(ctx context.Context, cli *clientv3.Client, typ resource.Type, ns, name string) (stored, int64, error) {
	objs, rev, err := a.read(ctx, cli, typ, typ.Key(ns, name), false)
	if err != nil {
		return stored{}, 0, err
	}
	if len(objs) == 0 {
		return stored{}, 0, notFound(typ, ns, name)
	}
	return objs[0], rev, nil
}

// notFound is the error of an object that does not exist, in kubectl's
// words.
func notFound(typ resource.Type, ns, name string) error {
	return fmt.Errorf("%s %q not found in namespace %q", typ.Resource, name, ns)
}

// read reads the object of typ at key, or with prefix every one under it,
// in key order, and the revision of etcd it read at (where a watch of the
// same keys begins).
func (a *app) read(ctx context.Context, cli *clientv3.Client, typ resource.Type, key string, prefix bool) ([]stored, int64, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := cli.Get(octx, key, opts...)
	if err != nil {
		return nil, 0, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)
	}
	out := make([]stored, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		v, err := apply.Decode(kv.Value)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: stored value is not a JSON object: %w", kv.Key, err)
		}
		out = append(out, stored{typ: typ, key: string(kv.Key), value: v})
	}
	return out, resp.Header.Revision, nil
}

// objectRef is one object named on the command line.
type objectRef struct {
	typ  resource.Type
	name string
}

func (r objectRef) String() string { return r.typ.Singular() + "/" + r.name }

// objectRefs resolves the objects pos names, in either of kubectl's forms:
// TYPE NAME… or TYPE/NAME… (the form -o name prints), which may name
// several types. With the first form and no name, it returns the type
// alone (refs is empty). Mixing the forms is a usage error.
func (a *app) objectRefs(ctx context.Context, pos []string) (typ resource.Type, refs []objectRef, err error) {
	if len(pos) == 0 {
		return resource.Type{}, nil, usagef("no resource given")
	}
	if !strings.Contains(pos[0], "/") {
		if typ, err = a.lookup(ctx, pos[0]); err != nil {
			return resource.Type{}, nil, err
		}
		for _, name := range pos[1:] {
			if strings.Contains(name, "/") {
				return resource.Type{}, nil, usagef("%q: give either TYPE NAME… or TYPE/NAME…, not both (a resource type was given first: %s)", name, pos[0])
			}
			refs = append(refs, objectRef{typ, name})
		}
		return typ, refs, nil
	}
	for _, arg := range pos {
		word, name, ok := strings.Cut(arg, "/")
		if !ok || word == "" || name == "" || strings.Contains(name, "/") {
			return resource.Type{}, nil, usagef("%q is not TYPE/NAME (deploy/web): give every object as TYPE/NAME, or the type once and the names after it", arg)
		}
		t, err := a.lookup(ctx, word)
		if err != nil {
			return resource.Type{}, nil, err
		}
		refs = append(refs, objectRef{t, name})
	}
	return refs[0].typ, refs, nil
}

func setupGet(fs *flag.FlagSet, a *app) runFunc {
	var g getFlags
	g.register(fs, true)
	var w watchFlags
	w.register(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) < 1 {
			return usagef("usage: batonctl get <resource>[,<resource>…] [NAME…] | get TYPE/NAME… [-n NAMESPACE | -A] [-o json|yaml|name|wide] [-w]")
		}
		switch g.output {
		case "", "json", "yaml", "name", "wide":
		default:
			return usagef("unknown output format %q (json, yaml, name or wide)", g.output)
		}
		if (w.only || w.events) && !w.watch {
			w.watch = true // kubectl's --watch-only watches too
		}
		// "all" (the reference kinds, as kubectl's all leaves out custom
		// resources), a comma-separated list ("deploy,rs"), as kubectl; or
		// objects named.
		var (
			types []resource.Type
			refs  []objectRef
		)
		if strings.Contains(pos[0], "/") || !strings.Contains(pos[0], ",") && strings.ToLower(pos[0]) != "all" {
			t, r, err := a.objectRefs(ctx, pos)
			if err != nil {
				return err
			}
			types, refs = []resource.Type{t}, r
			for _, ref := range r {
				if !slices.ContainsFunc(types, func(t resource.Type) bool { return t.Kind == ref.typ.Kind }) {
					types = append(types, ref.typ)
				}
			}
		} else {
			if len(pos) > 1 {
				return usagef("a name needs exactly one resource, not %q", pos[0])
			}
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
		}
		ns := g.ns
		if g.all {
			if len(refs) > 0 {
				return usagef("a name needs a namespace, not -A")
			}
			ns = ""
		}
		cli, err := a.etcd(ctx)
		if err != nil {
			return err
		}
		var (
			objs    []stored
			targets []watchTarget
			errs    []error
		)
		if len(refs) > 0 {
			for _, r := range refs {
				o, rev, err := a.getOneAt(ctx, cli, r.typ, ns, r.name)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				objs = append(objs, o)
				targets = append(targets, watchTarget{typ: r.typ, key: o.key, rev: rev})
			}
			if len(objs) == 0 || w.watch && len(errs) > 0 {
				return errors.Join(errs...)
			}
		} else {
			for _, t := range types {
				key := t.NamespacePrefix(ns)
				l, rev, err := a.read(ctx, cli, t, key, true)
				if err != nil {
					return err
				}
				if isEvent(t.Kind) {
					sortEvents(l)
				}
				objs = append(objs, l...)
				targets = append(targets, watchTarget{typ: t, key: key, prefix: true, rev: rev})
			}
		}
		if w.watch {
			return a.watchObjects(ctx, cli, targets, objs, watchOutput{
				format: g.output, events: w.events, skipList: w.only, withNamespace: g.all, qualify: len(types) > 1,
			})
		}
		if err := a.printObjects(objs, g, ns, len(types) > 1, len(refs) == 1); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
}

// printObjects prints what get read: a table per kind, the objects as a
// List in JSON or YAML (the object itself when one was named), or their
// names.
func (a *app) printObjects(objs []stored, g getFlags, ns string, qualify, one bool) error {
	switch g.output {
	case "json", "yaml":
		var v any
		if one && len(objs) == 1 {
			v = objs[0].value
		} else {
			items := make([]any, len(objs))
			for i, o := range objs {
				items[i] = o.value
			}
			v = map[string]any{"kind": "List", "items": items}
		}
		if g.output == "json" {
			return printer.JSON(a.Stdout, v)
		}
		return printer.YAML(a.Stdout, v)
	case "name":
		for _, o := range objs {
			fmt.Fprintln(a.Stdout, printer.Escape(o.typ.Singular()+"/"+o.name()))
		}
		return nil
	}
	if len(objs) == 0 {
		a.noResources(ns)
		return nil
	}
	return a.printTables(objs, g.all, qualify, g.output == "wide")
}

// noResources says, as kubectl does, that a list found nothing.
func (a *app) noResources(ns string) {
	if ns == "" {
		fmt.Fprintln(a.Stderr, "No resources found.")
	} else {
		fmt.Fprintf(a.Stderr, "No resources found in %s namespace.\n", printer.Escape(ns))
	}
}

// printTables prints objects grouped by kind, one table each, with a
// NAMESPACE column for -A and "kind/name" names for `get all`, as kubectl;
// wide adds the columns a declaration gives for -o wide.
func (a *app) printTables(objs []stored, withNamespace, qualify, wide bool) error {
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
		headers, row := a.columns(t, wide)
		if withNamespace {
			headers = append([]string{"NAMESPACE"}, headers...)
		}
		tbl := printer.NewTable(a.Stdout, headers...)
		for _, o := range rows {
			cells := row(o.value)
			if qualify && !isEvent(t.Kind) { // an event's row has no NAME
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

func setupDelete(fs *flag.FlagSet, a *app) runFunc {
	var g getFlags
	g.register(fs, false)
	var files stringsFlag
	fs.Var(&files, "f", "delete the objects in these manifests (file, folder or -)")
	recursive := fs.Bool("R", false, "read folders recursively")
	ignore := fs.Bool("ignore-not-found", false, "treat a missing object as deleted")
	cascadeFlag := fs.String("cascade", string(apply.Background), "what becomes of the objects it owns: background (the garbage collector deletes them after it), foreground (they go first; it waits, marked for deletion) or orphan (they stay, owned by nobody)")
	return func(ctx context.Context, pos []string) error {
		cascade, err := apply.ParseCascade(*cascadeFlag)
		if err != nil {
			return usagef("%v", err)
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
			if flagSet(fs, "n") || flagSet(fs, "namespace") {
				ns = g.ns
			}
			objs, err := a.readManifests(ctx, files, *recursive, ns, "deleted")
			if err != nil {
				return err
			}
			for _, o := range objs {
				uid := printer.Str(o.Value, "metadata", "uid")
				targets = append(targets, target{o.Type, o.Namespace, o.Name, uid, o.Source.String() + ": "})
			}
		case len(files) == 0 && len(pos) >= 1:
			_, refs, err := a.objectRefs(ctx, pos)
			if err != nil {
				return err
			}
			if len(refs) == 0 {
				return usagef("delete %s needs the names of the objects to delete (batonctl get %s lists them)", pos[0], pos[0])
			}
			for _, r := range refs {
				targets = append(targets, target{r.typ, g.ns, r.name, "", ""})
			}
		default:
			return usagef("usage: batonctl delete <resource> <name>… | delete TYPE/NAME… [-n NAMESPACE] | delete -f FILE|DIR|-")
		}
		cli, err := a.etcd(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for i, t := range targets {
			if ctx.Err() != nil {
				return errors.Join(append(errs, fmt.Errorf("interrupted (%v) after %d of %d objects: %s%s/%s and those after it were not deleted", context.Cause(ctx), i, len(targets), t.describes, t.typ.Singular(), t.name))...)
			}
			octx, cancel := a.opCtx(ctx)
			d, err := apply.Delete(octx, cli, t.typ.Key(t.ns, t.name), t.uid, cascade)
			cancel()
			switch {
			case errors.Is(err, apply.ErrNotFound) && *ignore:
			case errors.Is(err, apply.ErrNotFound):
				errs = append(errs, fmt.Errorf("%s%w", t.describes, notFound(t.typ, t.ns, t.name)))
			case errors.Is(err, apply.ErrUIDMismatch):
				errs = append(errs, fmt.Errorf("%s%s/%s: not deleted: %w", t.describes, t.typ.Singular(), t.name, err))
			case err != nil:
				errs = append(errs, fmt.Errorf("%s%w", t.describes, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err)))
			default:
				fmt.Fprintf(a.Stdout, "%s %s\n", printer.Escape(t.typ.Singular()+"/"+t.name), d)
			}
		}
		return errors.Join(errs...)
	}
}

func setupDescribe(fs *flag.FlagSet, a *app) runFunc {
	var g getFlags
	g.register(fs, false)
	return func(ctx context.Context, pos []string) error {
		if len(pos) == 0 {
			return usagef("usage: batonctl describe <resource> <name>… | describe TYPE/NAME… [-n NAMESPACE]")
		}
		_, refs, err := a.objectRefs(ctx, pos)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			return usagef("describe %s needs the name of an object (batonctl get %s lists them)", pos[0], pos[0])
		}
		cli, err := a.etcd(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for i, r := range refs {
			if i > 0 {
				fmt.Fprintln(a.Stdout)
			}
			if err := a.describe(ctx, cli, r.typ, g.ns, r.name); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// describe prints one object, its queue item, its children and the events
// about it.
func (a *app) describe(ctx context.Context, cli *clientv3.Client, typ resource.Type, ns, name string) error {
	obj, err := a.getOne(ctx, cli, typ, ns, name)
	if err != nil {
		return err
	}
	v := obj.value
	w := a.Stdout
	field := func(name, value string) { fmt.Fprintf(w, "%-14s%s\n", name+":", printer.Escape(value)) }
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
	fmt.Fprintf(w, "Queue item (queue %s, key %s):\n", printer.Escape(queue), printer.Escape(qkey))
	if err := a.describeItem(ctx, queue, qkey); err != nil {
		fmt.Fprintf(w, "  <unavailable: %s>\n", printer.Escape(err.Error()))
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
		fmt.Fprintf(w, "Children (%s):\n", printer.Escape(ct.Resource))
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
			fmt.Fprintf(w, "%s of those %s:\n", printer.Escape(strings.ToUpper(gt.Resource[:1])+gt.Resource[1:]), printer.Escape(ct.Resource))
			if err := a.indentedTable(gt, theirs); err != nil {
				return err
			}
		}
	}

	// What controllers recorded about it, last.
	if err := a.describeEvents(ctx, cli, obj); err != nil {
		return errors.Join(append(errs, err)...)
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
	headers, row := a.columns(typ, false)
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
