// Package declarations executes the controllers' declarations: the rules
// in force are the observer's configured rules (the built-in ones, or a
// rules file's) and those of every valid declaration a worker published
// under kinds.DeclarationPrefix (client/kinds: a queue, the kind it is
// for, the kinds it owns).
//
// # Which declarations are in force
//
// Set.Update takes every declaration in etcd and returns the rules in
// force. Declarations are taken oldest change first (by mod revision, then
// key), each checked against the configured rules and the declarations
// taken before it, so that a newcomer never displaces a declaration in
// force:
//
//   - its value must parse (kinds.Parse, which holds it to
//     kinds.MaxDeclarationBytes and kinds.MaxOwns) and name the queue of
//     its key, /baton/rules/<queue>;
//   - at most kinds.MaxDeclarations are in force;
//   - none of its prefixes may nest inside or around a prefix in force, or
//     the observer's own (/baton/observer/, /baton/rules/): one watch and
//     one cache entry per key (equal prefixes share a watch);
//   - the prefixes of the declarations in force, beyond the configured
//     rules' own, are at most kinds.MaxDeclaredPrefixes.
//
// The limits live in client/kinds, beside the format they bound. A
// refused declaration changes nothing: it is logged at WARN once (a key
// refused again for another reason is logged again at most once per
// RefusalLogInterval, however often it is rewritten) and shown in Status
// with its reason (Status.Reason names the
// kind of refusal, for the metric), and if an earlier version of it was in
// force, that version stays in force until the key is deleted or a valid
// version replaces it. A rule a declaration states that is already in
// force (the reference workers publish the built-in declarations) adds
// nothing, so it starts no watch and announces nothing.
//
// # The garbage collector
//
// When the configured rules feed the garbage collector (the built-in ones
// do: rules.Collects), the kinds of the declarations in force are fed to it
// too (rules.Collector): no declaration of its own, and so none of the
// limits above, stands between a declared kind and the collector, and a
// kind stops being fed when the last declaration in force that names it
// goes. A refused declaration feeds it nothing.
//
// # Cost
//
// Update costs what the declarations hold, once: a value is parsed when
// its mod revision is new, and the checks of a declaration against those
// in force look up its prefixes' parent directories in an index instead of
// comparing it with every rule. Refused declarations are checked again at
// each Update (a declaration deleted may let one in) but never parsed or
// logged again.
package declarations

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/observer/internal/rules"
)

// The kinds of refusal (Status.Reason).
const (
	// ReasonInvalid: the value does not parse or is not a valid
	// declaration (kinds.Parse).
	ReasonInvalid = "invalid"
	// ReasonTooLarge: the value is over kinds.MaxDeclarationBytes.
	ReasonTooLarge = "too_large"
	// ReasonWrongKey: published at a key that is not its queue's.
	ReasonWrongKey = "wrong_key"
	// ReasonOverlap: a prefix nests inside or around one in force or a
	// reserved one.
	ReasonOverlap = "overlap"
	// ReasonTooManyDeclarations: kinds.MaxDeclarations are in force.
	ReasonTooManyDeclarations = "too_many_declarations"
	// ReasonTooManyPrefixes: its prefixes would pass
	// kinds.MaxDeclaredPrefixes.
	ReasonTooManyPrefixes = "too_many_prefixes"
)

// Reasons are every Status.Reason, for a metric that exports them all.
var Reasons = []string{ReasonInvalid, ReasonTooLarge, ReasonWrongKey, ReasonOverlap, ReasonTooManyDeclarations, ReasonTooManyPrefixes}

// Entry is one declaration as etcd holds it.
type Entry struct {
	Key         string
	ModRevision int64
	Value       []byte
}

// Status is what became of one declaration.
type Status struct {
	Key         string
	ModRevision int64
	// Queue is the declared queue ("" if the value does not parse).
	Queue string
	// InForceRevision is the mod revision of the version whose rules are in
	// force: ModRevision, an earlier one when the current value is refused,
	// or 0 for none.
	InForceRevision int64
	// Refused says why the current value is refused ("" if in force), and
	// Reason which kind of refusal that is (one of Reasons).
	Refused, Reason string
}

// Set is the declarations' state from one Update to the next: the version
// of each key in force, each key's value as last parsed, and the refusals
// already logged. It is not safe for concurrent use.
type Set struct {
	configured []rules.Rule
	reserved   []string
	collect    bool // the configured rules feed the garbage collector
	log        *slog.Logger

	inForce map[string]version // key → the version in force
	parsed  map[string]parsed  // key → its value at a mod revision, parsed
	logged  map[string]logged  // key → its refusal last logged
}

type logged struct {
	reason string
	at     time.Time
}

// RefusalLogInterval is the least time between two WARN lines about one
// key refused for different reasons (the same reason is logged once).
const RefusalLogInterval = 5 * time.Minute

type version struct {
	rev   int64
	queue string
	rules []rules.Rule
}

// parsed is what a value says on its own: a version, or why it cannot be
// one whatever else is in force.
type parsed struct {
	v      version
	err    error
	reason string
}

// refusal is why a declaration is not in force.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }

// New returns a Set on top of the configured rules; no declared prefix may
// overlap one of reserved (the observer's own keys).
func New(configured []rules.Rule, reserved []string, log *slog.Logger) *Set {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{configured: configured, reserved: reserved, collect: rules.Collects(configured), log: log,
		inForce: map[string]version{}, parsed: map[string]parsed{}, logged: map[string]logged{}}
}

// Update takes entries, every declaration etcd holds now, and returns the
// rules in force (the configured ones first, then the declarations', each
// rule once, then the garbage collector's of the declared kinds) and what
// became of each declaration, by key.
func (s *Set) Update(entries []Entry) ([]rules.Rule, []Status) {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.ModRevision, b.ModRevision), cmp.Compare(a.Key, b.Key))
	})
	idx := newIndex(s.configured)
	next := map[string]version{}
	statuses := make([]Status, 0, len(entries))
	for _, e := range entries {
		st := Status{Key: e.Key, ModRevision: e.ModRevision}
		p := s.parse(e)
		st.Queue = p.v.queue
		ref := s.check(p, idx, len(next))
		if ref == nil {
			st.InForceRevision = p.v.rev
			idx.admit(p.v.rules)
			next[e.Key] = p.v
			s.accepted(e, p.v)
			statuses = append(statuses, st)
			continue
		}
		st.Refused, st.Reason = ref.Error(), ref.reason
		prev, kept := s.inForce[e.Key]
		if kept && s.check(parsed{v: prev}, idx, len(next)) != nil {
			kept = false
		}
		if kept {
			st.InForceRevision = prev.rev
			idx.admit(prev.rules)
			next[e.Key] = prev
		}
		s.refused(e, st, kept)
		statuses = append(statuses, st)
	}
	s.forget(entries, next)
	s.inForce = next
	slices.SortFunc(statuses, func(a, b Status) int { return cmp.Compare(a.Key, b.Key) })
	if !s.collect {
		return idx.rules, statuses
	}
	return append(idx.rules, rules.Collector(idx.rules)...), statuses
}

// parse returns what e's value says on its own, parsing it only when its
// mod revision is new.
func (s *Set) parse(e Entry) parsed {
	if p, ok := s.parsed[e.Key]; ok && p.v.rev == e.ModRevision {
		return p
	}
	p := parsed{v: version{rev: e.ModRevision}}
	d, err := kinds.Parse(e.Value)
	switch {
	case err != nil && len(e.Value) > kinds.MaxDeclarationBytes:
		p.err, p.reason = err, ReasonTooLarge
	case err != nil:
		p.err, p.reason = err, ReasonInvalid
	default:
		p.v.queue, p.v.rules = d.Queue, rules.DeclarationRules(d, rules.SourceDeclaration, e.Key)
		if want := d.Key(); e.Key != want {
			p.err, p.reason = fmt.Errorf("published at %s but declares queue %s (its key is %s)", e.Key, d.Queue, want), ReasonWrongKey
		}
	}
	s.parsed[e.Key] = p
	return p
}

// check returns why p cannot join the rules of idx, of which n
// declarations (nil if it can).
func (s *Set) check(p parsed, idx *index, n int) *refusal {
	if p.err != nil {
		return &refusal{p.reason, p.err}
	}
	if n >= kinds.MaxDeclarations {
		return &refusal{ReasonTooManyDeclarations, fmt.Errorf("%d declarations are in force already, the most the observer executes (kinds.MaxDeclarations)", kinds.MaxDeclarations)}
	}
	if err := s.fits(p.v.rules, idx); err != nil {
		return &refusal{ReasonOverlap, err}
	}
	if added := idx.newPrefixes(p.v.rules); added > 0 && idx.declared+added > kinds.MaxDeclaredPrefixes {
		return &refusal{ReasonTooManyPrefixes, fmt.Errorf("its %d new prefixes would make %d declared prefixes, at most %d (kinds.MaxDeclaredPrefixes)",
			added, idx.declared+added, kinds.MaxDeclaredPrefixes)}
	}
	return nil
}

// fits returns why rs cannot join idx: a prefix that nests inside or
// around one in force or a reserved one.
func (s *Set) fits(rs []rules.Rule, idx *index) error {
	for i, r := range rs {
		for _, p := range s.reserved {
			if r.Prefix == p || rules.Overlap(r.Prefix, p) {
				return fmt.Errorf("prefix %s overlaps %s, where the observer keeps its own keys", r.Prefix, p)
			}
		}
		if o, ok := idx.overlapping(r.Prefix); ok {
			return fmt.Errorf("prefix %s overlaps prefix %s of %s (prefixes in force are equal or disjoint)", r.Prefix, o.Prefix, o.Where())
		}
		for _, o := range rs[:i] {
			if rules.Overlap(r.Prefix, o.Prefix) {
				return fmt.Errorf("prefix %s overlaps prefix %s of %s (prefixes in force are equal or disjoint)", r.Prefix, o.Prefix, o.Where())
			}
		}
	}
	return nil
}

// index is the rules in force, with what the checks look up.
type index struct {
	rules      []rules.Rule
	same       map[ruleID]bool
	prefixes   map[string]rules.Rule // prefix in force → the first rule on it
	parents    map[string]string     // a parent directory of a prefix in force → that prefix
	configured map[string]bool       // the configured rules' prefixes
	declared   int                   // prefixes in force that are not configured
}

type ruleID struct{ queue, prefix, ownerKind string }

func newIndex(configured []rules.Rule) *index {
	idx := &index{same: map[ruleID]bool{}, prefixes: map[string]rules.Rule{}, parents: map[string]string{}, configured: map[string]bool{}}
	for _, r := range configured {
		idx.configured[r.Prefix] = true
	}
	idx.admit(configured)
	return idx
}

// admit adds the rules of rs not yet in force.
func (idx *index) admit(rs []rules.Rule) {
	for _, r := range rs {
		id := ruleID{r.Queue, r.Prefix, r.OwnerKind}
		if idx.same[id] {
			continue
		}
		idx.same[id] = true
		idx.rules = append(idx.rules, r)
		if _, ok := idx.prefixes[r.Prefix]; ok {
			continue
		}
		idx.prefixes[r.Prefix] = r
		for _, d := range parentDirs(r.Prefix) {
			if _, ok := idx.parents[d]; !ok {
				idx.parents[d] = r.Prefix
			}
		}
		if !idx.configured[r.Prefix] {
			idx.declared++
		}
	}
}

// overlapping returns a rule in force whose prefix nests inside or around
// prefix (prefixes end with "/", so one is inside another exactly when it
// extends one of the other's parent directories).
func (idx *index) overlapping(prefix string) (rules.Rule, bool) {
	for _, d := range parentDirs(prefix) {
		if r, ok := idx.prefixes[d]; ok {
			return r, true
		}
	}
	if p, ok := idx.parents[prefix]; ok {
		return idx.prefixes[p], true
	}
	return rules.Rule{}, false
}

// newPrefixes counts the prefixes of rs not in force.
func (idx *index) newPrefixes(rs []rules.Rule) int {
	var seen []string
	for _, r := range rs {
		if _, ok := idx.prefixes[r.Prefix]; !ok && !slices.Contains(seen, r.Prefix) {
			seen = append(seen, r.Prefix)
		}
	}
	return len(seen)
}

// parentDirs returns the directories above prefix ("/a/b/" → "/", "/a/").
func parentDirs(prefix string) []string {
	var out []string
	for i := 0; i < len(prefix)-1; i++ {
		if prefix[i] == '/' {
			out = append(out, prefix[:i+1])
		}
	}
	return out
}

// accepted logs a version of e newly in force.
func (s *Set) accepted(e Entry, v version) {
	delete(s.logged, e.Key)
	if prev, ok := s.inForce[e.Key]; ok && prev.rev == v.rev {
		return
	}
	s.log.Info("declaration in force", "key", e.Key, "mod_revision", e.ModRevision, "queue", v.queue, "rules", len(v.rules))
}

// refused logs a refusal: once per key while it stays refused, and again
// for another reason at most once per RefusalLogInterval.
func (s *Set) refused(e Entry, st Status, kept bool) {
	now := time.Now()
	if l, ok := s.logged[e.Key]; ok && (l.reason == st.Refused || now.Sub(l.at) < RefusalLogInterval) {
		return
	}
	s.logged[e.Key] = logged{reason: st.Refused, at: now}
	attrs := []any{"key", e.Key, "mod_revision", e.ModRevision, "reason", st.Refused}
	if kept {
		attrs = append(attrs, "in_force_revision", st.InForceRevision)
	}
	s.log.Warn("declaration refused; it changes nothing", attrs...)
}

// forget drops what Update remembers of keys no longer in etcd.
func (s *Set) forget(entries []Entry, next map[string]version) {
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		present[e.Key] = true
	}
	for k := range s.logged {
		if !present[k] {
			delete(s.logged, k)
		}
	}
	for k := range s.parsed {
		if !present[k] {
			delete(s.parsed, k)
		}
	}
	for k, v := range s.inForce {
		if !present[k] {
			s.log.Info("declaration deleted; its rules stop", "key", k, "queue", v.queue)
		} else if _, ok := next[k]; !ok {
			s.log.Info("declaration no longer in force", "key", k, "queue", v.queue)
		}
	}
}
