// Package resource is batonctl's table of the object kinds it knows. The
// table is client/kinds': the reference kinds, each with its etcd resource
// name (the second segment of /registry/<resource>/<namespace>/<name>), its
// short names, the kinds its controller owns and the queue that reconciles
// it; and the kinds that controllers declare in etcd under /baton/rules/,
// which a Table discovers the first time a command names a kind it does not
// know, as kubectl discovers an API server's resources.
package resource

import (
	"context"
	"fmt"
	"strings"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/services/batonctl/internal/suggest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultNamespace is the namespace of an object whose manifest names none.
const DefaultNamespace = "default"

// Type describes one kind of object: client/kinds' Kind (its Key,
// NamespacePrefix and Singular).
type Type = kinds.Kind

// QueueKey is the key under which the observer announces an object to its
// controller's queue: "namespace/name".
func QueueKey(namespace, name string) string { return namespace + "/" + name }

// Discoverer lists the declarations controllers have published.
type Discoverer func(ctx context.Context) ([]kinds.Declaration, error)

// Table is the kinds one batonctl command knows: the reference kinds, and
// the declared ones once a lookup has missed and discovered them. It is not
// safe for concurrent use.
type Table struct {
	set      *kinds.Set
	discover Discoverer
	// done is set once discovery has run; err is what it failed with.
	done bool
	err  error
	// validators are the declared kinds' validators, compiled once.
	validators map[string]*schema.Validator
}

// NewTable returns the reference kinds; discover, if not nil, is asked
// once, on the first lookup that misses, for the declared kinds.
func NewTable(discover Discoverer) *Table {
	return &Table{set: kinds.NewSet(), discover: discover}
}

// Discover adds the declared kinds, once; later calls return the first
// call's error.
func (t *Table) Discover(ctx context.Context) error {
	if t.done || t.discover == nil {
		return t.err
	}
	t.done = true
	decls, err := t.discover(ctx)
	for _, d := range decls {
		t.set.Declare(d)
	}
	if err != nil {
		t.err = fmt.Errorf("discover declared kinds: %w", err)
	}
	return t.err
}

// Lookup returns the type named by a command-line word: its resource, an
// alias or its kind, in any case. A word no known kind answers to sends
// the table to discover the declared kinds, then it is looked up again.
func (t *Table) Lookup(ctx context.Context, name string) (Type, error) {
	k, err := t.set.Lookup(name)
	if err == nil {
		return k, nil
	}
	if derr := t.Discover(ctx); derr != nil {
		return Type{}, fmt.Errorf("%w; %w", t.unknown(name), derr)
	}
	if k, err := t.set.Lookup(name); err == nil {
		return k, nil
	}
	return Type{}, t.unknown(name)
}

// unknown is the error of a name no known kind answers to: it names the
// known resources, each with its shortest alias, and the names the word
// was probably meant to be.
func (t *Table) unknown(name string) error {
	known := make([]string, 0, len(t.set.All()))
	for _, k := range t.set.All() {
		s := k.Resource
		if len(k.Aliases) > 0 {
			s += " (" + k.Aliases[len(k.Aliases)-1] + ")"
		}
		known = append(known, s)
	}
	msg := fmt.Sprintf("unknown resource %q", name)
	if p := suggest.Phrase(suggest.Closest(name, t.Names())); p != "" {
		msg += ": " + p
	}
	return fmt.Errorf("%s (known: %s)", msg, strings.Join(known, ", "))
}

// Names returns every name the kinds known so far answer to on a command
// line (each kind's resource, singular and aliases), in the order of
// Known.
func (t *Table) Names() []string {
	var out []string
	for _, k := range t.set.All() {
		out = append(out, k.Names()...)
	}
	return out
}

// ByKind returns the type whose Kind is kind (case-sensitive, as in a
// manifest), discovering the declared kinds if kind is not known yet. The
// error names the known kinds.
func (t *Table) ByKind(ctx context.Context, kind string) (Type, error) {
	if k, ok := t.set.ByKind(kind); ok {
		return k, nil
	}
	derr := t.Discover(ctx)
	if k, ok := t.set.ByKind(kind); ok {
		return k, nil
	}
	err := fmt.Errorf("unknown kind %q (known: %s)", kind, strings.Join(t.set.KindNames(), ", "))
	if derr != nil {
		return Type{}, fmt.Errorf("%w; %w", err, derr)
	}
	return Type{}, err
}

// Reference returns the reference kinds, owners before the objects they
// own: what `get all` lists (as kubectl's "all" leaves out custom
// resources).
func Reference() []Type { return kinds.Builtin() }

// Known returns every kind known so far: the reference kinds first, then
// the declared ones discovered, in declaration order.
func (t *Table) Known() []Type { return t.set.All() }

// Children returns the types that the controllers of typ own, as their
// declarations say (Owns), in declaration order.
func (t *Table) Children(typ Type) []Type {
	var out []Type
	for _, r := range t.set.Owns(typ.Resource) {
		if k, ok := t.set.ByResource(r); ok {
			out = append(out, k)
		}
	}
	return out
}

// Queue returns the queue that reconciles objects of typ: that of the
// controller declared for it, or else the one named like its resource.
func (t *Table) Queue(typ Type) string {
	if q, ok := t.set.Queue(typ.Resource); ok {
		return q
	}
	return typ.Resource
}

// Declared reads the declarations published under kinds.DeclarationPrefix.
// A record that does not parse is skipped, as the observer refuses it too.
func Declared(ctx context.Context, kv clientv3.KV) ([]kinds.Declaration, error) {
	resp, err := kv.Get(ctx, kinds.DeclarationPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []kinds.Declaration
	for _, rec := range resp.Kvs {
		d, err := kinds.Parse(rec.Value)
		if err != nil || d.Key() != string(rec.Key) {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}
