package broker

// Fencing tokens: an epoch in the top bits (the store's restart epoch, or
// a replicated leader's term) and a count below, so that no token is ever
// handed out twice and an ack from before a restart or a leader change
// cannot land.

import (
	"errors"

	"github.com/batonrun/baton/services/queue/internal/backup"
	"sync"
	"sync/atomic"
)

// tokens makes fencing tokens: the store's epoch in the top 20 bits and a
// counter below, so no token repeats, also across restarts. When a run hands
// out 2^44 tokens it moves to a fresh epoch.
type tokens struct {
	epoch atomic.Uint64
	seq   atomic.Uint64
	mu    sync.Mutex
	// epochs moves a run that has used up its token space to a fresh
	// epoch; nil on a replicated member, whose epoch is its term: a term
	// has 2^44 tokens of its own, and none is handed out twice.
	epochs epochs
}

const seqBits = 44

func (t *tokens) Next() uint64 {
	n := t.seq.Add(1)
	if n >= 1<<seqBits {
		t.mu.Lock()
		if t.seq.Load() >= 1<<seqBits {
			// A replicated member has no next epoch but the next term:
			// past 2^44 grants in one term (half a year of a leader
			// granting a million keys a second) the count runs into the
			// epoch's bits. docs/notes.md lists it among the known gaps.
			if e, err := t.nextEpoch(); err == nil {
				t.epoch.Store(e)
				t.seq.Store(0)
			}
		}
		n = t.seq.Add(1)
		t.mu.Unlock()
	}
	return t.epoch.Load()<<seqBits | n
}

// nextEpoch is a fresh epoch from epochs, if there is one.
func (t *tokens) nextEpoch() (uint64, error) {
	if t.epochs == nil {
		return 0, errNoEpochs
	}
	return t.epochs.NextEpoch()
}

// errNoEpochs: this member's epochs do not move (a replicated leader's is
// its term).
var errNoEpochs = errors.New("broker: no fresh token epoch on a replicated member")

// fence is what a backup records of the tokens made so far: the epoch and
// the last token (backup.Fence).
func (t *tokens) fence() backup.Fence {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.epoch.Load()
	return backup.Fence{Epoch: e, Token: e<<seqBits | t.seq.Load()}
}
