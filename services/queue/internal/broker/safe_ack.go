//go:build !baton_unsafe_ack

package broker

import "log/slog"

// ackJournal is the journal a replicated member answers its callers
// through: the Raft log itself, whose waits end at the majority's commit.
// A build with the baton_unsafe_ack tag replaces it (unsafe_ack.go) with
// one that answers before the commit, for the robustness suite's negative
// control; this is every other build.
func ackJournal(j journal, _ *slog.Logger) journal { return j }
