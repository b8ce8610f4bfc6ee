package authz

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/batonrun/baton/client/tlsfiles"
)

// MaxWaitingLeases is the largest waiting_leases a policy may give: above
// it a limit bounds nothing a server could hold, and is more likely a
// typo than a wish.
const MaxWaitingLeases = 1 << 20

// Limit bounds what each identity with one of Roles may hold at once on a
// server, in place of the server's own default (services/runtime/limits
// enforces it). An identity whose roles several Limits name gets the most
// generous.
type Limit struct {
	// Roles are roles of tlsfiles.KnownRoles; a role is named by one Limit
	// at most.
	Roles []string
	// WaitingLeases bounds the identity's Lease calls that wait for work
	// (long polls) in flight at once, over all its connections: 1 to
	// MaxWaitingLeases.
	WaitingLeases int
}

// Limits returns a copy of the policy's limits, as they were given; a
// policy without a limits section has none.
func (p *Policy) Limits() []Limit {
	out := make([]Limit, len(p.limits))
	for i, l := range p.limits {
		out[i] = Limit{Roles: slices.Clone(l.Roles), WaitingLeases: l.WaitingLeases}
	}
	return out
}

// RoleWaitingLeases returns the waiting_leases of each role a limit names,
// as services/runtime/limits.Config's RoleWaitingLeases takes them; nil
// when the policy has no limits.
func (p *Policy) RoleWaitingLeases() map[string]int {
	if len(p.limits) == 0 {
		return nil
	}
	out := make(map[string]int)
	for _, l := range p.limits {
		for _, r := range l.Roles {
			out[r] = l.WaitingLeases
		}
	}
	return out
}

// rawLimit is a limit as given, before it is checked.
type rawLimit struct {
	pos           string
	roles         []field
	waitingLeases *field // nil: not given
}

// checkLimits checks raw limits and returns them. A role named by two
// limits is refused rather than resolved: which one was meant is the
// operator's to say.
func checkLimits(raw []rawLimit) ([]Limit, error) {
	var out []Limit
	named := map[string]string{} // role → the position of its limit
	for _, r := range raw {
		if len(r.roles) == 0 {
			return nil, fmt.Errorf("%s: the limit names no roles", r.pos)
		}
		if r.waitingLeases == nil {
			return nil, fmt.Errorf("%s: the limit has no waiting_leases", r.pos)
		}
		var l Limit
		for _, f := range r.roles {
			if !slices.Contains(tlsfiles.KnownRoles(), f.val) {
				return nil, fmt.Errorf("%s: unknown role %q (the roles are %s)", f.pos, f.val, strings.Join(tlsfiles.KnownRoles(), ", "))
			}
			if slices.Contains(l.Roles, f.val) {
				return nil, fmt.Errorf("%s: role %s is named twice in the limit", f.pos, f.val)
			}
			if first, ok := named[f.val]; ok {
				return nil, fmt.Errorf("%s: role %s has a limit already (%s): give each role one", f.pos, f.val, first)
			}
			named[f.val] = r.pos
			l.Roles = append(l.Roles, f.val)
		}
		w := r.waitingLeases
		// Decimal digits only: YAML's !!int also reads 0x10 and 0o20, which
		// no one means for a count.
		if digits := strings.TrimPrefix(w.val, "-"); digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
			return nil, fmt.Errorf("%s: waiting_leases %q is not a whole number written in decimal, as 16", w.pos, w.val)
		}
		n, err := strconv.Atoi(w.val)
		if err != nil || n < 1 || n > MaxWaitingLeases {
			return nil, fmt.Errorf("%s: waiting_leases is %s, and must be from 1 to %d (a role that must not long-poll is one the policy does not allow Lease)", w.pos, w.val, MaxWaitingLeases)
		}
		l.WaitingLeases = n
		out = append(out, l)
	}
	return out, nil
}
