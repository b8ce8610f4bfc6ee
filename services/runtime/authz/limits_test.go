package authz

import (
	"maps"
	"reflect"
	"strings"
	"testing"
)

// limitsPolicy is a policy with a limits section: workers wait on at most
// 16 Leases, admins on 4096.
const limitsPolicy = `allow:
  - roles: [worker, admin]
    methods: [/baton.queue.v1.QueueService/Lease]
limits:
  # a worker certificate is one process
  - roles: [worker]
    waiting_leases: 16
  - roles: [admin, queue-peer]
    waiting_leases: 4096
`

// TestParseLimits: the limits section gives each role its bound, and a
// policy without one (the format before limits) has none.
func TestParseLimits(t *testing.T) {
	p := mustParse(t, limitsPolicy)
	want := []Limit{{Roles: []string{"worker"}, WaitingLeases: 16}, {Roles: []string{"admin", "queue-peer"}, WaitingLeases: 4096}}
	if !reflect.DeepEqual(p.Limits(), want) {
		t.Fatalf("Limits() = %+v, want %+v", p.Limits(), want)
	}
	if got, want := p.RoleWaitingLeases(), map[string]int{"worker": 16, "admin": 4096, "queue-peer": 4096}; !maps.Equal(got, want) {
		t.Fatalf("RoleWaitingLeases() = %v, want %v", got, want)
	}
	if len(p.Rules()) != 1 {
		t.Fatalf("rules %+v, want the one of allow", p.Rules())
	}
	// Limits is a copy.
	p.Limits()[0].Roles[0] = "viewer"
	if p.Limits()[0].Roles[0] != "worker" {
		t.Fatal("Limits shares its slices with the policy")
	}

	for _, q := range []*Policy{mustParse(t, greetingsPolicy), Default()} {
		if len(q.Limits()) != 0 || q.RoleWaitingLeases() != nil {
			t.Fatalf("a policy without limits has %+v", q.Limits())
		}
		if strings.Contains(string(q.Marshal()), "limits") {
			t.Fatalf("a policy without limits marshals them:\n%s", q.Marshal())
		}
	}

	out := p.Marshal()
	const tail = "limits:\n  - roles: [worker]\n    waiting_leases: 16\n  - roles: [admin, queue-peer]\n    waiting_leases: 4096\n"
	if !strings.HasSuffix(string(out), tail) {
		t.Fatalf("Marshal:\n%s\nwant it to end in\n%s", out, tail)
	}
	if again := mustParse(t, string(out)); !reflect.DeepEqual(again, p) {
		t.Fatalf("the marshalled policy parses to %+v, want %+v", again.Limits(), p.Limits())
	}
}

// TestParseLimitErrors: what a limits section gets wrong is refused with
// its line.
func TestParseLimitErrors(t *testing.T) {
	const allow = "allow:\n  - roles: [admin]\n    paths: [/]\n"
	cases := []struct {
		name, text, want string
	}{
		{"not a list", allow + "limits: 16\n", `line 4: limits is a list of limits, as - {roles: [worker], waiting_leases: 16}, not the value "16"`},
		{"empty", allow + "limits: []\n", "line 4: limits is an empty list: name at least one, or leave limits out"},
		{"given twice", allow + "limits: [{roles: [worker], waiting_leases: 1}]\nlimits: [{roles: [admin], waiting_leases: 1}]\n", "line 5: limits is given twice (first at line 4)"},
		{"allow twice still", "allow: []\nlimits: []\nallow: []\n", "line 3: allow is given twice (first at line 1)"},
		{"limits only", "limits: [{roles: [worker], waiting_leases: 1}]\n", "line 1: the policy has no key allow"},
		{"a limit not a mapping", allow + "limits:\n  - worker\n", `line 5: a limit is a mapping with roles and waiting_leases, not the value "worker"`},
		{"unknown key", allow + "limits:\n  - roles: [worker]\n    waiting_lease: 16\n", `line 6: unknown key "waiting_lease" in a limit (a limit has roles and waiting_leases)`},
		{"a rule's key", allow + "limits:\n  - roles: [worker]\n    methods: [/baton.queue.v1.QueueService/Lease]\n    waiting_leases: 1\n", `line 6: unknown key "methods" in a limit`},
		{"key twice", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 1\n    waiting_leases: 2\n", "line 7: waiting_leases is given twice in the limit (first at line 6)"},
		{"no roles", allow + "limits:\n  - waiting_leases: 16\n", "line 5: the limit names no roles"},
		{"empty roles", allow + "limits:\n  - roles: []\n    waiting_leases: 16\n", "line 5: roles is an empty list: name at least one"},
		{"roles a string", allow + "limits:\n  - roles: worker\n    waiting_leases: 16\n", `line 5: roles is a list, as [a, b], not the value "worker"`},
		{"no waiting_leases", allow + "limits:\n  - roles: [worker]\n", "line 5: the limit has no waiting_leases"},
		{"unknown role", allow + "limits:\n  - roles: [workers]\n    waiting_leases: 16\n", `line 5: unknown role "workers" (the roles are observer, worker, viewer, admin, queue-peer)`},
		{"role twice", allow + "limits:\n  - roles: [worker, worker]\n    waiting_leases: 16\n", "line 5: role worker is named twice in the limit"},
		{"role in two limits", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 16\n  - roles: [admin,\n      worker]\n    waiting_leases: 32\n", "line 8: role worker has a limit already (line 5): give each role one"},
		{"a string", allow + "limits:\n  - roles: [worker]\n    waiting_leases: \"16\"\n", `line 6: waiting_leases is a whole number, as 16, not the value "16"`},
		{"a fraction", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 1.5\n", `line 6: waiting_leases "1.5" is not a whole number written in decimal, as 16`},
		{"empty value", allow + "limits:\n  - roles: [worker]\n    waiting_leases:\n", "line 6: waiting_leases is a whole number, as 16, not empty"},
		{"a list", allow + "limits:\n  - roles: [worker]\n    waiting_leases: [16]\n", "line 6: waiting_leases is a whole number, as 16, not a list"},
		{"hexadecimal", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 0x10\n", `line 6: waiting_leases "0x10" is not a whole number written in decimal, as 16`},
		{"zero", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 0\n", "line 6: waiting_leases is 0, and must be from 1 to 1048576"},
		{"negative", allow + "limits:\n  - roles: [worker]\n    waiting_leases: -4\n", "line 6: waiting_leases is -4, and must be from 1 to 1048576"},
		{"too many", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 1048577\n", "line 6: waiting_leases is 1048577, and must be from 1 to 1048576"},
		{"overflow", allow + "limits:\n  - roles: [worker]\n    waiting_leases: 99999999999999999999999\n", "line 6: waiting_leases is 99999999999999999999999, and must be from 1 to 1048576"},
		{"alias", allow + "limits:\n  - roles: &r [worker]\n    waiting_leases: 1\n  - roles: *r\n    waiting_leases: 2\n", "line 7: roles is a list, as [a, b], not an alias"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.text))
			if err == nil {
				t.Fatalf("accepted:\n%s", p.Marshal())
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "authz: policy: ") {
				t.Fatalf("got  %v\nwant authz: policy: …%s", err, tc.want)
			}
		})
	}
}
