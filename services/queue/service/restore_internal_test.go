package service

import (
	"strings"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/backup"
	"github.com/batonrun/baton/services/queue/internal/record"
)

// TestRestoredTerm: the restored queue starts the margin above the fence,
// and a fence with no room above it for a token is refused.
func TestRestoredTerm(t *testing.T) {
	for fence, ok := range map[uint64]bool{0: true, 7: true, maxEpoch - restoreTermMargin - 1: true, maxEpoch - restoreTermMargin: false, 1 << 20: false, ^uint64(0): false} {
		term, err := restoredTerm(backup.Info{Fence: backup.Fence{Epoch: fence}})
		if (err == nil) != ok || ok && (term != fence+restoreTermMargin || term >= maxEpoch) {
			t.Errorf("fence epoch %d: term %d, %v", fence, term, err)
		}
	}
}

// TestCheckRestored: records the API would never have let in are refused,
// naming the file.
func TestCheckRestored(t *testing.T) {
	for _, r := range []record.Record{
		{Kind: record.KindQueue, Queue: "BAD_Q"},
		{Kind: record.KindPut, Queue: "q", Key: strings.Repeat("k", 2000), State: record.StatePending, Priority: 1},
	} {
		if err := checkRestored("forged.bak", &r); err == nil || !strings.Contains(err.Error(), "forged.bak") {
			t.Errorf("%+v: %v, want a refusal naming the file", r, err)
		}
	}
	if err := checkRestored("f", &record.Record{Kind: record.KindPut, Queue: "q", Key: "ns/k", State: record.StatePending, Priority: 1}); err != nil {
		t.Errorf("a good record: %v", err)
	}
}
