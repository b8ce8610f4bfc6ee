package declarations

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/observer/internal/rules"
)

var reserved = []string{"/baton/observer/", kinds.DeclarationPrefix}

func greetings(owns ...kinds.Kind) kinds.Declaration {
	return kinds.Declaration{Queue: "greetings", For: kinds.Kind{Kind: "Greeting", Resource: "greetings"}, Owns: owns}
}

func entry(t *testing.T, d kinds.Declaration, rev int64) Entry {
	t.Helper()
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return Entry{Key: d.Key(), ModRevision: rev, Value: b}
}

// summary is the rules in force as "queue prefix ownerKind" lines.
func summary(rs []rules.Rule) string {
	var lines []string
	for _, r := range rs {
		lines = append(lines, strings.TrimSpace(fmt.Sprintf("%s %s %s", r.Queue, r.Prefix, r.OwnerKind)))
	}
	return strings.Join(lines, "; ")
}

func TestUpdate(t *testing.T) {
	configured := []rules.Rule{{Queue: "pods", Prefix: "/registry/pods/"}, {Queue: "widgets", Prefix: "/registry/widgets/blue/", Line: 3}}
	var logs bytes.Buffer
	s := New(configured, reserved, slog.New(slog.NewTextHandler(&logs, nil)))
	pod := kinds.MustBuiltin(kinds.Pod)
	widgets := kinds.Declaration{Queue: "widgets", For: kinds.Kind{Kind: "Widget", Resource: "widgets"}}

	rs, st := s.Update([]Entry{entry(t, greetings(pod), 10)})
	if got, want := summary(rs), "pods /registry/pods/; widgets /registry/widgets/blue/; greetings /registry/greetings/; greetings /registry/pods/ Greeting"; got != want {
		t.Fatalf("rules %s, want %s", got, want)
	}
	if rs[2].Source != rules.SourceDeclaration || rs[2].Declaration != "/baton/rules/greetings" || st[0].InForceRevision != 10 {
		t.Errorf("declared rule %+v, status %+v", rs[2], st)
	}

	// Refused: not JSON, the wrong key, a prefix around a configured one.
	bad := []Entry{
		entry(t, greetings(pod), 10),
		{Key: "/baton/rules/junk", ModRevision: 11, Value: []byte("{")},
		{Key: "/baton/rules/other", ModRevision: 12, Value: entry(t, greetings(), 0).Value},
		entry(t, widgets, 13),
	}
	rs2, st := s.Update(bad)
	if summary(rs2) != summary(rs) {
		t.Errorf("refused declarations changed the rules: %s", summary(rs2))
	}
	want := map[string]string{
		"/baton/rules/greetings": "",
		"/baton/rules/junk":      "not valid JSON",
		"/baton/rules/other":     "declares queue greetings",
		"/baton/rules/widgets":   "prefix /registry/widgets/ overlaps prefix /registry/widgets/blue/ of line 3",
	}
	for _, x := range st {
		if w := want[x.Key]; (w == "") != (x.Refused == "") || !strings.Contains(x.Refused, w) {
			t.Errorf("%s: refused %q, want %q", x.Key, x.Refused, w)
		}
	}
	// Logged once per key and reason, however many updates.
	s.Update(bad)
	if n := strings.Count(logs.String(), "declaration refused"); n != 3 {
		t.Errorf("%d refusals logged, want 3:\n%s", n, logs.String())
	}

	// A changed declaration replaces its rules; one changed into an invalid
	// value leaves its earlier version in force.
	rs, _ = s.Update([]Entry{entry(t, greetings(), 20)})
	if got, want := summary(rs), "pods /registry/pods/; widgets /registry/widgets/blue/; greetings /registry/greetings/"; got != want {
		t.Errorf("after a change: %s, want %s", got, want)
	}
	rs, st = s.Update([]Entry{{Key: "/baton/rules/greetings", ModRevision: 21, Value: []byte(`{"queue":"greetings"}`)}})
	if summary(rs) != "pods /registry/pods/; widgets /registry/widgets/blue/; greetings /registry/greetings/" || st[0].InForceRevision != 20 || st[0].Refused == "" {
		t.Errorf("after an invalid change: %s, %+v; want version 20 kept", summary(rs), st)
	}
	// Deleted: its rules stop.
	rs, st = s.Update(nil)
	if summary(rs) != "pods /registry/pods/; widgets /registry/widgets/blue/" || len(st) != 0 {
		t.Errorf("after the delete: %s, %+v", summary(rs), st)
	}
}

// A declaration's prefixes are /registry/<resource>/, equal or disjoint
// among declarations; what they can overlap is a configured rule's prefix
// (above) or one the observer keeps for itself.
func TestReservedPrefixes(t *testing.T) {
	s := New(nil, []string{"/registry/cs/x/"}, nil)
	own := Entry{Key: "/baton/rules/c", ModRevision: 10, Value: []byte(`{"queue":"c","for":{"kind":"C","resource":"cs"}}`)}
	if rs, st := s.Update([]Entry{own}); len(rs) != 0 || !strings.Contains(st[0].Refused, "where the observer keeps its own keys") {
		t.Errorf("a declaration around a reserved prefix: %s %+v", summary(rs), st)
	}
}

// The built-in declarations state exactly the built-in rules: nothing is
// added.
func TestBuiltinDeclarationsAddNothing(t *testing.T) {
	s := New(rules.Builtin(), reserved, nil)
	var entries []Entry
	for i, d := range kinds.BuiltinDeclarations() {
		entries = append(entries, entry(t, d, int64(i+1)))
	}
	rs, st := s.Update(entries)
	if got, want := summary(rs), summary(rules.Builtin()); got != want {
		t.Errorf("rules %s, want the built-in ones %s", got, want)
	}
	for _, x := range st {
		if x.Refused != "" || x.InForceRevision == 0 {
			t.Errorf("%+v: want in force", x)
		}
	}
	for _, r := range rs {
		if r.Source != rules.SourceBuiltin {
			t.Errorf("rule %+v is attributed to a declaration, want the built-in rules", r)
		}
	}
}

// A declaration's opt-out from its own status changes is in force with its
// rules, changes with them, and does not displace a configured rule of the
// same queue, prefix and owner kind, which keeps its own setting.
func TestIgnoreOwnStatus(t *testing.T) {
	ignoring := func(rs []rules.Rule) string {
		var out []string
		for _, r := range rs {
			if r.IgnoreOwnStatus {
				out = append(out, r.Queue+" "+r.Prefix)
			}
		}
		return strings.Join(out, "; ")
	}
	d := greetings(kinds.MustBuiltin(kinds.Pod))
	d.IgnoreOwnStatus = true
	s := New(nil, reserved, nil)
	rs, _ := s.Update([]Entry{entry(t, d, 10)})
	if got, want := ignoring(rs), "greetings /registry/greetings/"; got != want {
		t.Errorf("rules ignoring their own status: %q, want %q", got, want)
	}
	d.IgnoreOwnStatus = false
	if rs, _ = s.Update([]Entry{entry(t, d, 11)}); ignoring(rs) != "" {
		t.Errorf("after the opt-out was dropped, %q still ignore their own status", ignoring(rs))
	}

	configured := []rules.Rule{{Queue: "greetings", Prefix: "/registry/greetings/", Line: 2}}
	d.IgnoreOwnStatus = true
	rs, st := New(configured, reserved, nil).Update([]Entry{entry(t, d, 10)})
	if ignoring(rs) != "" || st[0].Refused != "" {
		t.Errorf("a declaration took over a configured rule's setting: %q ignore their own status, %+v", ignoring(rs), st)
	}
}

func TestMaxDeclarations(t *testing.T) {
	s := New(nil, reserved, nil)
	var entries []Entry
	for i := range MaxDeclarations + 2 {
		entries = append(entries, entry(t, kinds.Declaration{Queue: fmt.Sprintf("q%04d", i), For: kinds.Kind{Kind: "K", Resource: fmt.Sprintf("k%04d", i)}}, int64(i+1)))
	}
	rs, st := s.Update(entries)
	if len(rs) != MaxDeclarations {
		t.Errorf("%d rules in force, want %d", len(rs), MaxDeclarations)
	}
	refused := 0
	for _, x := range st {
		if x.Refused != "" {
			refused++
			if x.Key != "/baton/rules/q1000" && x.Key != "/baton/rules/q1001" {
				t.Errorf("%s refused, want the two newest", x.Key)
			}
		}
	}
	if refused != 2 {
		t.Errorf("%d refused, want 2", refused)
	}
}
