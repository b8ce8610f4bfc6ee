package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/observer/internal/object"
)

func TestParseValid(t *testing.T) {
	src := `# the reference rules, in part
rules:
  - queue: replicasets
    prefix: /registry/replicasets/
  - queue: replicasets
    prefix: /registry/pods/
    ownerKind: ReplicaSet
`
	got, warnings, err := Parse("rules.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Queue: "replicasets", Prefix: "/registry/replicasets/", Line: 3},
		{Queue: "replicasets", Prefix: "/registry/pods/", OwnerKind: "ReplicaSet", Line: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %v, want none", warnings)
	}
}

func TestParseUnknownOwnerKind(t *testing.T) {
	src := "rules:\n  - queue: cronjobs\n    prefix: /registry/jobs/\n    ownerKind: CronJob\n"
	got, warnings, err := Parse("r.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].OwnerKind != "CronJob" {
		t.Fatalf("rules %+v, want the CronJob rule", got)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "r.yaml:4: ownerKind \"CronJob\"") {
		t.Errorf("warnings %q, want one about CronJob at line 4", warnings)
	}
	// The rule keys by owners of exactly that kind.
	m := object.Meta{Namespace: "ns", Owners: []object.OwnerRef{{Kind: "CronJob", Name: "nightly"}, {Kind: "Job", Name: "j"}}}
	if keys := got[0].Keys("/registry/jobs/ns/nightly-1", m); !reflect.DeepEqual(keys, []string{"ns/nightly"}) {
		t.Errorf("Keys = %v, want [ns/nightly]", keys)
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		reason    string
	}{
		{"syntax", "rules:\n  - queue: a\n    prefix: [\n", 3, "did not find expected node content"},
		{"empty file", "", 0, "empty file"},
		{"not a mapping", "- a\n", 1, "want a mapping"},
		{"unknown top field", "rules: []\nextra: 1\n", 2, `unknown field "extra"`},
		{"rules not a list", "rules: x\n", 1, "rules must be a list"},
		{"rules empty", "rules: []\n", 1, "rules is empty"},
		{"rule not a mapping", "rules:\n  - x\n", 2, "a rule must be a mapping"},
		{"unknown rule field", "rules:\n  - queue: a\n    prefix: /p/\n    owner: X\n", 4, `unknown field "owner"`},
		{"field twice", "rules:\n  - queue: a\n    queue: b\n", 3, `field "queue" given twice`},
		{"queue not a label", "rules:\n  - queue: Pods\n    prefix: /p/\n", 2, `queue "Pods" is not a DNS label`},
		{"queue not a string", "rules:\n  - queue: [a]\n    prefix: /p/\n", 2, "queue must be a string"},
		{"no queue", "rules:\n  - prefix: /p/\n", 2, "rule has no queue"},
		{"no prefix", "rules:\n  - queue: a\n", 2, "rule has no prefix"},
		{"relative prefix", "rules:\n  - queue: a\n    prefix: registry/\n", 3, "must start with /"},
		{"prefix without slash", "rules:\n  - queue: a\n    prefix: /registry/pods\n", 3, "ending with /"},
		{"root prefix", "rules:\n  - queue: a\n    prefix: /\n", 3, "ending with /"},
		{"owner kind lower case", "rules:\n  - queue: a\n    prefix: /p/\n    ownerKind: replicaset\n", 4, "is not a kind name"},
		{"duplicate", "rules:\n  - queue: a\n    prefix: /p/\n  - queue: a\n    prefix: /p/\n", 4, "duplicate rule (same as line 2)"},
		{"duplicate but for ignoreOwnStatus", "rules:\n  - queue: a\n    prefix: /p/\n  - queue: a\n    prefix: /p/\n    ignoreOwnStatus: true\n", 4, "duplicate rule (same as line 2)"},
		{"ignoreOwnStatus not a boolean", "rules:\n  - queue: a\n    prefix: /p/\n    ignoreOwnStatus: yes\n", 4, "ignoreOwnStatus must be true or false"},
		{"ignoreOwnStatus a list", "rules:\n  - queue: a\n    prefix: /p/\n    ignoreOwnStatus: [true]\n", 4, "ignoreOwnStatus must be true or false"},
		{"ignoreOwnStatus with ownerKind", "rules:\n  - queue: a\n    prefix: /p/\n    ownerKind: ReplicaSet\n    ignoreOwnStatus: true\n", 2, "not with ownerKind"},
		{"unknown field names ignoreOwnStatus", "rules:\n  - queue: a\n    prefix: /p/\n    ignoreStatus: true\n", 4, "want queue, prefix, ownerKind or ignoreOwnStatus"},
		{"overlap", "rules:\n  - queue: a\n    prefix: /p/\n  - queue: b\n    prefix: /p/q/\n", 4, "overlaps prefix /p/ of line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse("f.yaml", []byte(tc.src))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse error = %v, want *Error", err)
			}
			if e.Line != tc.line || !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("error %q (line %d), want line %d containing %q", e.Error(), e.Line, tc.line, tc.reason)
			}
			if e.File != "f.yaml" {
				t.Errorf("file %q, want f.yaml", e.File)
			}
		})
	}
}

func TestBuiltin(t *testing.T) {
	rs := Builtin()
	if err := Validate(rs); err != nil {
		t.Fatal(err)
	}
	if got, want := Prefixes(rs), []string{"/registry/deployments/", "/registry/jobs/", "/registry/pods/", "/registry/replicasets/", "/registry/statefulsets/"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Prefixes = %v, want %v", got, want)
	}
	pod := object.Meta{Kind: "Pod", Namespace: "default", Name: "web-abcde",
		Owners: []object.OwnerRef{{Kind: "ReplicaSet", Name: "web", UID: "u"}}}
	got := map[string][]string{}
	for _, r := range rs {
		if r.Prefix == "/registry/pods/" {
			got[r.Queue] = append(got[r.Queue], r.Keys("/registry/pods/default/web-abcde", pod)...)
		}
	}
	want := map[string][]string{"replicasets": {"default/web"}, "jobs": nil, "statefulsets": nil, "pods": {"default/web-abcde"},
		kinds.GarbageCollectorQueue: {"pods/default/web-abcde"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pod keys = %v, want %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	for _, rs := range [][]Rule{
		nil,
		{{Queue: "A", Prefix: "/p/"}},
		{{Queue: "a", Prefix: "p"}},
		{{Queue: "a", Prefix: "/p/", OwnerKind: "x"}},
		{{Queue: "a", Prefix: "/p/"}, {Queue: "a", Prefix: "/p/q/"}},
		{{Queue: "a", Prefix: "/p/", OwnerKind: "X", IgnoreOwnStatus: true}},
		{{Queue: "garbagecollector", Prefix: "/registry/pods/"}},
		{{Queue: "garbagecollector", Prefix: "/p/", Kind: "P", ResourceKeys: true}},
		{{Queue: "a", Prefix: "/registry/pods/", Kind: "Pod", ResourceKeys: true}},
	} {
		if err := Validate(rs); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", rs)
		}
	}
}

// TestParseBuiltin: `builtin: true` keeps the reference controllers' rules
// and adds the file's, checked against them.
func TestParseBuiltin(t *testing.T) {
	rs, _, err := Parse("r.yaml", []byte("builtin: true\nrules:\n  - queue: greetings\n    prefix: /registry/greetings/\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(Builtin())+1 || rs[len(rs)-1].Queue != "greetings" || rs[0] != Builtin()[0] {
		t.Fatalf("rules %v, want the built-in ones and greetings", rs)
	}
	if rs, _, err := Parse("r.yaml", []byte("builtin: true\n")); err != nil || len(rs) != len(Builtin()) {
		t.Fatalf("builtin alone: %v %v", rs, err)
	}
	for _, c := range []struct{ file, want string }{
		{"builtin: true\nrules:\n  - queue: pods\n    prefix: /registry/pods/\n", "r.yaml:3: duplicate rule (same as a built-in rule)"},
		{"builtin: true\nrules:\n  - queue: x\n    prefix: /registry/pods/sub/\n", "r.yaml:3: prefix /registry/pods/sub/ overlaps prefix /registry/pods/ of a built-in rule"},
		{"builtin: yes\n", "r.yaml:1: builtin must be true or false"},
		{"builtin: false\nrules: []\n", "r.yaml:2: rules is empty"},
		{"builtin: false\n", "no rules list"},
		{"builtin: true\nrules:\n  - queue: garbagecollector\n    prefix: /registry/greetings/\n", "r.yaml:3: queue garbagecollector is the garbage collector's"},
	} {
		if _, _, err := Parse("r.yaml", []byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}

// The built-in rules come from client/kinds and are the rules the observer
// always had for the reference controllers, and the garbage collector's of
// their kinds.
func TestBuiltinFromKinds(t *testing.T) {
	gc := func(kind, resource string) Rule {
		return Rule{Queue: kinds.GarbageCollectorQueue, Prefix: "/registry/" + resource + "/", Kind: kind, ResourceKeys: true, IgnoreOwnStatus: true}
	}
	want := []Rule{
		{Queue: "replicasets", Prefix: "/registry/replicasets/", Kind: "ReplicaSet"},
		{Queue: "replicasets", Prefix: "/registry/pods/", OwnerKind: "ReplicaSet", Kind: "Pod"},
		{Queue: "deployments", Prefix: "/registry/deployments/", Kind: "Deployment"},
		{Queue: "deployments", Prefix: "/registry/replicasets/", OwnerKind: "Deployment", Kind: "ReplicaSet"},
		{Queue: "jobs", Prefix: "/registry/jobs/", Kind: "Job"},
		{Queue: "jobs", Prefix: "/registry/pods/", OwnerKind: "Job", Kind: "Pod"},
		{Queue: "statefulsets", Prefix: "/registry/statefulsets/", Kind: "StatefulSet"},
		{Queue: "statefulsets", Prefix: "/registry/pods/", OwnerKind: "StatefulSet", Kind: "Pod"},
		{Queue: "pods", Prefix: "/registry/pods/", Kind: "Pod"},
		gc("ReplicaSet", "replicasets"), gc("Pod", "pods"), gc("Deployment", "deployments"), gc("Job", "jobs"), gc("StatefulSet", "statefulsets"),
	}
	got := Builtin()
	if len(got) != len(want) {
		t.Fatalf("Builtin() = %v, want %v", got, want)
	}
	for i := range want {
		g := got[i]
		if !g.Same(want[i]) || g.Kind != want[i].Kind || g.ResourceKeys != want[i].ResourceKeys || g.Source != SourceBuiltin || g.Where() != "a built-in rule" {
			t.Errorf("rule %d = %+v, want %+v from the built-in rules", i, g, want[i])
		}
	}
	if !Collects(got) {
		t.Error("the built-in rules do not feed the garbage collector")
	}
	if got, want := strings.Join(KnownKinds, ","), "Deployment,Job,Pod,ReplicaSet,StatefulSet"; got != want {
		t.Errorf("KnownKinds = %s, want %s", got, want)
	}
}

// TestIgnoreOwnStatus: the opt-out is read from a rules file (default
// off, so a file written before it means what it meant), carried from a
// declaration, set on the reference controllers' own rules only, and
// ignores status-only changes only.
func TestIgnoreOwnStatus(t *testing.T) {
	src := "rules:\n  - queue: a\n    prefix: /a/\n    ignoreOwnStatus: true\n  - queue: b\n    prefix: /b/\n    ignoreOwnStatus: false\n  - queue: c\n    prefix: /c/\n"
	got, _, err := Parse("r.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].IgnoreOwnStatus || got[1].IgnoreOwnStatus || got[2].IgnoreOwnStatus {
		t.Errorf("Parse = %+v, want only the first rule to ignore its own status", got)
	}
	if err := Validate(got); err != nil {
		t.Errorf("Validate = %v", err)
	}

	for _, r := range Builtin() {
		if want := r.OwnerKind == ""; r.IgnoreOwnStatus != want {
			t.Errorf("built-in rule %+v: IgnoreOwnStatus %v, want %v", r, r.IgnoreOwnStatus, want)
		}
	}
	d := kinds.Declaration{Queue: "greetings", For: kinds.Kind{Kind: "Greeting", Resource: "greetings"},
		Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}, IgnoreOwnStatus: true}
	rs := DeclarationRules(d, SourceDeclaration, d.Key())
	if len(rs) != 2 || !rs[0].IgnoreOwnStatus || rs[1].IgnoreOwnStatus {
		t.Errorf("DeclarationRules = %+v, want the opt-out on the Greeting rule only", rs)
	}

	for _, tc := range []struct {
		r          Rule
		statusOnly bool
		want       bool
	}{
		{Rule{Queue: "a", Prefix: "/a/", IgnoreOwnStatus: true}, true, true},
		{Rule{Queue: "a", Prefix: "/a/", IgnoreOwnStatus: true}, false, false},
		{Rule{Queue: "a", Prefix: "/a/"}, true, false},
		// Never set by Parse, Validate or a declaration; ignored if built.
		{Rule{Queue: "a", Prefix: "/a/", OwnerKind: "X", IgnoreOwnStatus: true}, true, false},
	} {
		if got := tc.r.Ignores(tc.statusOnly); got != tc.want {
			t.Errorf("%+v.Ignores(%v) = %v, want %v", tc.r, tc.statusOnly, got, tc.want)
		}
	}
}

// TestCollector: the garbage collector is fed each kind the rules name
// once, by the first rule that names its kind name or its prefix, keyed by
// resource; a rule that names no kind, or a prefix that is no kind's, adds
// nothing.
func TestCollector(t *testing.T) {
	foo := kinds.Kind{Kind: "Foo", Resource: "foos"}
	d := kinds.Declaration{Queue: "foos", For: foo, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod), {Kind: "Bar", Resource: "bars"}}}
	rs := append(Builtin(), DeclarationRules(d, SourceDeclaration, d.Key())...)
	// Later names of a fed kind or prefix, a file's rule with no kind, a
	// prefix that is no kind's.
	other := kinds.Declaration{Queue: "others", For: kinds.Kind{Kind: "Foo", Resource: "foos2"}, Owns: []kinds.Kind{{Kind: "Baz", Resource: "bars"}}}
	rs = append(rs, DeclarationRules(other, SourceDeclaration, other.Key())...)
	rs = append(rs, Rule{Queue: "files", Prefix: "/registry/files/", Line: 3}, Rule{Queue: "odd", Prefix: "/odd/", Kind: "Odd"})
	got := Collector(rs)
	if len(got) != 2 || got[0].Kind != "Foo" || got[0].Prefix != "/registry/foos/" || got[1].Kind != "Bar" || got[1].Prefix != "/registry/bars/" {
		t.Fatalf("Collector = %+v, want Foo's and Bar's alone", got)
	}
	for _, r := range got {
		if r.Queue != kinds.GarbageCollectorQueue || !r.ResourceKeys || !r.IgnoreOwnStatus || r.Source != SourceDeclaration || r.Declaration != d.Key() {
			t.Errorf("%+v: want a rule of the collector's queue keyed by resource, stated by %s", r, d.Key())
		}
	}
	if keys := got[0].Keys("/registry/foos/default/app", object.Meta{}); !reflect.DeepEqual(keys, []string{"foos/default/app"}) {
		t.Errorf("keys %v, want foos/default/app", keys)
	}
	if keys := got[0].Keys("/registry/foos/app", object.Meta{}); !reflect.DeepEqual(keys, []string{"foos/app"}) {
		t.Errorf("keys of a cluster-scoped object %v, want foos/app", keys)
	}
	if err := Validate(append(rs, got...)); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if again := Collector(append(rs, got...)); len(again) != 0 {
		t.Errorf("Collector of rules that feed the collector already: %+v", again)
	}
	if Collects(rs[:9]) {
		t.Error("the reference controllers' rules alone feed the collector")
	}
}
