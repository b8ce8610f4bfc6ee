// Package rules says which etcd prefixes feed which queues. A rule sends
// every change under Prefix to Queue, keyed either by the changed object's
// own namespace/name or, when OwnerKind is set, by the namespace/name of each
// of its owners of that kind (metadata.ownerReferences).
//
// A rule keyed by the object itself may ignore status-only changes
// (IgnoreOwnStatus): its controller computes that status itself, so its
// own status write is no news to it.
//
// The built-in rules serve the reference controllers (they are the rules
// of kinds.BuiltinDeclarations) and the garbage collector (Collector); a
// YAML file replaces them, or, with `builtin: true`, adds to them:
//
//	builtin: true          # optional: keep the reference controllers' rules
//	rules:
//	  - queue: greetings
//	    prefix: /registry/greetings/
//	    ignoreOwnStatus: true  # optional, default false; not with ownerKind
//	  - queue: greetings
//	    prefix: /registry/pods/
//	    ownerKind: Greeting
//
// Parse refuses a bad file with the line of the problem and the reason.
//
// # The garbage collector's rules
//
// The garbage collector hears of every object of every kind on one queue,
// kinds.GarbageCollectorQueue, which no declaration or file may name: with
// the built-in rules, the observer feeds it one rule per kind its rules in
// force name (Collector), keyed <resource>/<namespace>/<name>
// (ResourceKeys). A kind is fed once: by the first rule that names its
// prefix or its kind name (the configured rules first, then the
// declarations oldest first), so the collector's kinds map one to one onto
// prefixes, and a kind goes from its feed when the last rule that names it
// goes.
package rules

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/observer/internal/object"
	"gopkg.in/yaml.v3"
)

// Rule sends changes under Prefix to Queue.
type Rule struct {
	// Queue receives the keys; a DNS label, as the queue requires.
	Queue string
	// Prefix is the watched etcd prefix; it starts and ends with "/".
	Prefix string
	// OwnerKind, if set, keys the change by each owner of this kind instead
	// of by the object itself.
	OwnerKind string
	// IgnoreOwnStatus (only without OwnerKind): a watch event that changes
	// nothing but the object's top-level status (object.StatusOnly) is not
	// announced by this rule. Creates, deletes, lists, relists, replays
	// and resyncs still are. A child's status is news to its owner, so an
	// owner rule never ignores it.
	IgnoreOwnStatus bool
	// Line is where the rule is written in its file (0 for other rules).
	Line int
	// Source says where the rule comes from.
	Source Source
	// Declaration is the etcd key of the declaration that states the rule
	// (SourceDeclaration).
	Declaration string
	// Kind is the kind of the objects under Prefix, when the rule's source
	// names it (a declaration's For or Owns kind, a built-in rule); empty
	// for a rules file's. It decides what the garbage collector is fed
	// (Collector), nothing else.
	Kind string
	// ResourceKeys (only without OwnerKind, on a kind's prefix
	// /registry/<resource>/): the keys name the resource first,
	// <resource>/<namespace>/<name> (kinds.CollectorKey), for the garbage
	// collector's one queue of every kind.
	ResourceKeys bool
}

// Source says where a rule comes from.
type Source uint8

const (
	// SourceConfigured: a rules file's (--rules; Line > 0), or given in
	// code by a program that embeds the observer.
	SourceConfigured Source = iota
	// SourceBuiltin: the reference controllers' rules.
	SourceBuiltin
	// SourceDeclaration: a controller's declaration in etcd.
	SourceDeclaration
)

// Where describes r's origin for messages: "a built-in rule", "line 4",
// "declaration /baton/rules/greetings".
func (r Rule) Where() string {
	switch {
	case r.Source == SourceBuiltin:
		return "a built-in rule"
	case r.Source == SourceDeclaration:
		return "declaration " + r.Declaration
	case r.Line > 0:
		return fmt.Sprintf("line %d", r.Line)
	default:
		return "a configured rule"
	}
}

// Same reports whether r and o send the same changes to the same queue by
// the same keys (their queue, prefix and owner kind are equal).
// IgnoreOwnStatus is not compared: of two such rules the one in force
// first stays, with its own setting (a configured rule before a
// declaration's).
func (r Rule) Same(o Rule) bool {
	return r.Queue == o.Queue && r.Prefix == o.Prefix && r.OwnerKind == o.OwnerKind
}

// Builtin returns the rules of the reference controllers, those of
// kinds.BuiltinDeclarations in order, and the garbage collector's of their
// kinds (Collector).
func Builtin() []Rule {
	var out []Rule
	for _, d := range kinds.BuiltinDeclarations() {
		out = append(out, DeclarationRules(d, SourceBuiltin, "")...)
	}
	return append(out, Collector(out)...)
}

// DeclarationRules returns the rules d stands for, from src, stated by the
// declaration at key (for SourceDeclaration).
func DeclarationRules(d kinds.Declaration, src Source, key string) []Rule {
	var out []Rule
	for i, r := range d.Rules() {
		kind := d.For.Kind
		if i > 0 {
			kind = d.Owns[i-1].Kind // Rules: For first, then Owns in order
		}
		out = append(out, Rule{Queue: r.Queue, Prefix: r.Prefix, OwnerKind: r.OwnerKind, IgnoreOwnStatus: r.IgnoreOwnStatus,
			Source: src, Declaration: key, Kind: kind})
	}
	return out
}

// Collector returns the garbage collector's rules for the kinds rs name
// that no rule of rs feeds it yet: one rule per kind, on
// kinds.GarbageCollectorQueue, keyed by resource, ignoring status-only
// changes (an object's status says nothing of its owners, finalizers or
// deletion), stated by the first rule of rs that names the kind. A kind
// whose name or prefix is fed already, or whose prefix is not a kind's
// (/registry/<resource>/), is skipped: each kind name and each prefix is
// fed once, so the collector maps owner references to prefixes without
// doubt.
func Collector(rs []Rule) []Rule {
	names, prefixes := map[string]bool{}, map[string]bool{}
	for _, r := range rs {
		if r.Queue == kinds.GarbageCollectorQueue {
			names[r.Kind], prefixes[r.Prefix] = true, true
		}
	}
	var out []Rule
	for _, r := range rs {
		if r.Kind == "" || r.Queue == kinds.GarbageCollectorQueue || names[r.Kind] || prefixes[r.Prefix] {
			continue
		}
		if _, ok := resourceOf(r.Prefix); !ok {
			continue
		}
		names[r.Kind], prefixes[r.Prefix] = true, true
		out = append(out, Rule{Queue: kinds.GarbageCollectorQueue, Prefix: r.Prefix, Kind: r.Kind, ResourceKeys: true, IgnoreOwnStatus: true,
			Line: r.Line, Source: r.Source, Declaration: r.Declaration})
	}
	return out
}

// collects reports whether r is one of the garbage collector's rules, as
// Collector makes them.
func (r Rule) collects() bool {
	_, ok := resourceOf(r.Prefix)
	return r.Queue == kinds.GarbageCollectorQueue && r.ResourceKeys && r.OwnerKind == "" && kinds.ValidKindName(r.Kind) && ok
}

// Collects reports whether rs hold the garbage collector's rules (the
// built-in ones do): then the kinds of the declarations in force are fed
// to it too.
func Collects(rs []Rule) bool { return slices.ContainsFunc(rs, Rule.collects) }

// resourceOf returns the resource of a kind's prefix, /registry/<resource>/.
func resourceOf(prefix string) (string, bool) {
	res, ok := strings.CutPrefix(prefix, kinds.RegistryPrefix)
	if !ok {
		return "", false
	}
	res, ok = strings.CutSuffix(res, "/")
	return res, ok && dnsLabel.MatchString(res)
}

// KnownKinds are the kinds of the reference controllers' objects
// (kinds.Builtin), sorted. An owner kind outside this list is allowed (a
// user's own controller may own objects) but Parse warns about it: it is
// more often a typo.
var KnownKinds = knownKinds()

func knownKinds() []string {
	var out []string
	for _, k := range kinds.Builtin() {
		out = append(out, k.Kind)
	}
	slices.Sort(out)
	return out
}

// Overlap reports whether prefix a nests inside b or around it (equal
// prefixes share one watch, and do not overlap). One watch per prefix
// keeps one cache entry per key; nested prefixes would watch and cache the
// same keys twice.
func Overlap(a, b string) bool {
	return a != b && (strings.HasPrefix(a, b) || strings.HasPrefix(b, a))
}

// Ignores reports whether r announces nothing for a change it would
// otherwise key by the object itself, statusOnly saying that the change
// left all but the object's status as it was (a watch event's
// object.StatusOnly).
func (r Rule) Ignores(statusOnly bool) bool {
	return statusOnly && r.IgnoreOwnStatus && r.OwnerKind == ""
}

// Keys returns the queue keys a change of the object at etcdKey announces
// under r: the object's own key, or its owners' of r.OwnerKind.
func (r Rule) Keys(etcdKey string, m object.Meta) []string {
	if r.OwnerKind == "" {
		k, ok := object.QueueKey(etcdKey, r.Prefix)
		if !ok {
			return nil
		}
		if r.ResourceKeys {
			res, _ := resourceOf(r.Prefix)
			k = kinds.CollectorKey(kinds.Kind{Resource: res}, k)
		}
		return []string{k}
	}
	var out []string
	ns := ""
	for _, o := range m.Owners {
		if o.Kind != r.OwnerKind {
			continue
		}
		if ns == "" {
			ns = object.Namespace(m, etcdKey, r.Prefix)
		}
		k := o.Name
		if ns != "" {
			k = ns + "/" + o.Name
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Prefixes returns the distinct prefixes of rs, sorted: one watch each.
func Prefixes(rs []Rule) []string {
	seen := make(map[string]bool, len(rs))
	var out []string
	for _, r := range rs {
		if !seen[r.Prefix] {
			seen[r.Prefix] = true
			out = append(out, r.Prefix)
		}
	}
	sort.Strings(out)
	return out
}

// Queues returns the distinct queues of rs, sorted.
func Queues(rs []Rule) []string {
	seen := make(map[string]bool, len(rs))
	var out []string
	for _, r := range rs {
		if !seen[r.Queue] {
			seen[r.Queue] = true
			out = append(out, r.Queue)
		}
	}
	sort.Strings(out)
	return out
}

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	kindName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

// Error is a problem in a rules file, at a line (0 when it concerns the
// whole file).
type Error struct {
	File   string
	Line   int
	Reason string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Reason)
}

// Parse reads a rules file (name is used in errors). It returns the rules
// and warnings (owner kinds outside KnownKinds), or the first problem as an
// *Error.
func Parse(name string, data []byte) ([]Rule, []string, error) {
	fail := func(line int, format string, args ...any) ([]Rule, []string, error) {
		return nil, nil, &Error{File: name, Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml.v3 says "yaml: line N: reason"; keep the line, in our form.
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		var line int
		if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
			_, reason, _ := strings.Cut(msg, ": ")
			return fail(line, "%s", reason)
		}
		return fail(0, "%s", msg)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return fail(0, "empty file: want a mapping with a rules list")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "want a mapping with a rules list, not %s", kindString(root))
	}
	var list *yaml.Node
	builtin := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "rules":
			list = v
		case "builtin":
			if v.Kind != yaml.ScalarNode || (v.Value != "true" && v.Value != "false") {
				return fail(v.Line, "builtin must be true or false")
			}
			builtin = v.Value == "true"
		default:
			return fail(k.Line, "unknown field %q (want rules or builtin)", k.Value)
		}
	}
	var (
		out      []Rule
		warnings []string
	)
	if builtin {
		out = Builtin()
	}
	switch {
	case list == nil && builtin:
		return out, nil, nil
	case list == nil:
		return fail(root.Line, "no rules list (and no builtin: true)")
	case list.Kind != yaml.SequenceNode:
		return fail(list.Line, "rules must be a list, not %s", kindString(list))
	case len(list.Content) == 0 && !builtin:
		return fail(list.Line, "rules is empty: an observer without rules has nothing to do")
	}
	for _, item := range list.Content {
		r, warning, err := parseRule(name, item)
		if err != nil {
			return nil, nil, err
		}
		if warning != "" {
			warnings = append(warnings, warning)
		}
		for _, o := range out {
			if o.Same(r) {
				return fail(r.Line, "duplicate rule (same as %s)", o.Where())
			}
			if Overlap(o.Prefix, r.Prefix) {
				return fail(r.Line, "prefix %s overlaps prefix %s of %s; use the same prefix for both", r.Prefix, o.Prefix, o.Where())
			}
		}
		out = append(out, r)
	}
	return out, warnings, nil
}

// parseRule reads one item of a rules file's list: the rule, a warning
// about it ("" if none), or its first problem as an *Error.
func parseRule(name string, item *yaml.Node) (Rule, string, error) {
	fail := func(line int, format string, args ...any) (Rule, string, error) {
		return Rule{}, "", &Error{File: name, Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	if item.Kind != yaml.MappingNode {
		return fail(item.Line, "a rule must be a mapping with queue, prefix and optional ownerKind or ignoreOwnStatus, not %s", kindString(item))
	}
	r := Rule{Line: item.Line}
	warning := ""
	seen := map[string]bool{}
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		if seen[k.Value] {
			return fail(k.Line, "field %q given twice", k.Value)
		}
		seen[k.Value] = true
		if k.Value == "ignoreOwnStatus" {
			if v.Kind != yaml.ScalarNode || (v.Value != "true" && v.Value != "false") {
				return fail(v.Line, "ignoreOwnStatus must be true or false")
			}
			r.IgnoreOwnStatus = v.Value == "true"
			continue
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return fail(v.Line, "%s must be a string", k.Value)
		}
		switch k.Value {
		case "queue":
			if !dnsLabel.MatchString(v.Value) {
				return fail(v.Line, "queue %q is not a DNS label (lower-case letters, digits and '-', at most 63)", v.Value)
			}
			if v.Value == kinds.GarbageCollectorQueue {
				return fail(v.Line, "%s", errCollectorQueue)
			}
			r.Queue = v.Value
		case "prefix":
			switch {
			case !strings.HasPrefix(v.Value, "/"):
				return fail(v.Line, "prefix %q must start with /", v.Value)
			case !strings.HasSuffix(v.Value, "/") || v.Value == "/":
				// Without the trailing slash /registry/pod would also
				// match /registry/pods/…; "/" would watch all of etcd.
				return fail(v.Line, "prefix %q must be a directory below / ending with /", v.Value)
			}
			r.Prefix = v.Value
		case "ownerKind":
			if !kindName.MatchString(v.Value) {
				return fail(v.Line, "ownerKind %q is not a kind name (CamelCase, e.g. ReplicaSet)", v.Value)
			}
			r.OwnerKind = v.Value
			if !slices.Contains(KnownKinds, v.Value) {
				warning = fmt.Sprintf("%s:%d: ownerKind %q is not one of %s; keys come only from owners of exactly that kind",
					name, v.Line, v.Value, strings.Join(KnownKinds, ", "))
			}
		default:
			return fail(k.Line, "unknown field %q (want queue, prefix, ownerKind or ignoreOwnStatus)", k.Value)
		}
	}
	if r.Queue == "" {
		return fail(item.Line, "rule has no queue")
	}
	if r.Prefix == "" {
		return fail(item.Line, "rule has no prefix")
	}
	if r.IgnoreOwnStatus && r.OwnerKind != "" {
		return fail(item.Line, "%s", errOwnerIgnoresStatus)
	}
	return r, warning, nil
}

// errCollectorQueue: the collector's queue is keyed by resource, which a
// rule of a file or of code cannot ask for.
const errCollectorQueue = "queue " + kinds.GarbageCollectorQueue + " is the garbage collector's, fed with every kind by the built-in rules (builtin: true); no other rule may name it"

// errOwnerIgnoresStatus: a child's status change is what its owner's
// controller waits for (a pod becoming Running, a job pod finishing).
const errOwnerIgnoresStatus = "ignoreOwnStatus is for a rule keyed by the object itself, not with ownerKind: a child's status is news to its owner"

// Validate checks rules built in code (the same checks as Parse, without
// lines).
func Validate(rs []Rule) error {
	if len(rs) == 0 {
		return errors.New("no rules")
	}
	for i, r := range rs {
		switch {
		case !dnsLabel.MatchString(r.Queue):
			return fmt.Errorf("rule %d: queue %q is not a DNS label", i, r.Queue)
		case r.Queue == kinds.GarbageCollectorQueue && !r.collects():
			return fmt.Errorf("rule %d: %s", i, errCollectorQueue)
		case r.ResourceKeys && r.Queue != kinds.GarbageCollectorQueue:
			return fmt.Errorf("rule %d: keys by resource are the garbage collector's alone (queue %s)", i, kinds.GarbageCollectorQueue)
		case !strings.HasPrefix(r.Prefix, "/") || !strings.HasSuffix(r.Prefix, "/") || r.Prefix == "/":
			return fmt.Errorf("rule %d: prefix %q must be a directory below / ending with /", i, r.Prefix)
		case r.OwnerKind != "" && !kindName.MatchString(r.OwnerKind):
			return fmt.Errorf("rule %d: ownerKind %q is not a kind name", i, r.OwnerKind)
		case r.IgnoreOwnStatus && r.OwnerKind != "":
			return fmt.Errorf("rule %d: %s", i, errOwnerIgnoresStatus)
		}
		for _, o := range rs[:i] {
			if Overlap(o.Prefix, r.Prefix) {
				return fmt.Errorf("rule %d: prefix %s overlaps prefix %s", i, r.Prefix, o.Prefix)
			}
		}
	}
	return nil
}

func kindString(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	default:
		return fmt.Sprintf("the value %q", n.Value)
	}
}
