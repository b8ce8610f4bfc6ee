package authz

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/batonrun/baton/client/tlsfiles"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Rule allows the identities with any of Roles to call Methods, on Queues
// when it names them, and to request Paths. The package doc says what each
// field may hold.
type Rule struct {
	// Roles are roles of tlsfiles.KnownRoles.
	Roles []string
	// Methods are full gRPC method names, "/baton.queue.v1.QueueService/Add",
	// or a service's every method, "/baton.queue.v1.QueueService/*".
	Methods []string
	// Queues, when set, restrict Methods to the queues they name: exact
	// names or path.Match patterns ("greet*"). Only methods whose requests
	// name a queue (QueueService's) may be restricted.
	Queues []string
	// Paths are HTTP paths: "/metrics" is that path only, and a path that
	// ends in "/" is everything under it ("/debug/pprof/", "/"). The most
	// specific path any rule names decides a request, as in http.ServeMux.
	Paths []string
}

// Policy is a compiled set of rules: what each role may call. It is
// immutable and safe for concurrent use.
type Policy struct {
	rules   []Rule
	methods map[string][]grant // full method name → the rules that allow it
	paths   []pathGrant        // longest pattern first
	limits  []Limit            // the file's limits section, checked
}

// grant is one rule's allowance of a method.
type grant struct {
	roles  []string
	queues []string // nil: every queue
}

// pathGrant is the roles that may request the paths under one pattern.
type pathGrant struct {
	pattern string
	roles   []string
}

// Default returns the role table of docs/design.md, "Trust": what every
// Baton server enforces without --authz-policy.
func Default() *Policy { return defaultPolicy() }

var defaultPolicy = sync.OnceValue(func() *Policy {
	p, err := Compile(defaultRules())
	if err != nil {
		panic("authz: the default role table does not compile: " + err.Error())
	}
	return p
})

// Compile checks rules as Parse checks a policy file's, and returns their
// Policy. Its errors name the rule by its number, counted from 1.
func Compile(rules []Rule) (*Policy, error) {
	raw := make([]rawRule, len(rules))
	for i, r := range rules {
		pos := fmt.Sprintf("rule %d", i+1)
		raw[i] = rawRule{
			pos:     pos,
			roles:   fieldsAt(r.Roles, pos),
			methods: fieldsAt(r.Methods, pos),
			queues:  fieldsAt(r.Queues, pos),
			paths:   fieldsAt(r.Paths, pos),
		}
	}
	p, err := compile(raw)
	if err != nil {
		return nil, fmt.Errorf("authz: policy: %w", err)
	}
	return p, nil
}

// Rules returns a copy of the policy's rules, as they were given.
func (p *Policy) Rules() []Rule {
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = Rule{
			Roles:   slices.Clone(r.Roles),
			Methods: slices.Clone(r.Methods),
			Queues:  slices.Clone(r.Queues),
			Paths:   slices.Clone(r.Paths),
		}
	}
	return out
}

// Authorize returns nil when id may call method (a full gRPC method name)
// on queue, and otherwise a PERMISSION_DENIED status error that names the
// identity, the method and, for a method whose requests name a queue, the
// queue. Health and reflection are allowed to every identity; a method no
// rule names is refused to all. queue is the request's, "" when it names
// none.
func (p *Policy) Authorize(id tlsfiles.Identity, method, queue string) error {
	if isOpenMethod(method) {
		return nil
	}
	queued := isQueued(method)
	anyQueue, patterns, reason := p.methodGrants(id, method)
	if reason != "" {
		return denial(id, method, queue, queued, reason)
	}
	if anyQueue || matchQueue(patterns, queue) {
		return nil
	}
	return denial(id, method, queue, true, "")
}

// authorizeMethod decides what can be decided of a call before its request
// is read: nil and checkQueue false when id may call method on any queue,
// nil and checkQueue true when only on some (Authorize with the request's
// queue decides), a PERMISSION_DENIED error when on none.
func (p *Policy) authorizeMethod(id tlsfiles.Identity, method string) (checkQueue bool, err error) {
	if isOpenMethod(method) {
		return false, nil
	}
	anyQueue, _, reason := p.methodGrants(id, method)
	if reason != "" {
		return false, denial(id, method, "", false, reason)
	}
	return !anyQueue, nil
}

// methodGrants returns whether one of id's roles may call method on every
// queue, or else the queue patterns its roles may call it on; reason says
// why not when its roles may not call it at all.
func (p *Policy) methodGrants(id tlsfiles.Identity, method string) (anyQueue bool, patterns []string, reason string) {
	grants, ok := p.methods[method]
	if !ok {
		if isKnownMethod(method) {
			return false, nil, "the policy allows it to no role"
		}
		return false, nil, "it is not a method of the role table"
	}
	allowed := false
	for _, g := range grants {
		if !hasAnyRole(id, g.roles) {
			continue
		}
		allowed = true
		if g.queues == nil {
			return true, nil, ""
		}
		patterns = append(patterns, g.queues...)
	}
	if !allowed {
		return false, nil, "it needs one of the roles " + strings.Join(rolesOf(grants), ", ")
	}
	return false, patterns, ""
}

// AuthorizePath returns nil when id may request the HTTP path urlPath (a
// request's URL.Path), and otherwise an error that names the identity and
// the path. /healthz and /readyz are allowed to everyone.
func (p *Policy) AuthorizePath(id tlsfiles.Identity, urlPath string) error {
	clean := cleanPath(urlPath)
	if slices.Contains(openPaths, clean) {
		return nil
	}
	g, ok := p.route(clean)
	if !ok {
		return fmt.Errorf("authz: %s may not request %s: no rule of the policy covers it", id, tlsfiles.Shown(clean))
	}
	if !hasAnyRole(id, g.roles) {
		return fmt.Errorf("authz: %s may not request %s: it needs one of the roles %s", id, tlsfiles.Shown(clean), strings.Join(g.roles, ", "))
	}
	return nil
}

// route returns the most specific path pattern that covers a clean path.
func (p *Policy) route(clean string) (pathGrant, bool) {
	for _, g := range p.paths {
		if pathCovers(g.pattern, clean) {
			return g, true
		}
	}
	return pathGrant{}, false
}

// pathCovers reports whether a pattern of a Rule's Paths covers a clean
// path.
func pathCovers(pattern, clean string) bool {
	if strings.HasSuffix(pattern, "/") {
		return strings.HasPrefix(clean, pattern)
	}
	return clean == pattern
}

// cleanPath is a URL path as http.ServeMux routes it: rooted, without . and
// .. elements or doubled slashes, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

func hasAnyRole(id tlsfiles.Identity, roles []string) bool {
	for _, r := range roles {
		if id.HasRole(r) {
			return true
		}
	}
	return false
}

// rolesOf returns the roles of grants, each once, in the order the rules
// name them.
func rolesOf(grants []grant) []string {
	var out []string
	for _, g := range grants {
		for _, r := range g.roles {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// matchQueue reports whether queue matches one of patterns. A malformed
// pattern matches nothing (Compile refuses them).
func matchQueue(patterns []string, queue string) bool {
	for _, pat := range patterns {
		if ok, err := path.Match(pat, queue); ok && err == nil {
			return true
		}
	}
	return false
}

// denial is the PERMISSION_DENIED error of a call: "authz: <identity> may
// not call <method> [on queue <queue>][: <reason>]".
func denial(id tlsfiles.Identity, method, queue string, withQueue bool, reason string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "authz: %s may not call %s", id, method)
	if withQueue {
		fmt.Fprintf(&b, ` on queue "%s"`, tlsfiles.Shown(queue))
	}
	if reason != "" {
		b.WriteString(": ")
		b.WriteString(reason)
	}
	return status.Error(codes.PermissionDenied, b.String())
}

// field is one string of a rule with where it was given: "line 7" in a
// file, "rule 2" in Compile's rules.
type field struct {
	val string
	pos string
}

func fieldsAt(vals []string, pos string) []field {
	if len(vals) == 0 {
		return nil
	}
	out := make([]field, len(vals))
	for i, v := range vals {
		out[i] = field{val: v, pos: pos}
	}
	return out
}

// rawRule is a rule as given, before it is checked.
type rawRule struct {
	pos                           string
	roles, methods, queues, paths []field
	// empty are the keys a file gives as an empty list ("queues: []"),
	// with their positions: refused, as a list that names nothing.
	empty []field
}

// compile checks raw rules and builds their Policy. Its errors begin with
// the position of what is wrong.
func compile(raw []rawRule) (*Policy, error) {
	p := &Policy{methods: make(map[string][]grant)}
	pathRoles := make(map[string][]string)
	var pathOrder []string
	for _, r := range raw {
		rule, err := checkRule(r)
		if err != nil {
			return nil, err
		}
		p.rules = append(p.rules, rule)
		var queues []string
		if len(rule.Queues) > 0 {
			queues = rule.Queues
		}
		for _, m := range rule.Methods {
			for _, full := range expandMethod(m) {
				p.methods[full] = append(p.methods[full], grant{roles: rule.Roles, queues: queues})
			}
		}
		for _, pat := range rule.Paths {
			if _, seen := pathRoles[pat]; !seen {
				pathOrder = append(pathOrder, pat)
			}
			for _, role := range rule.Roles {
				if !slices.Contains(pathRoles[pat], role) {
					pathRoles[pat] = append(pathRoles[pat], role)
				}
			}
		}
	}
	if len(p.rules) == 0 {
		return nil, fmt.Errorf("the policy has no rules: it would allow nothing but health checks")
	}
	for _, pat := range pathOrder {
		p.paths = append(p.paths, pathGrant{pattern: pat, roles: pathRoles[pat]})
	}
	// Longest first: the first pattern that covers a path is the most
	// specific (two patterns of one length that cover a path are equal).
	sort.SliceStable(p.paths, func(i, j int) bool { return len(p.paths[i].pattern) > len(p.paths[j].pattern) })
	return p, nil
}

// checkRule checks one raw rule and returns it as a Rule.
func checkRule(r rawRule) (Rule, error) {
	if len(r.empty) > 0 { // the first empty list the rule has
		e := r.empty[0]
		if e.val == keyQueues {
			return Rule{}, fmt.Errorf("%s: queues is an empty list, which would match no queue: leave it out to allow every queue", e.pos)
		}
		return Rule{}, fmt.Errorf("%s: %s is an empty list: name at least one, or leave %s out", e.pos, e.val, e.val)
	}
	if len(r.roles) == 0 {
		return Rule{}, fmt.Errorf("%s: the rule names no roles", r.pos)
	}
	if len(r.methods) == 0 && len(r.paths) == 0 {
		return Rule{}, fmt.Errorf("%s: the rule names no methods and no paths", r.pos)
	}
	var rule Rule
	for _, f := range r.roles {
		if !slices.Contains(tlsfiles.KnownRoles(), f.val) {
			return Rule{}, fmt.Errorf("%s: unknown role %q (the roles are %s)", f.pos, f.val, strings.Join(tlsfiles.KnownRoles(), ", "))
		}
		if slices.Contains(rule.Roles, f.val) {
			return Rule{}, fmt.Errorf("%s: role %s is named twice in the rule", f.pos, f.val)
		}
		rule.Roles = append(rule.Roles, f.val)
	}
	for _, f := range r.methods {
		if err := checkMethod(f.val); err != nil {
			return Rule{}, fmt.Errorf("%s: %w", f.pos, err)
		}
		if slices.Contains(rule.Methods, f.val) {
			return Rule{}, fmt.Errorf("%s: method %s is named twice in the rule", f.pos, f.val)
		}
		rule.Methods = append(rule.Methods, f.val)
	}
	if len(r.queues) > 0 {
		if len(r.paths) > 0 {
			return Rule{}, fmt.Errorf("%s: the rule names queues and paths: queues restrict methods, so give the paths a rule of their own", r.pos)
		}
		if len(r.methods) == 0 {
			return Rule{}, fmt.Errorf("%s: the rule names queues but no methods", r.pos)
		}
		for _, f := range r.methods {
			if !isQueuedPattern(f.val) {
				return Rule{}, fmt.Errorf("%s: method %s names no queue, so a rule with queues cannot allow it (queues restrict QueueService methods only)", f.pos, f.val)
			}
		}
	}
	for _, f := range r.queues {
		if err := checkQueuePattern(f.val); err != nil {
			return Rule{}, fmt.Errorf("%s: %w", f.pos, err)
		}
		if slices.Contains(rule.Queues, f.val) {
			return Rule{}, fmt.Errorf("%s: queue %q is named twice in the rule", f.pos, f.val)
		}
		rule.Queues = append(rule.Queues, f.val)
	}
	for _, f := range r.paths {
		if err := checkPath(f.val); err != nil {
			return Rule{}, fmt.Errorf("%s: %w", f.pos, err)
		}
		if slices.Contains(rule.Paths, f.val) {
			return Rule{}, fmt.Errorf("%s: path %s is named twice in the rule", f.pos, f.val)
		}
		rule.Paths = append(rule.Paths, f.val)
	}
	return rule, nil
}
