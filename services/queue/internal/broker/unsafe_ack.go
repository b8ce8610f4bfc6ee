//go:build baton_unsafe_ack

package broker

import (
	"context"
	"log/slog"

	"github.com/batonrun/baton/services/queue/internal/format"
)

// This file is built only with the baton_unsafe_ack tag, and makes a
// broken queue on purpose: a replicated member answers every change as
// soon as it has enqueued its records, before the majority commits them,
// so a leader that dies or is cut off just after answering loses writes
// it acknowledged. The robustness suite (services/queue/robustness,
// TestNegativeControl) runs against such a build to show that its
// checkers see that loss; no release is built with the tag.

// ackJournal wraps a replicated member's journal so that it answers
// before the commit, and says so in the member's log.
func ackJournal(j journal, log *slog.Logger) journal {
	log.Warn("built with baton_unsafe_ack: changes are answered before the majority commits them, and may be lost")
	return earlyAck{j}
}

// earlyAck puts records in line on the Raft log as the real journal does,
// and returns a waiter that does not wait.
type earlyAck struct{ journal }

func (e earlyAck) Append(v format.Version, recs []byte) (waiter, error) {
	if _, err := e.journal.Append(v, recs); err != nil {
		return nil, err
	}
	return answered{}, nil
}

func (e earlyAck) AppendLazy(v format.Version, recs []byte) (waiter, error) {
	return e.Append(v, recs)
}

// answered is a waiter that is done at once.
type answered struct{}

func (answered) Wait(context.Context) error { return nil }
