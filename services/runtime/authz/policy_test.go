package authz

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func ident(name string, roles ...string) tlsfiles.Identity {
	return tlsfiles.Identity{Name: name, Roles: roles}
}

func mustParse(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// greetingsPolicy restricts workers' leasing to the queue greetings; they
// may still see every queue's Stats.
const greetingsPolicy = `allow:
  # workers lease only from greetings
  - roles: [worker]
    methods:
      - /baton.queue.v1.QueueService/Lease
      - /baton.queue.v1.QueueService/Ack
      - /baton.queue.v1.QueueService/Extend
      - /baton.queue.v1.QueueService/Work
    queues: [greetings]
  - roles: [worker]
    methods: [/baton.queue.v1.QueueService/Stats]
  - roles: [admin]
    methods: [/baton.queue.v1.QueueService/*]
`

// TestAuthorize checks decisions that the gRPC tests do not reach: globs,
// Stats of every queue, several roles, several rules, methods outside the
// table, the open services.
func TestAuthorize(t *testing.T) {
	policy := mustParse(t, `allow:
  - roles: [worker]
    methods: [/baton.queue.v1.QueueService/Lease]
    queues: ["greet*", mail]
  - roles: [observer]
    methods: [/baton.queue.v1.QueueService/Lease]
    queues: [audit]
  - roles: [viewer]
    methods: [/baton.queue.v1.QueueService/Stats]
    queues: ["*"]
  - roles: [observer]
    methods: [/baton.queue.v1.QueueService/Stats]
    queues: ["team-[ab]"]
  - roles: [admin]
    methods: [/baton.queue.v1.QueueService/*, /baton.queue.v1.ClusterService/*]
`)
	lease := queuev1.QueueService_Lease_FullMethodName
	stats := queuev1.QueueService_Stats_FullMethodName
	cases := []struct {
		id     tlsfiles.Identity
		method string
		queue  string
		want   string // "" for allowed, else the message
	}{
		{ident("w", "worker"), lease, "greetings", ""},
		{ident("w", "worker"), lease, "greet", ""},
		{ident("w", "worker"), lease, "mail", ""},
		{ident("w", "worker"), lease, "mailbox", `authz: "w" (roles worker) may not call /baton.queue.v1.QueueService/Lease on queue "mailbox"`},
		{ident("w", "worker"), lease, "audit", `authz: "w" (roles worker) may not call /baton.queue.v1.QueueService/Lease on queue "audit"`},
		{ident("wo", "worker", "observer"), lease, "audit", ""}, // the roles add up
		{ident("wo", "worker", "observer"), lease, "mail", ""},
		{ident("v", "viewer"), stats, "", ""}, // "*" matches Stats of every queue
		{ident("o", "observer"), stats, "team-a", ""},
		{ident("o", "observer"), stats, "team-c", `authz: "o" (roles observer) may not call /baton.queue.v1.QueueService/Stats on queue "team-c"`},
		{ident("o", "observer"), stats, "", `authz: "o" (roles observer) may not call /baton.queue.v1.QueueService/Stats on queue ""`},
		{ident("v", "viewer"), lease, "x", `authz: "v" (roles viewer) may not call /baton.queue.v1.QueueService/Lease on queue "x": it needs one of the roles worker, observer, admin`},
		{ident("a", "admin"), queueWork, "x", ""},
		{ident("a", "admin"), queuev1.ClusterService_MemberAdd_FullMethodName, "", ""},
		{ident("a", "admin"), "/baton.observer.v1.ObserverService/Get", "", `authz: "a" (roles admin) may not call /baton.observer.v1.ObserverService/Get: the policy allows it to no role`},
		{ident("a", "admin"), "/baton.queue.v1.QueueService/Purge", "x", `authz: "a" (roles admin) may not call /baton.queue.v1.QueueService/Purge on queue "x": it is not a method of the role table`},
		{ident("a", "admin"), "/other.v1.Thing/Do", "", `authz: "a" (roles admin) may not call /other.v1.Thing/Do: it is not a method of the role table`},
		{ident("a", "admin"), "garbage", "", `authz: "a" (roles admin) may not call garbage: it is not a method of the role table`},
		{ident("n"), lease, "greetings", `authz: "n" (no roles) may not call /baton.queue.v1.QueueService/Lease on queue "greetings": it needs one of the roles worker, observer, admin`},
		{ident("s", "superuser"), lease, "greetings", `authz: "s" (roles superuser) may not call /baton.queue.v1.QueueService/Lease on queue "greetings": it needs one of the roles worker, observer, admin`},
		{ident("n"), "/grpc.health.v1.Health/Check", "", ""},
		{ident("n"), "/grpc.health.v1.Health/Watch", "", ""},
		{ident("n"), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "", ""},
	}
	for _, tc := range cases {
		err := policy.Authorize(tc.id, tc.method, tc.queue)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %s on %q: %v, want allowed", tc.id, tc.method, tc.queue, err)
			}
			continue
		}
		if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != tc.want {
			t.Errorf("%s %s on %q:\n got %v\nwant PERMISSION_DENIED %q", tc.id, tc.method, tc.queue, err, tc.want)
		}
	}
}

// TestAuthorizeMethod checks the decision at a stream's start: refused,
// allowed on every queue, or left to the first message's queue.
func TestAuthorizeMethod(t *testing.T) {
	policy := mustParse(t, greetingsPolicy)
	cases := []struct {
		id         tlsfiles.Identity
		method     string
		checkQueue bool
		denied     bool
	}{
		{ident("w", "worker"), queueWork, true, false},
		{ident("a", "admin"), queueWork, false, false},
		{ident("wa", "worker", "admin"), queueWork, false, false},
		{ident("v", "viewer"), queueWork, false, true},
		{ident("n"), "/grpc.health.v1.Health/Watch", false, false},
	}
	for _, tc := range cases {
		checkQueue, err := policy.authorizeMethod(tc.id, tc.method)
		if checkQueue != tc.checkQueue || (err != nil) != tc.denied {
			t.Errorf("%s %s: (%v, %v), want checkQueue %v, denied %v", tc.id, tc.method, checkQueue, err, tc.checkQueue, tc.denied)
		}
	}
}

// TestParseErrors checks that what a policy file gets wrong is refused with
// its line and a precise reason.
func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"empty", "", "authz: policy: the file is empty"},
		{"comments only", "# nothing\n", "authz: policy: the file is empty"},
		{"yaml syntax", "allow:\n  - roles: [admin]\n    paths: [/]\n\tx: y\n", "authz: policy: yaml: line 4: found character that cannot start any token"},
		{"not a mapping", "- admin\n", "authz: policy: line 1: a policy is a mapping with the key allow, not a list"},
		{"unknown top key", "allow:\n  - roles: [admin]\n    paths: [/]\nrules: []\n", `authz: policy: line 4: unknown key "rules" (a policy has the keys allow and limits)`},
		{"no allow", "{}\n", "authz: policy: line 1: the policy has no key allow"},
		{"allow twice", "allow: []\nallow: []\n", "line 2: allow is given twice (first at line 1)"},
		{"allow not a list", "allow: admin\n", `authz: policy: line 1: allow is a list of rules, not the value "admin"`},
		{"no rules", "allow: []\n", "authz: policy: the policy has no rules"},
		{"rule not a mapping", "allow:\n  - admin\n", `line 2: a rule is a mapping with roles and methods, paths or both, not the value "admin"`},
		{"unknown rule key", "allow:\n  - roles: [admin]\n    method: [/baton.queue.v1.QueueService/Add]\n", `line 3: unknown key "method" in a rule (a rule has roles, methods, queues and paths)`},
		{"key twice", "allow:\n  - roles: [admin]\n    roles: [viewer]\n    paths: [/]\n", "line 3: roles is given twice in the rule (first at line 2)"},
		{"roles a string", "allow:\n  - roles: admin\n    paths: [/]\n", `line 2: roles is a list, as [a, b], not the value "admin"`},
		{"roles empty value", "allow:\n  - roles:\n    paths: [/]\n", "line 2: roles is a list, as [a, b], not empty"},
		{"list of lists", "allow:\n  - roles: [[admin]]\n    paths: [/]\n", "line 2: each of roles is a string, not a list"},
		{"alias", "allow:\n  - roles: &r [admin]\n    paths: [/]\n  - roles: *r\n    paths: [/metrics]\n", "line 4: roles is a list, as [a, b], not an alias"},
		{"empty roles", "allow:\n  - roles: []\n    paths: [/]\n", "line 2: roles is an empty list: name at least one, or leave roles out"},
		{"empty queues", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: []\n", "line 4: queues is an empty list, which would match no queue: leave it out to allow every queue"},
		{"no roles", "allow:\n  - paths: [/]\n", "line 2: the rule names no roles"},
		{"nothing allowed", "allow:\n  - roles: [admin]\n", "line 2: the rule names no methods and no paths"},
		{"unknown role", "allow:\n  - roles: [admin,\n      workers]\n    paths: [/]\n", `line 3: unknown role "workers" (the roles are observer, worker, viewer, admin, queue-peer)`},
		{"role twice", "allow:\n  - roles: [admin, admin]\n    paths: [/]\n", "line 2: role admin is named twice in the rule"},
		{"short method", "allow:\n  - roles: [admin]\n    methods: [QueueService/Add]\n", `line 3: method "QueueService/Add" is not a full gRPC method name ("/baton.queue.v1.QueueService/Add", or "/baton.queue.v1.QueueService/*" for every method of the service)`},
		{"unknown service", "allow:\n  - roles: [admin]\n    methods: [/baton.queue.v2.QueueService/Add]\n", "line 3: method /baton.queue.v2.QueueService/Add: unknown service baton.queue.v2.QueueService (the services are baton.queue.v1.QueueService, baton.observer.v1.ObserverService, baton.queue.v1.ClusterService, baton.queue.v1.RaftService)"},
		{"unknown method", "allow:\n  - roles: [admin]\n    methods:\n      - /baton.queue.v1.QueueService/Add\n      - /baton.queue.v1.QueueService/Lese\n", "line 5: unknown method /baton.queue.v1.QueueService/Lese (QueueService has Add, Lease, Ack, Extend, Work, Forget, Inspect, List, Stats; /baton.queue.v1.QueueService/* is all of them)"},
		{"health", "allow:\n  - roles: [admin]\n    methods: [/grpc.health.v1.Health/Check]\n", "line 3: method /grpc.health.v1.Health/Check: grpc.health.v1.Health is open to every client with a verified certificate, and a policy does not name it"},
		{"method twice", "allow:\n  - roles: [admin]\n    methods: [/baton.queue.v1.QueueService/Add, /baton.queue.v1.QueueService/Add]\n", "line 3: method /baton.queue.v1.QueueService/Add is named twice in the rule"},
		{"queues on observer", "allow:\n  - roles: [viewer]\n    methods:\n      - /baton.queue.v1.QueueService/Stats\n      - /baton.observer.v1.ObserverService/Get\n    queues: [greetings]\n", "line 5: method /baton.observer.v1.ObserverService/Get names no queue, so a rule with queues cannot allow it (queues restrict QueueService methods only)"},
		{"queues with paths", "allow:\n  - roles: [viewer]\n    methods: [/baton.queue.v1.QueueService/Stats]\n    paths: [/]\n    queues: [greetings]\n", "line 2: the rule names queues and paths"},
		{"queues without methods", "allow:\n  - roles: [viewer]\n    queues: [greetings]\n", "line 2: the rule names no methods and no paths"},
		{"queue upper case", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [Greetings]\n", `line 4: queue "Greetings" has 'G', which no queue name has (queue names are DNS labels: a-z, 0-9 and -)`},
		{"queue with slash", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [a/b]\n", `line 4: queue "a/b" has '/'`},
		{"queue not a label", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [-greetings]\n", `line 4: queue "-greetings" is not a queue name`},
		{"queue too long", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [" + strings.Repeat("a", 64) + "]\n", "is not a queue name (a DNS label"},
		{"bad glob", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [\"greet[\"]\n", `line 4: queue pattern "greet[" is malformed: syntax error in pattern`},
		{"empty queue", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [\"\"]\n", "line 4: a queue is empty"},
		{"queue twice", "allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    queues: [a, a]\n", `line 4: queue "a" is named twice in the rule`},
		{"relative path", "allow:\n  - roles: [viewer]\n    paths: [metrics]\n", `line 3: path "metrics" does not begin with /`},
		{"unclean path", "allow:\n  - roles: [viewer]\n    paths: [/debug//pprof/]\n", `line 3: path "/debug//pprof/" is not clean: write "/debug/pprof/"`},
		{"glob path", "allow:\n  - roles: [viewer]\n    paths: [/debug/pprof/*]\n", `line 3: path "/debug/pprof/*" is not a literal path`},
		{"space in path", "allow:\n  - roles: [viewer]\n    paths: [\"/a b\"]\n", `line 3: path "/a b" has ' ': a policy's paths are printable ASCII without spaces`},
		{"probe path", "allow:\n  - roles: [viewer]\n    paths: [/healthz]\n", "line 3: path /healthz is open to everyone"},
		{"path twice", "allow:\n  - roles: [viewer]\n    paths: [/, /]\n", "line 3: path / is named twice in the rule"},
		{"two documents", "allow:\n  - roles: [viewer]\n    paths: [/]\n---\nallow: []\n", "line 4: a second YAML document: a policy is one"},
		{"complex key", "allow:\n  - ? [roles]\n    : [admin]\n", "line 2: a key is a word"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.text))
			if err == nil {
				t.Fatalf("accepted:\n%s", p.Marshal())
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "authz: policy: ") {
				t.Fatalf("%v does not begin with authz: policy:", err)
			}
		})
	}
}

// TestLoad checks that Load's errors name the file and the line.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	writeFile(t, good, []byte(greetingsPolicy))
	p, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Rules()); got != 3 {
		t.Fatalf("%d rules, want 3", got)
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, []byte("allow:\n  - roles: [wrker]\n    paths: [/]\n"))
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), "authz: policy "+bad+": line 2: unknown role \"wrker\"") {
		t.Fatalf("Load(bad): %v", err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("Load(missing): %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, []byte("# "+strings.Repeat("x", MaxPolicyBytes)+"\n"))
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load(big): %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		next := unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

func unwrap(err error) error {
	u, ok := err.(interface{ Unwrap() error })
	if !ok {
		return nil
	}
	return u.Unwrap()
}

// TestCompileErrors checks that Compile's errors name the rule.
func TestCompileErrors(t *testing.T) {
	_, err := Compile([]Rule{
		{Roles: []string{"admin"}, Paths: []string{"/"}},
		{Roles: []string{"admin"}, Methods: []string{"/baton.queue.v1.QueueService/Nope"}},
	})
	if err == nil || !strings.HasPrefix(err.Error(), "authz: policy: rule 2: unknown method /baton.queue.v1.QueueService/Nope") {
		t.Fatalf("got %v", err)
	}
	if _, err := Compile(nil); err == nil {
		t.Fatal("Compile(nil) accepted a policy that allows nothing")
	}
}

// TestDefaultRoundTrip checks that the default table as a file parses back
// to itself.
func TestDefaultRoundTrip(t *testing.T) {
	p, err := Parse(Default().Marshal())
	if err != nil {
		t.Fatalf("%v in\n%s", err, Default().Marshal())
	}
	if !reflect.DeepEqual(p.Rules(), Default().Rules()) {
		t.Fatalf("got %+v\nwant %+v", p.Rules(), Default().Rules())
	}
	if !reflect.DeepEqual(p, Default()) {
		t.Fatal("the compiled policies differ")
	}
}

// TestRulesIsACopy checks that a caller cannot change a policy through
// Rules.
func TestRulesIsACopy(t *testing.T) {
	r := Default().Rules()
	r[0].Roles[0] = "viewer"
	if Default().Rules()[0].Roles[0] == "viewer" {
		t.Fatal("Rules shares its slices with the policy")
	}
}

// FuzzParsePolicy checks that Parse never panics, and that what it accepts
// compiles again from its rules, marshals to a file that parses to the same
// rules and the same bytes, and holds only queue patterns path.Match can
// use.
func FuzzParsePolicy(f *testing.F) {
	f.Add(Default().Marshal())
	f.Add([]byte(greetingsPolicy))
	f.Add([]byte("allow:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/*]\n    queues: [\"team-[a-c]-*\", \"q?\", \"\\\\x\"]\n"))
	f.Add([]byte("allow:\n  - {roles: [admin], paths: [/a/, /b]}\n"))
	f.Add([]byte("allow:\n  - roles: [\"123\", admin]\n    paths: [\"/x:y\"]\n"))
	f.Add([]byte("allow: [{roles: [admin], methods: [/baton.queue.v1.ClusterService/*]}]\n"))
	f.Add([]byte("allow:\n  - roles: &a [admin]\n"))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(limitsPolicy))
	f.Add([]byte("allow: [{roles: [admin], paths: [/]}]\nlimits: [{roles: [worker, admin], waiting_leases: 1048576}]\n"))
	f.Add([]byte("allow: [{roles: [admin], paths: [/]}]\nlimits:\n  - roles: [worker]\n    waiting_leases: 0x10\n"))
	f.Add([]byte("allow: [{roles: [admin], paths: [/]}]\nlimits:\n  - {roles: [worker], waiting_leases: 2}\n  - {roles: [worker], waiting_leases: 3}\n"))
	f.Add([]byte("limits: [{roles: [viewer], waiting_leases: 007}]\nallow: [{roles: [viewer], paths: [/]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if p != nil {
				t.Fatal("Parse returned a policy with its error")
			}
			return
		}
		rules := p.Rules()
		if _, err := Compile(rules); err != nil {
			t.Fatalf("accepted rules do not compile again: %v\n%q", err, data)
		}
		out := p.Marshal()
		p2, err := Parse(out)
		if err != nil {
			t.Fatalf("the marshalled policy does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(p2.Rules(), rules) {
			t.Fatalf("round trip changed the rules:\n got %#v\nwant %#v\nfile:\n%s", p2.Rules(), rules, out)
		}
		if !reflect.DeepEqual(p2.Limits(), p.Limits()) {
			t.Fatalf("round trip changed the limits:\n got %#v\nwant %#v\nfile:\n%s", p2.Limits(), p.Limits(), out)
		}
		for _, l := range p.Limits() {
			if l.WaitingLeases < 1 || l.WaitingLeases > MaxWaitingLeases || len(l.Roles) == 0 {
				t.Fatalf("accepted limit %+v", l)
			}
		}
		if out2 := p2.Marshal(); string(out2) != string(out) {
			t.Fatalf("marshal is not stable:\n%s\n---\n%s", out, out2)
		}
		for _, r := range rules {
			for _, q := range r.Queues {
				if _, err := path.Match(q, "some-queue"); err != nil {
					t.Fatalf("accepted queue pattern %q: %v", q, err)
				}
			}
		}
	})
}

// ExamplePolicy_Marshal prints the default role table as a policy file, the
// one to start a policy of one's own from (docs/security.md shows it).
func ExamplePolicy_Marshal() {
	fmt.Print(string(Default().Marshal()))
	// Output:
	// allow:
	//   - roles: [observer, admin]
	//     methods:
	//       - /baton.queue.v1.QueueService/Add
	//   - roles: [worker, admin]
	//     methods:
	//       - /baton.queue.v1.QueueService/Lease
	//       - /baton.queue.v1.QueueService/Ack
	//       - /baton.queue.v1.QueueService/Extend
	//       - /baton.queue.v1.QueueService/Work
	//   - roles: [viewer, worker, observer, admin]
	//     methods:
	//       - /baton.queue.v1.QueueService/Inspect
	//       - /baton.queue.v1.QueueService/List
	//       - /baton.queue.v1.QueueService/Stats
	//   - roles: [admin]
	//     methods:
	//       - /baton.queue.v1.QueueService/Forget
	//   - roles: [worker, viewer, admin]
	//     methods:
	//       - /baton.observer.v1.ObserverService/Get
	//       - /baton.observer.v1.ObserverService/List
	//   - roles: [worker, viewer, admin, queue-peer]
	//     methods:
	//       - /baton.observer.v1.ObserverService/Status
	//   - roles: [viewer, admin, queue-peer]
	//     methods:
	//       - /baton.queue.v1.ClusterService/MemberList
	//       - /baton.queue.v1.ClusterService/Status
	//   - roles: [admin]
	//     methods:
	//       - /baton.queue.v1.ClusterService/MemberAdd
	//       - /baton.queue.v1.ClusterService/MemberRemove
	//       - /baton.queue.v1.ClusterService/MoveLeader
	//       - /baton.queue.v1.ClusterService/Snapshot
	//   - roles: [queue-peer]
	//     methods:
	//       - /baton.queue.v1.RaftService/Send
	//       - /baton.queue.v1.RaftService/SendSnapshot
	//       - /baton.queue.v1.RaftService/Join
	//       - /baton.queue.v1.RaftService/Publish
	//   - roles: [viewer, admin]
	//     paths:
	//       - /metrics
	//       - /
	//   - roles: [admin]
	//     paths:
	//       - /debug/pprof/
}

// TestSecurityDocPolicies checks that every YAML policy docs/security.md
// shows parses, and that the one it calls the default is.
func TestSecurityDocPolicies(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "security.md"))
	if err != nil {
		t.Skipf("no docs/security.md beside the module: %v", err)
	}
	blocks := strings.Split(string(data), "```yaml\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("docs/security.md shows no policy")
	}
	sawDefault := false
	for i, b := range blocks {
		text, _, ok := strings.Cut(b, "```")
		if !ok {
			t.Fatalf("block %d is not closed", i+1)
		}
		p, err := Parse([]byte(text))
		if err != nil {
			t.Errorf("docs/security.md, policy %d: %v", i+1, err)
			continue
		}
		if text == string(Default().Marshal()) {
			sawDefault = true
			if !reflect.DeepEqual(p.Rules(), Default().Rules()) {
				t.Error("docs/security.md's default table is not the default")
			}
		}
	}
	if !sawDefault {
		t.Error("docs/security.md does not show the default table as Default().Marshal() writes it")
	}
}
