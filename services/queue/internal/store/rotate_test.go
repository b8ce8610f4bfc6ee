package store

import (
	"sync"
	"testing"
)

// TestConcurrentRotationsGetTheirOwnSegments: two snapshots at once (the
// broker's compaction and its healer) must not share a seq, or both write
// the same snap-<seq>.snap.tmp and one installs the other's unfinished file
// (found by TestPowerLoss as a snapshot with a torn header after a crash).
func TestConcurrentRotationsGetTheirOwnSegments(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 50 {
		var wg sync.WaitGroup
		seqs := make([]uint64, 4)
		for i := range seqs {
			wg.Go(func() {
				seq, err := s.rotate()
				if err != nil {
					t.Error(err)
				}
				seqs[i] = seq
			})
		}
		wg.Wait()
		seen := map[uint64]bool{}
		for _, q := range seqs {
			if seen[q] {
				t.Fatalf("two rotations share seq %d: %v", q, seqs)
			}
			seen[q] = true
		}
	}
}
