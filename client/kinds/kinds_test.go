package kinds

import (
	"slices"
	"strings"
	"testing"
)

func TestBuiltinDeclarationsAreValid(t *testing.T) {
	for _, d := range BuiltinDeclarations() {
		if err := d.Validate(); err != nil {
			t.Errorf("%s: %v", d.Queue, err)
		}
		data, err := d.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: Parse(Marshal()) = %v", d.Queue, err)
		}
		if back.Queue != d.Queue || back.For.Kind != d.For.Kind || len(back.Owns) != len(d.Owns) || back.IgnoreOwnStatus != d.IgnoreOwnStatus {
			t.Errorf("round trip changed %+v into %+v", d, back)
		}
		// Every reference controller computes its own status, so a change
		// of it alone is no news to that controller.
		if !d.IgnoreOwnStatus {
			t.Errorf("%s: the reference declaration does not ignore its own status changes", d.Queue)
		}
	}
}

func TestIgnoreOwnStatus(t *testing.T) {
	d := Declaration{Queue: "greetings", For: Kind{Kind: "Greeting", Resource: "greetings"}, Owns: []Kind{MustBuiltin(Pod)}}
	// Without the opt-out a declaration is encoded as before it existed, so
	// an observer that refuses unknown fields still takes it.
	data, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "ignoreOwnStatus") {
		t.Errorf("Marshal without the opt-out = %s, want no ignoreOwnStatus", data)
	}
	d.IgnoreOwnStatus = true
	if data, err = d.Marshal(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"ignoreOwnStatus":true`) {
		t.Errorf("Marshal = %s, want ignoreOwnStatus true", data)
	}
	back, err := Parse(data)
	if err != nil || !back.IgnoreOwnStatus {
		t.Fatalf("Parse(%s) = %+v, %v: want the opt-out back", data, back, err)
	}
	if old, err := Parse([]byte(`{"queue":"greetings","for":{"kind":"Greeting","resource":"greetings"}}`)); err != nil || old.IgnoreOwnStatus {
		t.Errorf("a declaration without the field = %+v, %v: want no opt-out", old, err)
	}
	if _, err := Parse([]byte(`{"queue":"a","for":{"kind":"A","resource":"as"},"ignoreOwnStatus":"yes"}`)); err == nil {
		t.Error("ignoreOwnStatus \"yes\" was accepted")
	}
	// The opt-out is the For rule's alone: a child's status is news to
	// its owner.
	want := []Rule{
		{Queue: "greetings", Prefix: "/registry/greetings/", IgnoreOwnStatus: true},
		{Queue: "greetings", Prefix: "/registry/pods/", OwnerKind: "Greeting"},
	}
	if got := back.Rules(); !slices.Equal(got, want) {
		t.Errorf("Rules() = %+v, want %+v", got, want)
	}
}

func TestRules(t *testing.T) {
	d := Declaration{Queue: "greetings", For: Kind{Kind: "Greeting", Resource: "greetings"}, Owns: []Kind{MustBuiltin(Pod)}}
	got := d.Rules()
	want := []Rule{
		{Queue: "greetings", Prefix: "/registry/greetings/"},
		{Queue: "greetings", Prefix: "/registry/pods/", OwnerKind: "Greeting"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Rules() = %+v, want %+v", got, want)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"not json", `{`, "not valid JSON"},
		{"unknown field", `{"queue":"a","for":{"kind":"A","resource":"as"},"own":[]}`, "unknown field"},
		{"trailing data", `{"queue":"a","for":{"kind":"A","resource":"as"}} {}`, "after its JSON"},
		{"bad queue", `{"queue":"A","for":{"kind":"A","resource":"as"}}`, "not a DNS label"},
		{"bad kind", `{"queue":"a","for":{"kind":"a","resource":"as"}}`, "not a kind name"},
		{"bad resource", `{"queue":"a","for":{"kind":"A","resource":"A/s"}}`, "resource"},
		{"bad alias", `{"queue":"a","for":{"kind":"A","resource":"as","aliases":["A b"]}}`, "alias"},
		{"owned twice", `{"queue":"a","for":{"kind":"A","resource":"as"},"owns":[{"kind":"B","resource":"bs"},{"kind":"B","resource":"bs"}]}`, "named twice"},
		{"owns itself", `{"queue":"a","for":{"kind":"A","resource":"as"},"owns":[{"kind":"A","resource":"as"}]}`, "named twice"},
		{"too large", `{"queue":"` + strings.Repeat("a", MaxDeclarationBytes) + `"}`, "at most"},
		{"the collector's queue", `{"queue":"garbagecollector","for":{"kind":"A","resource":"as"}}`, "garbage collector's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%.60s) = %v, want an error containing %q", tc.json, err, tc.want)
			}
		})
	}
}

// TestCollectorKey: the collector's keys name the resource, then the
// object's queue key, and split back; what is not one is refused.
func TestCollectorKey(t *testing.T) {
	pod := MustBuiltin(Pod)
	for _, qk := range []string{"default/web-x7k2p", "node-1"} {
		key := CollectorKey(pod, qk)
		if want := "pods/" + qk; key != want {
			t.Errorf("CollectorKey(pods, %s) = %q, want %q", qk, key, want)
		}
		res, back, err := SplitCollectorKey(key)
		if err != nil || res != "pods" || back != qk {
			t.Errorf("SplitCollectorKey(%q) = %q, %q, %v", key, res, back, err)
		}
	}
	for _, bad := range []string{"", "pods", "pods/", "/default/web", "Pods/default/web"} {
		if _, _, err := SplitCollectorKey(bad); err == nil {
			t.Errorf("SplitCollectorKey(%q) succeeded", bad)
		}
	}
}

func TestSet(t *testing.T) {
	s := NewSet()
	for _, name := range []string{"rs", "ReplicaSet", "replicasets", "REPLICASET"} {
		k, err := s.Lookup(name)
		if err != nil || k.Kind != ReplicaSet {
			t.Errorf("Lookup(%q) = %v, %v", name, k, err)
		}
	}
	if _, err := s.Lookup("greetings"); err == nil || !strings.Contains(err.Error(), "replicasets (rs)") {
		t.Errorf("Lookup of an unknown resource = %v, want the known ones listed", err)
	}
	// Event is known to a command line, but is no reference kind: no
	// reference controller declares it, and `get all` leaves it out.
	if k, err := s.Lookup("ev"); err != nil || k.Kind != Event || k.Prefix() != "/registry/events/" {
		t.Errorf("Lookup(ev) = %v, %v", k, err)
	}
	if slices.ContainsFunc(Builtin(), func(k Kind) bool { return k.Kind == Event }) {
		t.Error("Event is among the reference kinds")
	}
	for _, d := range BuiltinDeclarations() {
		if d.For.Kind == Event || slices.ContainsFunc(d.Owns, func(k Kind) bool { return k.Kind == Event }) {
			t.Errorf("the reference declaration of %s watches events", d.Queue)
		}
	}
	if got := s.Owns("deployments"); !slices.Equal(got, []string{"replicasets"}) {
		t.Errorf("Owns(deployments) = %v", got)
	}
	// A declaration of the garbage collector of earlier versions, one per
	// kind, read first (its key sorts first), teaches the kind but is not
	// the kind's declaration.
	greeting := Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"gr"}}
	s.Declare(Declaration{Queue: GarbageCollectorQueuePrefix + "greetings", For: greeting, IgnoreOwnStatus: true})
	if k, err := s.Lookup("gr"); err != nil || k.Kind != "Greeting" {
		t.Errorf("a kind the collector declares: Lookup(gr) = %v, %v", k, err)
	}
	if q, ok := s.Queue("greetings"); ok {
		t.Errorf("the collector's declaration is taken for the kind's own: Queue(greetings) = %q", q)
	}
	s.Declare(Declaration{Queue: "greetings", For: Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"gr"}}, Owns: []Kind{MustBuiltin(Pod)}})
	if k, err := s.Lookup("gr"); err != nil || k.Prefix() != "/registry/greetings/" {
		t.Errorf("a declared kind: Lookup(gr) = %v, %v", k, err)
	}
	if got := s.Owns("greetings"); !slices.Equal(got, []string{"pods"}) {
		t.Errorf("Owns(greetings) = %v", got)
	}
	if q, ok := s.Queue("greetings"); !ok || q != "greetings" {
		t.Errorf("Queue(greetings) = %q, %v", q, ok)
	}
	if q, ok := s.Queue("replicasets"); !ok || q != "replicasets" {
		t.Errorf("Queue(replicasets) = %q, %v", q, ok)
	}
	// A second definition of a known kind does not replace the first.
	s.Declare(Declaration{Queue: "x", For: Kind{Kind: "Pod", Resource: "pods", Aliases: []string{"p"}}})
	if _, err := s.Lookup("p"); err == nil {
		t.Error("a redeclared reference kind took new aliases")
	}
	if q, _ := s.Queue("pods"); q != "pods" {
		t.Errorf("a second declaration for pods took its queue: Queue(pods) = %q", q)
	}
	if n := len(s.All()); n != 7 {
		t.Errorf("%d kinds, want the 5 reference kinds, Event and Greeting", n)
	}
}
