package declarations

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
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
	for i := range kinds.MaxDeclarations + 2 {
		entries = append(entries, entry(t, kinds.Declaration{Queue: fmt.Sprintf("q%04d", i), For: kinds.Kind{Kind: "K", Resource: fmt.Sprintf("k%04d", i)}}, int64(i+1)))
	}
	rs, st := s.Update(entries)
	if len(rs) != kinds.MaxDeclarations {
		t.Errorf("%d rules in force, want %d", len(rs), kinds.MaxDeclarations)
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

// wide is the declaration of queue q for a kind of its own owning
// kinds.MaxOwns kinds of its own: 1 + kinds.MaxOwns prefixes no other
// declaration has.
func wide(q string) kinds.Declaration {
	d := kinds.Declaration{Queue: q, For: kinds.Kind{Kind: "K" + q, Resource: q}}
	for j := range kinds.MaxOwns {
		d.Owns = append(d.Owns, kinds.Kind{Kind: fmt.Sprintf("K%sO%d", q, j), Resource: fmt.Sprintf("%s-o%d", q, j)})
	}
	return d
}

// The declarations' prefixes beyond the configured ones are at most
// kinds.MaxDeclaredPrefixes: a declaration that would pass it is refused
// whole, and one that adds no prefix (or few enough) still comes in.
func TestMaxDeclaredPrefixes(t *testing.T) {
	configured := []rules.Rule{{Queue: "pods", Prefix: "/registry/pods/"}}
	var logs bytes.Buffer
	s := New(configured, reserved, slog.New(slog.NewTextHandler(&logs, nil)))
	per := 1 + kinds.MaxOwns
	fit := kinds.MaxDeclaredPrefixes / per
	var entries []Entry
	for i := range fit + 1 {
		entries = append(entries, entry(t, wide(fmt.Sprintf("w%03d", i)), int64(i+1)))
	}
	// One more kind fits beside them, and a controller of pods owning pods
	// adds no prefix.
	room := kinds.MaxDeclaredPrefixes - fit*per
	small := kinds.Declaration{Queue: "small", For: kinds.Kind{Kind: "Small", Resource: "smalls"}}
	podsToo := kinds.Declaration{Queue: "pods2", For: kinds.MustBuiltin(kinds.Pod)}
	entries = append(entries, entry(t, small, 1000), entry(t, podsToo, 1001))
	rs, st := s.Update(entries)
	if got, want := len(rules.Prefixes(rs)), 1+fit*per+min(room, 1); got != want {
		t.Errorf("%d prefixes in force, want %d", got, want)
	}
	tooMany := fmt.Sprintf("/baton/rules/w%03d", fit)
	for _, x := range st {
		switch {
		case x.Key == tooMany:
			if x.Reason != ReasonTooManyPrefixes || !strings.Contains(x.Refused, fmt.Sprintf("at most %d (kinds.MaxDeclaredPrefixes)", kinds.MaxDeclaredPrefixes)) {
				t.Errorf("%s: refused %q (%s), want over kinds.MaxDeclaredPrefixes", x.Key, x.Refused, x.Reason)
			}
		case x.Refused != "":
			t.Errorf("%s refused: %s", x.Key, x.Refused)
		}
	}
	s.Update(entries)
	if n := strings.Count(logs.String(), "declaration refused"); n != 1 {
		t.Errorf("%d refusals logged over two updates, want 1:\n%s", n, logs.String())
	}
	// One gone: the refused one comes in.
	rs, st = s.Update(slices.Delete(slices.Clone(entries), 0, 1))
	for _, x := range st {
		if x.Refused != "" {
			t.Errorf("%s refused after another left: %s", x.Key, x.Refused)
		}
	}
	if got := len(rules.Prefixes(rs)); got > 1+kinds.MaxDeclaredPrefixes {
		t.Errorf("%d prefixes in force", got)
	}
}

// A value is parsed once per mod revision: an Update of declarations it
// has seen does not parse them again, whatever their number.
func TestUpdateParsesEachValueOnce(t *testing.T) {
	s := New(nil, reserved, nil)
	var entries []Entry
	size := 0
	for i := range 2000 {
		// Valid JSON at the wrong key, a few KiB each: refused every time.
		d := wide(fmt.Sprintf("r%04d", i))
		b, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, Entry{Key: fmt.Sprintf("/baton/rules/x%04d", i), ModRevision: int64(i + 1), Value: b})
		size += len(b)
	}
	s.Update(entries)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, st := s.Update(entries)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(size)/4 {
		t.Errorf("an Update of %d declarations seen before allocated %d bytes (their values: %d); want no parse", len(entries), got, size)
	}
	if st[0].Reason != ReasonWrongKey {
		t.Errorf("status %+v, want refused for its key", st[0])
	}
}

// collected is the garbage collector's rules of rs as "Kind prefix" lines.
func collected(rs []rules.Rule) string {
	var lines []string
	for _, r := range rs {
		if r.Queue == kinds.GarbageCollectorQueue {
			lines = append(lines, r.Kind+" "+r.Prefix)
		}
	}
	return strings.Join(lines, "; ")
}

// TestCollectorFollowsTheDeclarationsInForce: on top of the built-in
// rules, the garbage collector is fed the kinds of the declarations in
// force, each once, and nothing of a refused declaration; a kind goes
// from its feed with the last declaration in force that names it, and the
// kinds of a refused version of a key stay fed while its version in force
// stays. Without the built-in rules it is fed nothing.
func TestCollectorFollowsTheDeclarationsInForce(t *testing.T) {
	s := New(rules.Builtin(), reserved, nil)
	builtin := collected(rules.Builtin())
	rs, _ := s.Update(nil)
	if got := collected(rs); got != builtin {
		t.Fatalf("fed %q with no declaration, want the reference kinds %q", got, builtin)
	}
	bar := kinds.Kind{Kind: "Bar", Resource: "bars"}
	d := greetings(kinds.MustBuiltin(kinds.Pod), bar)
	also := kinds.Declaration{Queue: "bars", For: bar}
	rs, _ = s.Update([]Entry{entry(t, d, 10), entry(t, also, 11)})
	if got, want := collected(rs), builtin+"; Greeting /registry/greetings/; Bar /registry/bars/"; got != want {
		t.Fatalf("fed %q, want %q", got, want)
	}
	// The first declaration goes: Bar stays fed by the second.
	rs, _ = s.Update([]Entry{entry(t, also, 11)})
	if got, want := collected(rs), builtin+"; Bar /registry/bars/"; got != want {
		t.Fatalf("fed %q, want %q", got, want)
	}
	// A refused version keeps the version in force, and its kinds.
	bad := Entry{Key: also.Key(), ModRevision: 12, Value: []byte(`{"queue":"bars"}`)}
	rs, st := s.Update([]Entry{bad})
	if got, want := collected(rs), builtin+"; Bar /registry/bars/"; got != want || st[0].Refused == "" || st[0].InForceRevision != 11 {
		t.Fatalf("fed %q, want %q; status %+v", got, want, st)
	}
	// A declaration refused from the start feeds nothing.
	var entries []Entry
	for i := range kinds.MaxDeclarations {
		entries = append(entries, entry(t, kinds.Declaration{Queue: fmt.Sprintf("q%04d", i), For: kinds.MustBuiltin(kinds.Pod)}, int64(100+i)))
	}
	late := kinds.Declaration{Queue: "late", For: kinds.Kind{Kind: "Late", Resource: "lates"}}
	rs, st = New(rules.Builtin(), reserved, nil).Update(append(entries, entry(t, late, 5000)))
	if got := collected(rs); got != builtin {
		t.Errorf("fed %q past kinds.MaxDeclarations, want the reference kinds alone", got)
	}
	if i := slices.IndexFunc(st, func(x Status) bool { return x.Key == late.Key() }); i < 0 || st[i].Reason != ReasonTooManyDeclarations {
		t.Errorf("the declaration past the cap: %+v", st)
	}

	rs, _ = New([]rules.Rule{{Queue: "pods", Prefix: "/registry/pods/", Line: 2}}, reserved, nil).Update([]Entry{entry(t, d, 10)})
	if got := collected(rs); got != "" {
		t.Errorf("fed %q without the built-in rules", got)
	}
}
