package replica

import "testing"

// TestBetterMoveTarget: an unnamed move prefers a member heard from
// lately to one that is further along but silent, then the furthest.
func TestBetterMoveTarget(t *testing.T) {
	st := Status{
		Match:  map[uint64]uint64{1: 100, 2: 90, 3: 95},
		Active: map[uint64]bool{1: false, 2: true, 3: true},
	}
	if better(st, 1, 2) || !better(st, 2, 1) {
		t.Error("a silent member ranked above an active one")
	}
	if !better(st, 3, 2) || better(st, 2, 3) {
		t.Error("between two active members, the one further along should win")
	}
}
