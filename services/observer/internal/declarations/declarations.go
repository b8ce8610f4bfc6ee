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
//   - its value must parse (kinds.Parse) and name the queue of its key,
//     /baton/rules/<queue>;
//   - none of its prefixes may nest inside or around a prefix in force, or
//     the observer's own (/baton/observer/, /baton/rules/): one watch and
//     one cache entry per key (equal prefixes share a watch);
//   - at most MaxDeclarations are in force.
//
// A refused declaration changes nothing: it is logged at WARN once (per
// key and reason) and shown in Status, and if an earlier version of it was
// in force, that version stays in force until the key is deleted or a
// valid version replaces it. A rule a declaration states that is already
// in force (the reference workers publish the built-in declarations) adds
// nothing, so it starts no watch and announces nothing.
package declarations

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/observer/internal/rules"
)

// MaxDeclarations bounds the declarations in force, so that what etcd
// holds under kinds.DeclarationPrefix cannot make the observer watch
// without bound.
const MaxDeclarations = 1000

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
	// Refused says why the current value is refused ("" if in force).
	Refused string
}

// Set is the declarations' state from one Update to the next: the version
// of each key in force, and the refusals already logged. It is not safe
// for concurrent use.
type Set struct {
	configured []rules.Rule
	reserved   []string
	log        *slog.Logger

	inForce map[string]version // key → the version in force
	logged  map[string]string  // key → the refusal last logged
}

type version struct {
	rev   int64
	queue string
	rules []rules.Rule
}

// New returns a Set on top of the configured rules; no declared prefix may
// overlap one of reserved (the observer's own keys).
func New(configured []rules.Rule, reserved []string, log *slog.Logger) *Set {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{configured: configured, reserved: reserved, log: log,
		inForce: map[string]version{}, logged: map[string]string{}}
}

// Update takes entries, every declaration etcd holds now, and returns the
// rules in force (the configured ones first, then the declarations', each
// rule once) and what became of each declaration, by key.
func (s *Set) Update(entries []Entry) ([]rules.Rule, []Status) {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.ModRevision, b.ModRevision), cmp.Compare(a.Key, b.Key))
	})
	inForce := slices.Clone(s.configured)
	next := map[string]version{}
	statuses := make([]Status, 0, len(entries))
	for _, e := range entries {
		st := Status{Key: e.Key, ModRevision: e.ModRevision}
		v, err := s.check(e, inForce, len(next))
		if err == nil {
			st.Queue, st.InForceRevision = v.queue, v.rev
			inForce = admit(inForce, v.rules)
			next[e.Key] = v
			s.accepted(e, v)
			statuses = append(statuses, st)
			continue
		}
		st.Refused, st.Queue = err.Error(), v.queue
		prev, kept := s.inForce[e.Key]
		if kept && (len(next) >= MaxDeclarations || s.fits(prev.rules, inForce) != nil) {
			kept = false
		}
		if kept {
			st.InForceRevision = prev.rev
			inForce = admit(inForce, prev.rules)
			next[e.Key] = prev
		}
		s.refused(e, st, kept)
		statuses = append(statuses, st)
	}
	s.forget(entries, next)
	s.inForce = next
	slices.SortFunc(statuses, func(a, b Status) int { return cmp.Compare(a.Key, b.Key) })
	return inForce, statuses
}

// check parses e and checks it against the rules in force, of which n
// declarations; the version's queue is set when the value parses.
func (s *Set) check(e Entry, inForce []rules.Rule, n int) (version, error) {
	d, err := kinds.Parse(e.Value)
	if err != nil {
		return version{}, err
	}
	v := version{rev: e.ModRevision, queue: d.Queue, rules: rules.DeclarationRules(d, rules.SourceDeclaration, e.Key)}
	if want := d.Key(); e.Key != want {
		return v, fmt.Errorf("published at %s but declares queue %s (its key is %s)", e.Key, d.Queue, want)
	}
	if n >= MaxDeclarations {
		return v, fmt.Errorf("%d declarations are in force already, the most the observer executes", MaxDeclarations)
	}
	return v, s.fits(v.rules, inForce)
}

// fits returns why rs cannot join inForce: a prefix that nests inside or
// around one in force or a reserved one.
func (s *Set) fits(rs, inForce []rules.Rule) error {
	for i, r := range rs {
		for _, p := range s.reserved {
			if r.Prefix == p || rules.Overlap(r.Prefix, p) {
				return fmt.Errorf("prefix %s overlaps %s, where the observer keeps its own keys", r.Prefix, p)
			}
		}
		for _, o := range append(slices.Clip(inForce), rs[:i]...) {
			if rules.Overlap(r.Prefix, o.Prefix) {
				return fmt.Errorf("prefix %s overlaps prefix %s of %s (prefixes in force are equal or disjoint)", r.Prefix, o.Prefix, o.Where())
			}
		}
	}
	return nil
}

// admit adds the rules of rs not yet in force to inForce.
func admit(inForce, rs []rules.Rule) []rules.Rule {
	for _, r := range rs {
		if !slices.ContainsFunc(inForce, r.Same) {
			inForce = append(inForce, r)
		}
	}
	return inForce
}

// accepted logs a version of e newly in force.
func (s *Set) accepted(e Entry, v version) {
	delete(s.logged, e.Key)
	if prev, ok := s.inForce[e.Key]; ok && prev.rev == v.rev {
		return
	}
	s.log.Info("declaration in force", "key", e.Key, "mod_revision", e.ModRevision, "queue", v.queue, "rules", len(v.rules))
}

// refused logs a refusal once per key and reason.
func (s *Set) refused(e Entry, st Status, kept bool) {
	if s.logged[e.Key] == st.Refused {
		return
	}
	s.logged[e.Key] = st.Refused
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
	for k, v := range s.inForce {
		if !present[k] {
			s.log.Info("declaration deleted; its rules stop", "key", k, "queue", v.queue)
		} else if _, ok := next[k]; !ok {
			s.log.Info("declaration no longer in force", "key", k, "queue", v.queue)
		}
	}
}
