// Package resource is batonctl's table of the object kinds it knows: each
// kind's etcd resource name (the second segment of
// /registry/<resource>/<namespace>/<name>), its short names, the kind of the
// children its controller owns, and the queue that reconciles it (named like
// the resource, as the DESIGN's reference controllers are).
package resource

import (
	"fmt"
	"sort"
	"strings"
)

// Prefix is the root of every object key in etcd.
const Prefix = "/registry/"

// DefaultNamespace is the namespace of an object whose manifest names none.
const DefaultNamespace = "default"

// Type describes one kind of object.
type Type struct {
	// Kind is the object's "kind" field, e.g. "ReplicaSet".
	Kind string
	// Resource is the plural, lower-case name used in keys and as the queue
	// name, e.g. "replicasets".
	Resource string
	// Aliases are the other names batonctl accepts on the command line.
	Aliases []string
	// Children is the resource of the objects this kind's controller owns,
	// empty for none.
	Children string
}

// Types lists every kind batonctl knows, owners before the objects they own.
var types = []Type{
	{Kind: "Deployment", Resource: "deployments", Aliases: []string{"deployment", "deploy"}, Children: "replicasets"},
	{Kind: "ReplicaSet", Resource: "replicasets", Aliases: []string{"replicaset", "rs"}, Children: "pods"},
	{Kind: "StatefulSet", Resource: "statefulsets", Aliases: []string{"statefulset", "sts"}, Children: "pods"},
	{Kind: "Job", Resource: "jobs", Aliases: []string{"job"}, Children: "pods"},
	{Kind: "Pod", Resource: "pods", Aliases: []string{"pod", "po"}},
}

// All returns every known type, owners before the objects they own.
func All() []Type { return append([]Type(nil), types...) }

// ByKind returns the type whose Kind is kind (case-sensitive, as in a
// manifest).
func ByKind(kind string) (Type, bool) {
	for _, t := range types {
		if t.Kind == kind {
			return t, true
		}
	}
	return Type{}, false
}

// Lookup returns the type named by a command-line word: its resource, an
// alias or its kind, in any case.
func Lookup(name string) (Type, error) {
	n := strings.ToLower(name)
	for _, t := range types {
		if n == t.Resource || n == strings.ToLower(t.Kind) {
			return t, nil
		}
		for _, a := range t.Aliases {
			if n == a {
				return t, nil
			}
		}
	}
	return Type{}, fmt.Errorf("unknown resource %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Kinds returns the known kinds, sorted, for error messages.
func Kinds() []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = t.Kind
	}
	sort.Strings(out)
	return out
}

// Names returns each resource with its shortest alias, e.g. "replicasets (rs)".
func Names() []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = t.Resource + " (" + t.Aliases[len(t.Aliases)-1] + ")"
	}
	return out
}

// Key returns the etcd key of an object.
func (t Type) Key(namespace, name string) string {
	return Prefix + t.Resource + "/" + namespace + "/" + name
}

// NamespacePrefix returns the etcd prefix of the objects of this type in
// namespace, or in every namespace when namespace is empty.
func (t Type) NamespacePrefix(namespace string) string {
	if namespace == "" {
		return Prefix + t.Resource + "/"
	}
	return Prefix + t.Resource + "/" + namespace + "/"
}

// QueueKey is the key under which the observer announces an object to its
// controller's queue: "namespace/name".
func QueueKey(namespace, name string) string { return namespace + "/" + name }

// Singular is the lower-case kind, as kubectl prints "deployment/web".
func (t Type) Singular() string { return strings.ToLower(t.Kind) }
