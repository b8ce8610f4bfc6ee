package replica

import (
	"errors"
	"fmt"
)

var (
	// ErrNotLeader: this member is not the leader, so it proposed nothing
	// (the caller's records are not in the log). A *NotLeaderError names
	// the leader when one is known.
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrLeadershipLost: the caller's entry was proposed, then this member
	// stopped being the leader of that term before the entry was applied.
	// The next leader may commit it or overwrite it: the outcome is
	// unknown, as after a failed fsync of the single member's store.
	ErrLeadershipLost = errors.New("replica: leadership lost with the proposal in flight: it may or may not be committed")
	// ErrStopped: the node is closed, or stopped after its log failed
	// (then wrapping the cause). For a caller whose entry was proposed the
	// outcome is unknown.
	ErrStopped = errors.New("replica: node stopped")
	// ErrTooLarge: a record larger than an entry may be; see
	// Config.MaxSizePerMsg.
	ErrTooLarge = errors.New("replica: record larger than an entry may be")
	// ErrDropped: raft refused the proposal (a leadership transfer in
	// progress): nothing of it is in the log; the caller may try again.
	ErrDropped = errors.New("replica: proposal dropped by raft, not in the log")
	// ErrCannotFollow: raft refused, by panicking, a message a peer sent
	// (a log that disagrees with the leader's about what is committed: a
	// member restored from an old copy of its disk, or one of another
	// queue under the same ids). The node stops, wrapping it in
	// ErrStopped, but nothing is wrong with this member's disk: its
	// process stays up, not ready, saying why, rather than restart into
	// the same message.
	ErrCannotFollow = errors.New("replica: cannot follow the leader")
	// ErrCompactRefused: Compact's index is not one a snapshot may be
	// taken at now (not applied yet, not past the last snapshot, or before
	// the last configuration change); the log is unchanged.
	ErrCompactRefused = errors.New("replica: compaction refused")
	// ErrAddedStartedNew: Rejoin's, for a member MemberAdd added to a
	// queue in use, started with --initial-cluster-state new. Nothing was
	// asked of the leader; started with existing, it joins.
	ErrAddedStartedNew = errors.New("replica: a member added to a queue in use was started with --initial-cluster-state new")
)

// NotLeaderError is ErrNotLeader with the leader this member knows of.
type NotLeaderError struct {
	// Leader is the leader's Raft id, 0 when none is known (an election
	// is under way, or this member is cut off).
	Leader uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return ErrNotLeader.Error() + " (no leader known)"
	}
	return fmt.Sprintf("%s (the leader is member %d)", ErrNotLeader, e.Leader)
}

// Unwrap makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }
