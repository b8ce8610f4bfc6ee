package service_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/rules"
	"github.com/batonrun/baton/services/observer/service"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The greeter's declaration: greetings, owning pods.
var greetingKind = kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}}

func greetingsDeclaration() kinds.Declaration {
	return kinds.Declaration{Queue: "greetings", For: greetingKind, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}
}

// publish puts d where workers publish it and returns the put's revision.
func publish(t testing.TB, cli *clientv3.Client, d kinds.Declaration) int64 {
	t.Helper()
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return put(t, cli, d.Key(), string(b))
}

// put writes key and returns the put's revision.
func put(t testing.TB, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	resp, err := cli.Put(t.Context(), key, value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func del(t testing.TB, cli *clientv3.Client, key string) {
	t.Helper()
	if _, err := cli.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
}

// objectValue is an object of kind in ns, owned by an owner of ownerKind
// (none if ownerKind is empty).
func objectValue(kind, ns, name, ownerKind, owner string) string {
	m := map[string]any{"name": name, "namespace": ns, "uid": "uid-" + ns + "-" + name}
	if ownerKind != "" {
		m["ownerReferences"] = []map[string]string{{"kind": ownerKind, "name": owner, "uid": "uid-" + ns + "-" + owner}}
	}
	b, _ := json.Marshal(map[string]any{"kind": kind, "metadata": m})
	return string(b)
}

func observerStatus(t testing.TB, o *observerConn) *observerv1.StatusResponse {
	t.Helper()
	st, err := o.rpc.Status(t.Context(), &observerv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// ruleLines are the rules in force as "queue prefix ownerKind source [key]".
func ruleLines(st *observerv1.StatusResponse) []string {
	var out []string
	for _, r := range st.GetRules() {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s %s", r.GetQueue(), r.GetPrefix(), r.GetOwnerKind(), r.GetSource(), r.GetDeclarationKey())))
	}
	slices.Sort(out)
	return out
}

func prefixes(st *observerv1.StatusResponse) []string {
	var out []string
	for _, p := range st.GetPrefixes() {
		out = append(out, p.GetPrefix())
	}
	return out
}

// waitKeys waits until queue holds exactly want.
func waitKeys(t testing.TB, q *queueProc, queue string, want ...string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("queue %s to hold %v", queue, want), func() (bool, string) {
		got, err := q.keys(t.Context(), queue)
		if err != nil {
			return false, err.Error()
		}
		keys := slices.Sorted(maps.Keys(got))
		return slices.Equal(keys, slices.Sorted(slices.Values(want))), fmt.Sprint(keys)
	})
}

// A controller declares what it watches while the observer runs: its
// kind's objects, those that existed before, are announced, and so are
// owners of the pods it owns (a prefix the observer already watched);
// deleting the declaration stops both, and the prefix no other rule needs
// is no longer watched or cached.
func TestDeclarationStartsAndStopsItsRules(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, nil)
	for _, g := range []string{"g1", "g2", "g3"} {
		put(t, cli, greetingKind.Key("dec", g), objectValue("Greeting", "dec", g, "", ""))
	}
	// A pod owned by a greeting that is not (yet) stored: only the pods
	// rule of the declaration can announce dec/g9.
	put(t, cli, "/registry/pods/dec/child", objectValue("Pod", "dec", "child", "Greeting", "g9"))
	settle(t, o, cli)
	q.drain(t)
	if slices.Contains(prefixes(observerStatus(t, o)), "/registry/greetings/") {
		t.Fatal("greetings watched before any declaration")
	}

	publish(t, cli, greetingsDeclaration())
	waitKeys(t, q, "greetings", "dec/g1", "dec/g2", "dec/g3", "dec/g9")
	checkPriority(t, q, "greetings", []string{"dec/g1", "dec/g9"}, queuev1.Priority_PRIORITY_LOW)
	st := observerStatus(t, o)
	for _, want := range []string{
		"greetings /registry/greetings/  RULE_SOURCE_DECLARATION /baton/rules/greetings",
		"greetings /registry/pods/ Greeting RULE_SOURCE_DECLARATION /baton/rules/greetings",
		"pods /registry/pods/  RULE_SOURCE_CONFIG",
	} {
		if !slices.Contains(ruleLines(st), want) {
			t.Errorf("Status rules %q lack %q", ruleLines(st), want)
		}
	}
	if d := st.GetDeclarations(); len(d) != 1 || d[0].GetKey() != "/baton/rules/greetings" || d[0].GetInForceRevision() != d[0].GetModRevision() || d[0].GetRefused() != "" {
		t.Errorf("Status declarations = %v, want greetings in force", d)
	}
	if _, err := o.rpc.Get(t.Context(), &observerv1.GetRequest{Key: greetingKind.Key("dec", "g1"), MinRevision: headRevision(t, cli)}); err != nil {
		t.Errorf("Get of a declared kind's object: %v", err)
	}

	// Live changes: a new greeting, and a pod adopted by another one.
	settle(t, o, cli)
	q.drainQueues(t, "greetings")
	put(t, cli, greetingKind.Key("dec", "g4"), objectValue("Greeting", "dec", "g4", "", ""))
	put(t, cli, "/registry/pods/dec/child", objectValue("Pod", "dec", "child", "Greeting", "g1"))
	waitKeys(t, q, "greetings", "dec/g1", "dec/g4", "dec/g9")
	checkPriority(t, q, "greetings", []string{"dec/g4", "dec/g1"}, queuev1.Priority_PRIORITY_NORMAL)

	del(t, cli, greetingsDeclaration().Key())
	waitFor(t, 30*time.Second, "the declaration's rules and prefix to go", func() (bool, string) {
		st := observerStatus(t, o)
		for _, l := range ruleLines(st) {
			if strings.HasPrefix(l, "greetings ") {
				return false, fmt.Sprint(ruleLines(st))
			}
		}
		return !slices.Contains(prefixes(st), "/registry/greetings/") && len(st.GetDeclarations()) == 0, fmt.Sprint(prefixes(st))
	})
	_, err := o.rpc.Get(t.Context(), &observerv1.GetRequest{Key: greetingKind.Key("dec", "g1")})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Get under a prefix no longer watched = %v, want InvalidArgument", err)
	}
	settle(t, o, cli)
	q.drainQueues(t, "greetings")
	put(t, cli, greetingKind.Key("dec", "g5"), objectValue("Greeting", "dec", "g5", "", ""))
	put(t, cli, "/registry/pods/dec/child", objectValue("Pod", "dec", "child", "Greeting", "g2"))
	settle(t, o, cli)
	waitKeys(t, q, "pods", "dec/child") // the pods rule still hears the pod
	waitKeys(t, q, "greetings")
}

// Declarations the observer refuses change nothing: one that is not valid,
// one at a key that is not its queue's, one whose prefix nests around a
// configured rule's. Each is logged at WARN once, counted and shown in
// Status; a declaration in force changed into an invalid one keeps its
// earlier version in force.
func TestRefusedDeclarationsChangeNothing(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	logs := newLogCapture(t)
	o := startObserverLog(t, srv.Endpoints(), q.addr, func(c *service.Config) {
		c.Rules = append(slices.Clone(testRules), rules.Rule{Queue: "widgets", Prefix: "/registry/widgets/blue/"})
	}, logs.logger())
	settle(t, o, cli)
	before := observerStatus(t, o)

	widgets := kinds.Declaration{Queue: "widgets", For: kinds.Kind{Kind: "Widget", Resource: "widgets"}}
	wb, _ := widgets.Marshal()
	gb, _ := greetingsDeclaration().Marshal()
	refused := map[string]string{
		"/baton/rules/junk":    "not valid JSON",
		"/baton/rules/other":   "declares queue greetings",
		"/baton/rules/widgets": "prefix /registry/widgets/ overlaps prefix /registry/widgets/blue/",
	}
	put(t, cli, "/baton/rules/junk", "{")
	put(t, cli, "/baton/rules/other", string(gb))
	put(t, cli, "/baton/rules/widgets", string(wb))
	rev := put(t, cli, "/baton/rules/junk", "{") // the same refusal again: not logged again
	waitFor(t, 30*time.Second, "three refused declarations in Status", func() (bool, string) {
		st := observerStatus(t, o)
		n := 0
		for _, d := range st.GetDeclarations() {
			if w := refused[d.GetKey()]; w != "" && strings.Contains(d.GetRefused(), w) && d.GetInForceRevision() == 0 {
				n++
			}
			if d.GetKey() == "/baton/rules/junk" && d.GetModRevision() != rev {
				return false, "junk not at its last revision yet"
			}
		}
		return n == 3, fmt.Sprint(st.GetDeclarations())
	})
	settle(t, o, cli)
	after := observerStatus(t, o)
	if !slices.Equal(ruleLines(after), ruleLines(before)) || !slices.Equal(prefixes(after), prefixes(before)) {
		t.Errorf("refused declarations changed the rules or prefixes:\n%q %q\n%q %q", ruleLines(before), prefixes(before), ruleLines(after), prefixes(after))
	}
	for key := range refused {
		if got := logs.find(slog.LevelWarn, "declaration refused", map[string]string{"key": key, "reason": "*"}); len(got) != 1 {
			t.Errorf("%s: %d WARN lines, want 1: %v", key, len(got), got)
		}
	}
	if got := scrape(t, o.httpAddr, "baton_observer_declarations_refused")[""]; got != 3 {
		t.Errorf("baton_observer_declarations_refused = %v, want 3", got)
	}
	if got := scrape(t, o.httpAddr, "baton_observer_declarations")[""]; got != 0 {
		t.Errorf("baton_observer_declarations = %v, want 0", got)
	}

	// In force, then changed into something invalid: the earlier version
	// stays in force.
	inForce := publish(t, cli, greetingsDeclaration())
	waitFor(t, 30*time.Second, "greetings in force", func() (bool, string) {
		return slices.Contains(prefixes(observerStatus(t, o)), "/registry/greetings/"), fmt.Sprint(prefixes(observerStatus(t, o)))
	})
	put(t, cli, greetingsDeclaration().Key(), `{"queue":"greetings"}`)
	waitFor(t, 30*time.Second, "the changed greetings declaration refused", func() (bool, string) {
		for _, d := range observerStatus(t, o).GetDeclarations() {
			if d.GetKey() == "/baton/rules/greetings" {
				return d.GetRefused() != "" && d.GetInForceRevision() == inForce, fmt.Sprint(d)
			}
		}
		return false, "not in Status"
	})
	if !slices.Contains(prefixes(observerStatus(t, o)), "/registry/greetings/") {
		t.Error("a refused change of a declaration in force stopped its rules")
	}
}

// The reference workers publish the built-in declarations: an observer
// running the built-in rules takes them as in force and announces nothing,
// lists nothing and watches nothing new.
func TestBuiltinDeclarationsAnnounceNothingNew(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, func(c *service.Config) { c.Rules = nil })
	put(t, cli, "/registry/replicasets/b/web", objectValue("ReplicaSet", "b", "web", "Deployment", "web"))
	for i := range 5 {
		put(t, cli, fmt.Sprintf("/registry/pods/b/web-%d", i), objectValue("Pod", "b", fmt.Sprintf("web-%d", i), "ReplicaSet", "web"))
	}
	settle(t, o, cli)
	queues := []string{"deployments", "jobs", "pods", "replicasets", "statefulsets"}
	q.drainQueues(t, queues...)
	before := observerStatus(t, o)

	for _, d := range kinds.BuiltinDeclarations() {
		publish(t, cli, d)
	}
	waitFor(t, 30*time.Second, "the five built-in declarations in force", func() (bool, string) {
		ds := observerStatus(t, o).GetDeclarations()
		n := 0
		for _, d := range ds {
			if d.GetRefused() == "" && d.GetInForceRevision() > 0 {
				n++
			}
		}
		return n == 5, fmt.Sprint(ds)
	})
	settle(t, o, cli)
	after := observerStatus(t, o)
	if !slices.Equal(ruleLines(after), ruleLines(before)) || len(after.GetRules()) != len(rules.Builtin()) {
		t.Errorf("rules changed: %q, want %q", ruleLines(after), ruleLines(before))
	}
	for i, p := range after.GetPrefixes() {
		if b := before.GetPrefixes()[i]; p.GetPrefix() != b.GetPrefix() || p.GetRelistsTotal() != b.GetRelistsTotal() {
			t.Errorf("prefix %s: relists %d → %d (or a new prefix)", p.GetPrefix(), b.GetRelistsTotal(), p.GetRelistsTotal())
		}
	}
	for _, name := range queues {
		if keys, err := q.keys(t.Context(), name); err == nil && len(keys) > 0 {
			t.Errorf("queue %s holds %v after the built-in declarations were published", name, slices.Sorted(maps.Keys(keys)))
		}
	}
}

// waitRecordCovers waits until the checkpoint is at least rev and the
// known-key record beside it, valid at it, covers prefix.
func waitRecordCovers(t testing.TB, cli *clientv3.Client, prefix string, rev int64) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("a record covering %s at %d or later", prefix, rev), func() (bool, string) {
		at, covered, err := checkpoint.NewEtcd(cli).Covers(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(covered, prefix) && at >= rev, fmt.Sprintf("record at %d, prefixes %v", at, covered)
	})
}

// A declared prefix has the guarantees of a configured one: the observer
// process is killed, greetings are deleted, created and changed while none
// runs, etcd compacts that history, and a controller declares widgets
// meanwhile. The restarted observer announces the deletes from the
// known-key record, the rest from its lists, and the widgets' backlog.
func TestDeclaredPrefixSurvivesSIGKILLAndCompaction(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	publish(t, cli, greetingsDeclaration())
	for i := range 20 {
		name := fmt.Sprintf("g%03d", i)
		put(t, cli, greetingKind.Key("crash", name), objectValue("Greeting", "crash", name, "", ""))
	}
	o := startObserverProcess(t, srv.Endpoints(), q.addr)
	settle(t, o, cli)
	q.drainQueues(t, "greetings")
	waitRecordCovers(t, cli, "/registry/greetings/", lastChange(t, cli))
	o.proc.Kill()

	var deleted []string
	for i := range 5 {
		name := fmt.Sprintf("g%03d", i)
		del(t, cli, greetingKind.Key("crash", name))
		deleted = append(deleted, "crash/"+name)
	}
	put(t, cli, greetingKind.Key("crash", "g010"), objectValue("Greeting", "crash", "g010", "", "")+" ")
	put(t, cli, greetingKind.Key("crash", "g100"), objectValue("Greeting", "crash", "g100", "", ""))
	widgets := kinds.Declaration{Queue: "widgets", For: kinds.Kind{Kind: "Widget", Resource: "widgets"}}
	publish(t, cli, widgets)
	put(t, cli, widgets.For.Key("crash", "w1"), objectValue("Widget", "crash", "w1", "", ""))
	if _, err := cli.Compact(t.Context(), headRevision(t, cli), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	o.proc.Start() // the same ports
	o2 := o
	settle(t, o2, cli)
	want := append(slices.Clone(deleted), "crash/g100", "crash/g010")
	got, err := q.keys(t.Context(), "greetings")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range want {
		if !got[k] {
			t.Errorf("queue greetings lacks %s after the restart", k)
		}
	}
	checkPriority(t, q, "greetings", deleted, queuev1.Priority_PRIORITY_NORMAL)
	waitKeys(t, q, "widgets", "crash/w1")
	if !slices.Contains(prefixes(observerStatus(t, o2)), "/registry/widgets/") {
		t.Errorf("the widgets declared while no observer ran are not watched: %v", prefixes(observerStatus(t, o2)))
	}
}

// collectorStatus is Status asked for the garbage collector's rules.
func collectorStatus(t testing.TB, o *observerConn) *observerv1.StatusResponse {
	t.Helper()
	st, err := o.rpc.Status(t.Context(), &observerv1.StatusRequest{Queue: kinds.GarbageCollectorQueue})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// collectedKinds are the kinds the observer feeds the garbage collector,
// as "Kind prefix" lines, sorted.
func collectedKinds(st *observerv1.StatusResponse) []string {
	var out []string
	for _, r := range st.GetRules() {
		if r.GetQueue() == kinds.GarbageCollectorQueue && r.GetResourceKeys() {
			out = append(out, r.GetKind()+" "+r.GetPrefix())
		}
	}
	slices.Sort(out)
	return out
}

// With the built-in rules, the observer feeds the garbage collector's one
// queue every object of every kind in force, keyed by resource: the
// reference kinds from the start, a declared kind (its backlog, then its
// changes) while its declaration is in force, never a refused one's.
// Status asked for the collector's queue holds its rules alone, each
// with its kind, and a declarations revision that passes every change
// under /baton/rules/ once the rules reflect it.
func TestCollectorIsFedEveryKindInForce(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, func(c *service.Config) { c.Rules = nil })
	put(t, cli, "/registry/pods/gc/web-1", objectValue("Pod", "gc", "web-1", "ReplicaSet", "web"))
	put(t, cli, greetingKind.Key("gc", "g1"), objectValue("Greeting", "gc", "g1", "", ""))
	settle(t, o, cli)
	waitKeys(t, q, kinds.GarbageCollectorQueue, "pods/gc/web-1")
	st := collectorStatus(t, o)
	reference := []string{"Deployment /registry/deployments/", "Job /registry/jobs/", "Pod /registry/pods/", "ReplicaSet /registry/replicasets/", "StatefulSet /registry/statefulsets/"}
	if got := collectedKinds(st); !slices.Equal(got, reference) || len(st.GetRules()) != len(reference) || len(st.GetPrefixes())+len(st.GetDeclarations())+len(st.GetOutboxes()) != 0 {
		t.Errorf("Status of the collector's queue: %v, want its rules of the reference kinds alone", st)
	}
	if st.GetDeclarationsRevision() <= 0 {
		t.Errorf("declarations revision %d once listed", st.GetDeclarationsRevision())
	}

	rev := publish(t, cli, greetingsDeclaration())
	waitKeys(t, q, kinds.GarbageCollectorQueue, "pods/gc/web-1", "greetings/gc/g1")
	waitFor(t, 30*time.Second, "the declarations revision to pass the declaration", func() (bool, string) {
		st := collectorStatus(t, o)
		return st.GetDeclarationsRevision() >= rev, fmt.Sprint(st.GetDeclarationsRevision())
	})
	if got, want := collectedKinds(collectorStatus(t, o)), append(slices.Clone(reference), "Greeting /registry/greetings/"); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("fed %v, want %v", got, want)
	}
	// A status-only change says nothing of owners or deletion.
	q.drainQueues(t, kinds.GarbageCollectorQueue)
	var g map[string]any
	json.Unmarshal([]byte(objectValue("Greeting", "gc", "g1", "", "")), &g)
	g["status"] = map[string]any{"said": "hello"}
	b, _ := json.Marshal(g)
	put(t, cli, greetingKind.Key("gc", "g1"), string(b))
	put(t, cli, greetingKind.Key("gc", "g2"), objectValue("Greeting", "gc", "g2", "", ""))
	waitKeys(t, q, kinds.GarbageCollectorQueue, "greetings/gc/g2")

	// A refused declaration feeds nothing: its revision is weighed, and
	// its kind is not fed.
	refused := kinds.Declaration{Queue: "widgets", For: kinds.Kind{Kind: "Widget", Resource: "widgets"}}
	b, _ = refused.Marshal()
	rev = put(t, cli, "/baton/rules/impostor", string(b))
	waitFor(t, 30*time.Second, "the refused declaration weighed", func() (bool, string) {
		st := collectorStatus(t, o)
		return st.GetDeclarationsRevision() >= rev, fmt.Sprint(st.GetDeclarationsRevision())
	})
	if got := collectedKinds(collectorStatus(t, o)); slices.Contains(got, "Widget /registry/widgets/") {
		t.Errorf("a refused declaration's kind is fed: %v", got)
	}

	rev = headRevision(t, cli)
	del(t, cli, greetingsDeclaration().Key())
	waitFor(t, 30*time.Second, "the declared kind's feed to go", func() (bool, string) {
		st := collectorStatus(t, o)
		return slices.Equal(collectedKinds(st), reference) && st.GetDeclarationsRevision() > rev, fmt.Sprint(collectedKinds(st), st.GetDeclarationsRevision())
	})
}
