// Package kinds is the one table of the object kinds Baton knows and of what
// each controller watches. The observer's built-in rules, the worker's
// reference controllers and batonctl's resources and manifest schema all
// derive from it, so a kind is added in one place.
//
// # Kinds
//
// A Kind names a resource in etcd's Kubernetes layout,
// /registry/<resource>/<namespace>/<name>, with the value's "kind" field and
// the names batonctl accepts on its command line.
//
// # Declarations
//
// A controller declares what it watches, as controller-runtime's For and Owns
// do: the primary kind it reconciles (each object's own namespace/name is a
// key of its queue) and the kinds it owns (a change of an owned object
// announces its owner's key, found through metadata.ownerReferences). A
// worker publishes each of its controllers' declarations in etcd at
// DeclarationPrefix + <queue>, as JSON:
//
//	/baton/rules/greetings
//	{"queue": "greetings",
//	 "for":  {"kind": "Greeting", "resource": "greetings", "aliases": ["greeting"]},
//	 "owns": [{"kind": "Pod", "resource": "pods", "aliases": ["pod", "po"]}]}
//
// With "ignoreOwnStatus": true, a change of a For object that touches
// nothing but its status is not announced to the queue (the controller
// wrote that status itself); see Declaration.IgnoreOwnStatus.
//
// The observer executes every declaration it finds there (Rules gives the
// triples it watches by), and batonctl discovers the declared kinds, as
// kubectl discovers an API server's resources. A worker written in another
// language writes the same JSON with any etcd client, or the observer is
// given a rules file.
package kinds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/client/schema"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// RegistryPrefix is the root of every object key in etcd.
const RegistryPrefix = "/registry/"

// DeclarationPrefix is where workers publish their controllers'
// declarations, one key per queue.
const DeclarationPrefix = "/baton/rules/"

// GarbageCollectorQueue is the garbage collector's one queue, for every
// kind. No declaration states it: the observer feeds it with every object
// of every kind its rules in force name (docs/design.md, "Deleting,
// finalizers and the garbage collector"), keyed CollectorKey, so a
// declaration that names it is refused (Validate).
const GarbageCollectorQueue = "garbagecollector"

// GarbageCollectorQueuePrefix began the queues of the garbage collector
// of earlier versions, one per kind (garbagecollector-<resource>), each
// with a declaration of its own. A worker deletes those declarations when
// its collector starts; a Set still reads one as teaching a kind without
// taking it for the declaration of a resource (Queue, Declaration).
const GarbageCollectorQueuePrefix = "garbagecollector-"

// CollectorKey is the key of the object of kind k with queue key
// queueKey (namespace/name, or name) in GarbageCollectorQueue:
// <resource>/<namespace>/<name>, so one queue names objects of every kind.
func CollectorKey(k Kind, queueKey string) string { return k.Resource + "/" + queueKey }

// SplitCollectorKey splits a key of GarbageCollectorQueue into its
// resource and the object's queue key (namespace/name, or name).
func SplitCollectorKey(key string) (resource, queueKey string, err error) {
	resource, queueKey, ok := strings.Cut(key, "/")
	if !ok || limits.CheckQueueName(resource) != nil || queueKey == "" {
		return "", "", fmt.Errorf("%q is not a key of the garbage collector's queue (<resource>/<namespace>/<name>)", key)
	}
	return resource, queueKey, nil
}

// Limits of declarations, in number and size, so that what anyone who may
// write etcd publishes under DeclarationPrefix cannot make the observer
// watch without bound: its cost follows the prefixes it watches (a watch,
// a cache and a known-key record entry each), and these bound them. Parse
// enforces the first three; the observer, which executes declarations
// oldest first, refuses those beyond the last two (docs/observer.md).
const (
	// MaxDeclarationBytes bounds the JSON of one declaration.
	MaxDeclarationBytes = 64 << 10
	// MaxOwns bounds the owned kinds of one declaration.
	MaxOwns = 32
	// MaxAliases bounds the aliases of one kind.
	MaxAliases = 8
	// MaxDeclarations bounds the declarations in force at once.
	MaxDeclarations = 1000
	// MaxDeclaredPrefixes bounds the prefixes the declarations in force
	// add to those of the observer's configured rules (1 + MaxOwns a
	// declaration at most).
	MaxDeclaredPrefixes = 1000
)

// The reference kinds.
const (
	Pod         = "Pod"
	ReplicaSet  = "ReplicaSet"
	Deployment  = "Deployment"
	Job         = "Job"
	StatefulSet = "StatefulSet"
)

// Event is the kind of what controllers record about the objects they act
// on (package sdk/events). It is not a reference kind: no controller
// reconciles events and nothing owns them (each expires with its etcd
// lease), so neither the reference declarations nor `batonctl get all`
// include it (as kubectl's "all" leaves events out); a command line knows
// it all the same (NewSet).
const Event = "Event"

// eventKind is the kind named Event.
var eventKind = Kind{Kind: Event, Resource: "events", Aliases: []string{"event", "ev"}}

// EventKind returns the kind of Events.
func EventKind() Kind {
	k := eventKind
	k.Aliases = slices.Clone(eventKind.Aliases)
	return k
}

// Kind is one kind of object.
type Kind struct {
	// Kind is the object's "kind" field, CamelCase, e.g. "ReplicaSet".
	Kind string `json:"kind"`
	// Resource is the lower-case plural in keys, a DNS label, e.g.
	// "replicasets".
	Resource string `json:"resource"`
	// Aliases are the other names batonctl accepts on its command line
	// (lower case), shortest last, e.g. ["replicaset", "rs"].
	Aliases []string `json:"aliases,omitempty"`
}

var (
	kindName  = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,62}$`)
	aliasName = regexp.MustCompile(`^[a-z][a-z0-9]{0,62}$`)
)

// ValidKindName reports whether s can be a kind: CamelCase letters and
// digits, at most 63.
func ValidKindName(s string) bool { return kindName.MatchString(s) }

// Validate names the first problem of k.
func (k Kind) Validate() error {
	switch {
	case !kindName.MatchString(k.Kind):
		return fmt.Errorf("kind %q is not a kind name (CamelCase letters and digits, e.g. ReplicaSet)", k.Kind)
	case limits.CheckQueueName(k.Resource) != nil:
		return fmt.Errorf("kind %s: resource %q is not a DNS label (lower-case letters, digits and '-', at most 63)", k.Kind, k.Resource)
	case len(k.Aliases) > MaxAliases:
		return fmt.Errorf("kind %s: %d aliases, at most %d", k.Kind, len(k.Aliases), MaxAliases)
	}
	for _, a := range k.Aliases {
		if !aliasName.MatchString(a) {
			return fmt.Errorf("kind %s: alias %q is not a lower-case word", k.Kind, a)
		}
	}
	return nil
}

// Prefix is the etcd prefix of every object of k.
func (k Kind) Prefix() string { return RegistryPrefix + k.Resource + "/" }

// NamespacePrefix is the etcd prefix of k's objects in namespace, or in
// every namespace when namespace is empty.
func (k Kind) NamespacePrefix(namespace string) string {
	if namespace == "" {
		return k.Prefix()
	}
	return k.Prefix() + namespace + "/"
}

// Key is the etcd key of one object of k.
func (k Kind) Key(namespace, name string) string { return k.Prefix() + namespace + "/" + name }

// Singular is the lower-case kind, as kubectl prints "deployment/web".
func (k Kind) Singular() string { return strings.ToLower(k.Kind) }

// Names are every name that refers to k on a command line: its resource,
// its singular and its aliases.
func (k Kind) Names() []string {
	out := []string{k.Resource, k.Singular()}
	for _, a := range k.Aliases {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Declaration is what one controller watches: its queue, its primary kind
// and the kinds it owns.
type Declaration struct {
	// Queue is the controller's queue (a DNS label).
	Queue string `json:"queue"`
	// For is the primary kind: each object's namespace/name is a key.
	For Kind `json:"for"`
	// Owns are the kinds of the children the controller creates; a change of
	// a child announces the key of its owner of kind For.
	Owns []Kind `json:"owns,omitempty"`
	// IgnoreOwnStatus: a change of an object of kind For that leaves all
	// but its top-level "status" member as it was (a status-only change,
	// such as the controller's own status write) does not announce the
	// object's key. Creates and deletes still do, and changes of owned
	// objects announce their owners as always (a child's status is news to
	// its owner). Set it for a controller that computes its object's status
	// itself and reads nothing from it that it did not write: its own
	// status write would otherwise bring it back once more for nothing
	// (controller-runtime's GenerationChangedPredicate filters the same
	// events). Omitted when false, so a declaration without it is encoded
	// as before and an observer that does not know the field accepts it.
	IgnoreOwnStatus bool `json:"ignoreOwnStatus,omitempty"`
	// Schema, if set, is the structural schema of For's objects, which
	// every writer that knows it checks before it writes (schema.go).
	Schema *schema.Kind `json:"schema,omitempty"`
	// PrinterColumns are the columns batonctl get prints for For.
	PrinterColumns []schema.Column `json:"printerColumns,omitempty"`
}

// Validate names the first problem of d.
func (d Declaration) Validate() error {
	if err := limits.CheckQueueName(d.Queue); err != nil {
		return fmt.Errorf("declaration: queue %q is not a DNS label (lower-case letters, digits and '-', at most 63)", d.Queue)
	}
	if d.Queue == GarbageCollectorQueue {
		return fmt.Errorf("declaration: queue %s is the garbage collector's, which the observer feeds with every kind; no declaration may state it", d.Queue)
	}
	if err := d.For.Validate(); err != nil {
		return fmt.Errorf("declaration of queue %s: for: %w", d.Queue, err)
	}
	if len(d.Owns) > MaxOwns {
		return fmt.Errorf("declaration of queue %s: owns %d kinds, at most %d", d.Queue, len(d.Owns), MaxOwns)
	}
	seen := map[string]bool{d.For.Resource: true}
	for _, o := range d.Owns {
		if err := o.Validate(); err != nil {
			return fmt.Errorf("declaration of queue %s: owns: %w", d.Queue, err)
		}
		if seen[o.Resource] {
			return fmt.Errorf("declaration of queue %s: resource %s is named twice", d.Queue, o.Resource)
		}
		seen[o.Resource] = true
	}
	return d.validateSchema()
}

// Key is where d is published in etcd.
func (d Declaration) Key() string { return DeclarationPrefix + d.Queue }

// Rule is one (queue, prefix, owner kind) triple the observer watches by: a
// change under Prefix is announced to Queue keyed by the object's own
// namespace/name, or, with OwnerKind set, by each of its owners of that kind.
type Rule struct {
	Queue     string
	Prefix    string
	OwnerKind string
	// IgnoreOwnStatus (only without OwnerKind): a status-only change is
	// not announced (Declaration.IgnoreOwnStatus).
	IgnoreOwnStatus bool
}

// Rules are the triples that d stands for: its primary kind's prefix, and
// each owned kind's prefix keyed by owners of kind For.
func (d Declaration) Rules() []Rule {
	out := []Rule{{Queue: d.Queue, Prefix: d.For.Prefix(), IgnoreOwnStatus: d.IgnoreOwnStatus}}
	for _, o := range d.Owns {
		out = append(out, Rule{Queue: d.Queue, Prefix: o.Prefix(), OwnerKind: d.For.Kind})
	}
	return out
}

// Marshal encodes d as it is published.
func (d Declaration) Marshal() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(d)
}

// Parse decodes and checks a published declaration. Unknown fields are
// refused, as a typo would otherwise silently watch less.
func Parse(data []byte) (Declaration, error) {
	var d Declaration
	if len(data) > MaxDeclarationBytes {
		return d, fmt.Errorf("declaration of %d bytes, at most %d", len(data), MaxDeclarationBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Declaration{}, fmt.Errorf("declaration is not valid JSON: %w", err)
	}
	if dec.More() {
		return Declaration{}, errors.New("declaration has data after its JSON object")
	}
	if err := d.Validate(); err != nil {
		return Declaration{}, err
	}
	return d, nil
}

// The reference kinds, owners before the objects they own.
var builtinKinds = []Kind{
	{Kind: Deployment, Resource: "deployments", Aliases: []string{"deployment", "deploy"}},
	{Kind: ReplicaSet, Resource: "replicasets", Aliases: []string{"replicaset", "rs"}},
	{Kind: StatefulSet, Resource: "statefulsets", Aliases: []string{"statefulset", "sts"}},
	{Kind: Job, Resource: "jobs", Aliases: []string{"job"}},
	{Kind: Pod, Resource: "pods", Aliases: []string{"pod", "po"}},
}

// Builtin returns the reference kinds, owners before the objects they own.
func Builtin() []Kind {
	out := make([]Kind, len(builtinKinds))
	for i, k := range builtinKinds {
		out[i] = k
		out[i].Aliases = slices.Clone(k.Aliases)
	}
	return out
}

// MustBuiltin returns the reference kind named kind; it panics for any
// other name, which is a programming error.
func MustBuiltin(kind string) Kind {
	for _, k := range Builtin() {
		if k.Kind == kind {
			return k
		}
	}
	panic("kinds: no reference kind " + kind)
}

// BuiltinDeclarations returns what the reference controllers watch, each on
// the queue named like its primary resource. Each ignores its own status
// changes (IgnoreOwnStatus): every reference controller computes its
// object's status from spec and children, and the one status field it reads
// back, a Job's Complete or Failed condition, it wrote itself; the pod
// runtime times a job pod's run with a requeue, not with the event of its
// own Running write.
func BuiltinDeclarations() []Declaration {
	d := func(primary string, owns ...string) Declaration {
		k := MustBuiltin(primary)
		decl := Declaration{Queue: k.Resource, For: k, IgnoreOwnStatus: true, Schema: builtinSchema(primary)}
		for _, o := range owns {
			decl.Owns = append(decl.Owns, MustBuiltin(o))
		}
		return decl
	}
	return []Declaration{
		d(ReplicaSet, Pod),
		d(Deployment, ReplicaSet),
		d(Job, Pod),
		d(StatefulSet, Pod),
		d(Pod),
	}
}

// Set is a collection of kinds with the lookups a command line needs. The
// zero Set is empty; Add builds it.
type Set struct {
	kinds []Kind
	// owns maps a resource to the resources its controllers own.
	owns map[string][]string
	// queues maps a resource to the queue of the controller declared for
	// it, the first declared.
	queues map[string]string
	// decls maps a resource to the first declaration for it (schema.go).
	decls map[string]Declaration
}

// NewSet returns the reference kinds, the children their controllers
// own, and Event.
func NewSet() *Set {
	s := &Set{}
	for _, k := range Builtin() {
		s.addKind(k)
	}
	s.addKind(EventKind())
	for _, d := range BuiltinDeclarations() {
		s.Declare(d)
	}
	return s
}

func (s *Set) addKind(k Kind) {
	for _, have := range s.kinds {
		if have.Resource == k.Resource || have.Kind == k.Kind {
			return
		}
	}
	s.kinds = append(s.kinds, k)
}

// Declare adds d's kinds (a kind already present, by resource or by kind
// name, keeps its first definition) and records what its controller owns.
func (s *Set) Declare(d Declaration) {
	s.addKind(d.For)
	if strings.HasPrefix(d.Queue, GarbageCollectorQueuePrefix) {
		return // the collector's: no resource's own controller
	}
	if s.owns == nil {
		s.owns = map[string][]string{}
		s.queues = map[string]string{}
	}
	if _, ok := s.queues[d.For.Resource]; !ok {
		s.queues[d.For.Resource] = d.Queue
		s.declared(d)
	}
	for _, o := range d.Owns {
		s.addKind(o)
		if !slices.Contains(s.owns[d.For.Resource], o.Resource) {
			s.owns[d.For.Resource] = append(s.owns[d.For.Resource], o.Resource)
		}
	}
}

// All returns the kinds in the order they were added (the reference kinds
// first, owners before the objects they own).
func (s *Set) All() []Kind { return slices.Clone(s.kinds) }

// ByKind returns the kind whose name is kind (case-sensitive, as in a
// manifest).
func (s *Set) ByKind(kind string) (Kind, bool) {
	for _, k := range s.kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return Kind{}, false
}

// ByResource returns the kind whose resource is resource.
func (s *Set) ByResource(resource string) (Kind, bool) {
	for _, k := range s.kinds {
		if k.Resource == resource {
			return k, true
		}
	}
	return Kind{}, false
}

// Lookup returns the kind named by a command-line word: its resource, its
// kind or an alias, in any case.
func (s *Set) Lookup(name string) (Kind, error) {
	n := strings.ToLower(name)
	for _, k := range s.kinds {
		if slices.Contains(k.Names(), n) {
			return k, nil
		}
	}
	names := make([]string, len(s.kinds))
	for i, k := range s.kinds {
		names[i] = k.Resource
		if len(k.Aliases) > 0 {
			names[i] += " (" + k.Aliases[len(k.Aliases)-1] + ")"
		}
	}
	return Kind{}, fmt.Errorf("unknown resource %q (known: %s)", name, strings.Join(names, ", "))
}

// Owns returns the resources that the controllers of resource own, in
// declaration order.
func (s *Set) Owns(resource string) []string { return slices.Clone(s.owns[resource]) }

// Queue returns the queue of the controller declared for resource (For),
// the first one declared; ok is false when no declaration names it.
func (s *Set) Queue(resource string) (queue string, ok bool) {
	queue, ok = s.queues[resource]
	return queue, ok
}

// KindNames returns every kind name, sorted, for messages.
func (s *Set) KindNames() []string {
	out := make([]string, len(s.kinds))
	for i, k := range s.kinds {
		out[i] = k.Kind
	}
	sort.Strings(out)
	return out
}
