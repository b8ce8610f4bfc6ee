// Package replica is one member of the replicated queue: a Raft node
// (go.etcd.io/raft/v3) whose log is the member's store.RaftLog and whose
// network is the peer transport (package transport below), with the
// proposals of many callers coalesced into entries and each caller answered
// once its record is committed and applied on this member.
//
// The node is a raft.RawNode driven by one goroutine, the Ready loop, which
// is also the proposer. etcd's server uses raft.Node instead, whose own
// goroutine owns the RawNode and hands Readys to the server's loop over
// channels; here that second goroutine would only add a hand-off per
// proposal and per message, and it would split what must be decided
// together (is this member still the leader, in which term, and what did
// the last Ready commit) over two goroutines. With one goroutine owning
// the RawNode, every other goroutine (callers of Propose, the transport's
// receivers and hooks, Close) talks to it through channels and a mutex'd
// queue, and it alone steps, ticks, proposes and handles Readys.
//
// Each turn of the loop, in this order:
//
//  1. One event: a tick, messages received (all that wait, stepped at
//     once), a peer reported unreachable or a snapshot's outcome, or new
//     proposals.
//  2. Proposals: while this member is the leader, every record waiting at
//     that moment goes into one entry (several when they exceed an
//     entry's size), proposed without waiting for the previous entry to
//     commit. Callers that arrived during the last Ready's fdatasync are
//     all in the next entry: group commit, as the single member's store
//     does it, moved in front of Raft.
//  3. Each Ready: Save (hard state, entries, snapshot: one frame, one
//     write, one fdatasync), then send its messages, then apply its
//     committed entries, then Advance. The leader could send its appends
//     while its own write is in flight (the Raft thesis, 10.2.1; raft's
//     doc allows it); this loop does not, and so it never sends anything,
//     a vote or an append acknowledgement, that its disk does not hold.
//     It is the simple, certainly correct order; the parallel one is an
//     optimisation to measure later.
//
// An entry's data is a proposal id (the proposing member, a random
// incarnation chosen at New, a sequence number) followed by its records,
// each length-prefixed (entry.go). The state machine (fsm.go's
// StateMachine, the contract between this package and what it replicates)
// is handed the records split out, in log order, on every member. The waiters of a proposal are found
// by its id when its entry is applied, never by the index it was proposed
// at: an entry that a later leader commits still completes exactly its own
// callers, and an entry that replaced ours at that index (another leader's)
// completes none of them.
//
// Failures:
//
//   - Leadership loss. When this member stops being the leader of the term
//     in which a batch was proposed, the batch's callers get
//     ErrLeadershipLost: the entry may yet be committed by the next leader
//     or be overwritten, and this member cannot tell which (as with a
//     failed fsync of the single member's store). A state machine that
//     applied its own changes as it proposed them (the broker does, under
//     its locks) is told so by Follow, before anything more is applied,
//     and rebuilds itself from the entries applied so far.
//
// Lead and Follow bracket a leadership. Lead comes once the leader has
// applied the empty entry raft appends at the start of its term, so every
// earlier term's entries are applied (a new leader's state is then the
// committed one, which it settles as a restart does); Follow comes when it
// stops leading. Enqueue, with Last, lets such a state machine put records
// in line under its own lock, in the order it made them, and wait outside
// it.
//   - A Save that fails with store.ErrStopped (a write or fdatasync error)
//     stops the node for good, fail-stop as the store is: every caller gets
//     ErrStopped wrapping the cause, Done is closed and Err says why; the
//     process is meant to exit and recover from what the disk holds.
//   - A Save refused with store.ErrNoSpace changed nothing, and raft's
//     Ready must not be advanced (nor the node stepped) until it is saved:
//     half of it (its messages, its committed entries) cannot be acted on
//     without the other half. So the loop retries the same Save with
//     backoff (10 ms doubling to 1 s), doing nothing else but watching for
//     Close, and new proposals are refused with store.ErrNoSpace meanwhile
//     (nothing of theirs is stored: a known outcome). A silent member is
//     what Raft already survives: a leader's followers elect another
//     leader, and once space is back the stale Ready is saved and sent and
//     the member learns the new term. Stopping instead would turn a full
//     disk, which the single member survives, into a crash loop.
//
// Snapshots: the state machine's owner decides when to compact (the
// broker, by the log's size) and hands Compact the state as of an applied
// index; the loop then writes it as the log's snapshot and drops the
// entries before it (store.RaftLog.CreateSnapshot), between two Readys.
// The state is taken while it keeps changing and may hold later changes
// too, which is sound only for a state machine whose entries, applied
// again over it, end in the same state (the broker's records say what a
// key is, as the store's snapshots already rely on). A member that falls
// behind the leader's first entry is sent the snapshot (the transport
// streams a large one in chunks); Restore loads it, after Save made it the
// log's, and entries follow it. A restart restores the log's snapshot in
// New, and Follow's replay starts from it.
package replica
