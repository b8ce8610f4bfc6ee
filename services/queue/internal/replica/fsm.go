package replica

import "github.com/batonrun/baton/services/queue/internal/format"

// StateMachine is the application a Node replicates: the contract between
// consensus and what it orders, as hashicorp/raft's FSM and etcd's apply
// layer draw it. The node owns the Raft log, the network and leadership;
// the state machine owns what the records mean. The node calls every
// method on its Ready loop's goroutine, one at a time and never
// concurrently with another, so none of them may wait for a Propose (which
// needs that goroutine), and each should return promptly: the loop neither
// saves, sends nor ticks meanwhile.
//
// A state machine sees its records in one of two ways. As a follower it is
// handed every committed entry's records (Apply) and is, after each, the
// committed state. As a leader it may instead make each change in memory
// when it proposes the change's records (the broker does, under a queue's
// lock, so that an operation and its records stay in order) and wait for
// the commit outside: between Lead and Follow every entry committed is one
// it proposed, and Apply is not needed for them. Follow tells it when that
// stops being true.
//
// The state machine is built from the log: on a restart, and on every
// Follow, the node restores the log's snapshot (Restore) and hands it every
// committed entry after it (Apply or replay), so the records alone must
// determine the state.
type StateMachine interface {
	// Apply loads the records of one committed entry: on every member, in
	// log order, once per entry that holds records. On a restart it is
	// called again for every committed entry in the log after its
	// snapshot. It must not modify the records (it may keep them). A
	// leader between Lead and Follow may ignore it: the entry is one it
	// proposed, whose change it made already.
	Apply(e Entry)
	// Restore discards everything the state machine holds and takes s
	// (what some member's Compact was given) as its state as of s.Index:
	// in New for a log that holds a snapshot, on the loop when a leader
	// sends one (this member fell behind the leader's compacted log, or
	// lost its disk), and first in Follow's replay when the log has been
	// compacted. Apply is then called for the entries after it. An
	// error stops the node: entries applied over a state not restored
	// would diverge from the others'.
	Restore(s State) error
	// Lead is called once this member leads term and has applied every
	// entry of the terms before: when the empty entry raft appends at the
	// start of a term is applied on its leader. From then until Follow,
	// every entry committed is one this member proposed in that term. It
	// may come again in the same term after a Follow: raft dropped
	// proposals whose changes the state machine had made (a leadership
	// transfer under way), the state machine was rebuilt from the log, and
	// once every entry proposed before is applied this member leads again
	// (loop.go's resync).
	Lead(term uint64)
	// Follow is called when a member that Lead was called on stops
	// leading, before any further entry is applied. A state machine that
	// made its changes as it proposed them then holds some that may never
	// be committed: it discards its state and rebuilds it with replay,
	// which restores the log's snapshot (Restore) and hands every entry
	// applied so far to apply, in log order, as a restart would. An error
	// stops the node.
	Follow(replay Replay) error
	// SnapshotNeeded is called when a member needs a snapshot the log does
	// not have: the last one predates a configuration change, so a member
	// it added is not in it (raft would send it, and the member ignore it,
	// forever). The state machine should Compact soon, not here.
	SnapshotNeeded()
}

// An Entry is one committed entry's records: its index, the version of
// its records (format.Records, the one its entry's version holds:
// format.RaftEntry.RecordsAt), and the records, which alias the log.
type Entry struct {
	Index   uint64
	Version format.Version
	Records [][]byte
}

// A State is a snapshot's state: the index it is the state as of, the
// version of its records (the one the snapshot's version holds:
// format.RaftSnapshot.RecordsAt), and the records, as Compact was given
// them.
type State struct {
	Index   uint64
	Version format.Version
	Records []byte
}

// A Replay rebuilds a state machine from the log, for Follow: it restores
// the log's snapshot (Restore) and hands every entry applied so far to
// apply, in log order.
type Replay func(apply func(Entry)) error
