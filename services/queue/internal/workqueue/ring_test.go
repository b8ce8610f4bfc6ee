package workqueue

import (
	"fmt"
	"testing"
)

// TestRingFIFOAcrossBlocks pushes and pops across many block boundaries,
// with stale entries and rings that empty and refill, and checks that front
// returns the live entries in order and that no two pushes share a position.
func TestRingFIFOAcrossBlocks(t *testing.T) {
	r := ring{rank: Normal.rank()}
	seen := map[uint32]bool{}
	var want []*item // live entries in push order
	push := func(n int) {
		for i := 0; i < n; i++ {
			it := &item{key: fmt.Sprint(len(seen)), state: Pending, pf: uint8(Normal)}
			r.push(it)
			if seen[it.pos] {
				t.Fatalf("position %d given twice", it.pos)
			}
			seen[it.pos] = true
			if i%7 == 3 {
				it.state = Absent // forgotten: its slot goes stale
				continue
			}
			want = append(want, it)
		}
	}
	pop := func(n int) {
		for i := 0; i < n; i++ {
			it := r.front()
			if len(want) == 0 {
				if it != nil {
					t.Fatalf("front = %q from an empty ring", it.key)
				}
				return
			}
			if it != want[0] {
				t.Fatalf("front = %v, want %q", it, want[0].key)
			}
			want = want[1:]
			r.pop()
		}
	}
	for round, step := range []struct{ push, pop int }{
		{1, 1}, {ringBlock, ringBlock}, {ringBlock + 1, 3}, {5 * ringBlock, 2 * ringBlock},
		{1, 10 * ringBlock}, {ringBlock - 1, 0}, {2, 0}, {0, 20 * ringBlock}, {3 * ringBlock, 100},
	} {
		push(step.push)
		pop(step.pop)
		if len(r.blocks) > (r.off+r.n)/ringBlock+1 {
			t.Fatalf("round %d: %d blocks held for %d slots", round, len(r.blocks), r.n)
		}
	}
	pop(1 << 20)
	if r.front() != nil || len(want) != 0 {
		t.Fatalf("ring not drained: %d entries left", len(want))
	}
}
