package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
)

// Where the broker's records go, as three small interfaces: the journal
// (records in, waits out, and whether this member may answer from
// memory), the compactor (when and how the log is cut), and epochs (fresh
// token epochs). A single member's store implements all three; a
// replicated member's Raft log the journal, a compactor of the broker's
// (replicated.go), and no epochs (a term's tokens are its own).

// A journal is where the broker's records go, and how it learns they are
// kept: a single member's own store, or a replicated queue's Raft log
// (committed = on a majority's disks). The broker writes to it under a
// queue's lock, in the order it made the records, and waits outside.
type journal interface {
	// Append puts recs (the records of one operation, of version v:
	// RecordVersion's when the operation began) in line and returns what
	// to wait on; with no recs (v is then ignored), the latest still in
	// flight, which covers every record before. An error means nothing
	// was put in line.
	Append(v format.Version, recs []byte) (waiter, error)
	// AppendLazy is Append for records whose caller will not wait for
	// them (a work stream's acks of success): they may be kept a little
	// later, with the next Append's (store.AppendLazy).
	AppendLazy(v format.Version, recs []byte) (waiter, error)
	// RecordVersion is the version of the records to put in line now
	// (format.Records): what the single member's segments hold, or the
	// entries a replicated queue's level writes. An operation takes it
	// once, under its queue's lock, and encodes every record with it.
	RecordVersion() format.Version
	// Level is the queue's format level: a single member's build's, a
	// replicated queue's lowest member's. What the broker writes for
	// others to read (a backup) is written at it.
	Level() format.Level
	// Confirm returns nil once this member may answer from its memory:
	// at once on a single member, which always leads; on a replicated
	// member once a majority has confirmed, after the call, that it still
	// leads (replica.Confirm).
	Confirm(ctx context.Context) error
	// SettlesLeases reports whether a lease's answer must wait, as a
	// read's does, for what it saw to be kept and its leadership to be
	// confirmed (reads.go's settled). A replicated member's must: another
	// leader may have offered the key again, or the next leader may never
	// hold the Add that made it ready. A single member's need not: its
	// leases die with it, and the crash that would lose an Add it saw
	// loses every lease too.
	SettlesLeases() bool
	// Durable counts the operations kept so far (the member's applied
	// index for ClusterService).
	Durable() uint64
	Err() error
	NoSpace() bool
	// ProbeSpace tries the disk while it is full.
	ProbeSpace()
	Repairs() int
	Close() error
}

// A compactor cuts the log: Sizes says when (the log's bytes since its
// last snapshot, and that snapshot's), Compact snapshots the state that
// walk emits (while it keeps changing: a record says what a key is, so
// replaying later records over it ends in the same state) and drops what
// the snapshot covers.
type compactor interface {
	Sizes() (log, snap int64)
	Compact(walk func(v format.Version, emit func([]byte) error) error) error
}

// epochs hands out a fresh token epoch, for a run that has used up the
// token space of its own; nil where epochs do not move (a replicated
// leader's epoch is its term).
type epochs interface {
	NextEpoch() (uint64, error)
}

// waiter is an Append's outcome: nil once its records are kept.
type waiter interface {
	Wait(ctx context.Context) error
}

// storeJournal is a single member's store.
type storeJournal struct{ *store.Store }

func (j storeJournal) Append(v format.Version, recs []byte) (waiter, error) {
	if err := j.checkVersion(v, recs); err != nil {
		return nil, err
	}
	b, err := j.Store.Append(recs)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (j storeJournal) AppendLazy(v format.Version, recs []byte) (waiter, error) {
	if err := j.checkVersion(v, recs); err != nil {
		return nil, err
	}
	b, err := j.Store.AppendLazy(recs)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// checkVersion refuses records of another version than the store's
// segments hold: an operation that began before an upgrade cannot exist
// in one process, so this is a mistake of the broker's, refused before
// anything is written.
func (j storeJournal) checkVersion(v format.Version, recs []byte) error {
	if len(recs) > 0 && v != j.Store.RecordVersion() {
		return fmt.Errorf("broker: records of version %d for a store that holds version %d", v, j.Store.RecordVersion())
	}
	return nil
}

func (j storeJournal) RecordVersion() format.Version { return j.Store.RecordVersion() }
func (storeJournal) Level() format.Level             { return format.BuildLevel }

func (storeJournal) Confirm(context.Context) error { return nil }
func (storeJournal) SettlesLeases() bool           { return false }

// Sizes and Compact make the store its own compactor.
func (j storeJournal) Sizes() (int64, int64) { return j.Store.WALBytes() }
func (j storeJournal) Compact(walk func(v format.Version, emit func([]byte) error) error) error {
	return j.Store.Snapshot(func(emit func([]byte) error) error { return walk(j.Store.RecordVersion(), emit) })
}

// raftJournal is a replicated queue's log, through this member's node,
// which the broker owns (with the node's RaftLog) and closes.
type raftJournal struct {
	n   *replica.Node
	log *store.RaftLog
}

// ErrNotLeader is returned by every call on a member of a replicated queue
// that does not lead it now (or leads it but has not yet applied every
// earlier term's entries): the leader answers.
var ErrNotLeader = errors.New("broker: this member does not lead the queue")

func (j raftJournal) Append(v format.Version, recs []byte) (waiter, error) {
	if len(recs) == 0 {
		return proposal{j.n.Last()}, nil
	}
	p, err := j.n.EnqueueAll(v, split(recs, j.n.MaxRecordBytes(), v))
	if err != nil {
		return nil, notProposed(err)
	}
	return proposal{p}, nil
}

// notProposed is the broker's error for a proposal the node says never
// reached the log: ErrNotLeader, whether the member knew it did not lead
// when the records were enqueued, or learnt it before the loop proposed
// them, or raft dropped them (a leadership transfer under way). Each
// changed nothing in the log, and Follow throws the memory that holds
// them away, so the caller may retry on any member.
func notProposed(err error) error {
	if errors.Is(err, replica.ErrNotLeader) || errors.Is(err, replica.ErrDropped) {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return err
}

// AppendLazy is Append: the node batches every proposal waiting at once
// into one entry anyway, and commits it as soon as a majority has it.
func (j raftJournal) AppendLazy(v format.Version, recs []byte) (waiter, error) {
	return j.Append(v, recs)
}

func (j raftJournal) RecordVersion() format.Version { return j.n.RecordVersion() }
func (j raftJournal) Level() format.Level           { return j.n.ClusterLevel() }

func (j raftJournal) Confirm(ctx context.Context) error { return j.n.Confirm(ctx) }
func (raftJournal) SettlesLeases() bool                 { return true }
func (j raftJournal) Durable() uint64                   { return j.n.Status().Applied }
func (j raftJournal) Err() error                        { return j.n.Err() }
func (j raftJournal) NoSpace() bool                     { return j.log.NoSpace() }
func (raftJournal) ProbeSpace()                         {} // the node retries its save itself
func (j raftJournal) Repairs() int                      { return j.log.Repairs() }

func (j raftJournal) Close() error {
	err := j.n.Close()
	return errors.Join(err, j.log.Close())
}

// proposal waits for a record's commit.
type proposal struct{ p *replica.Proposal }

func (p proposal) Wait(ctx context.Context) error {
	_, err := p.p.Wait(ctx)
	return notProposed(err)
}

// split cuts an operation's records into pieces of at most max bytes at
// record boundaries (one piece, without decoding, when they fit): an
// operation may write more than one entry holds (the expiry of a hundred
// thousand leases at once), and every record alone fits.
func split(recs []byte, max int, v format.Version) [][]byte {
	if len(recs) <= max {
		return [][]byte{recs}
	}
	var out [][]byte
	start, off := 0, 0
	for off < len(recs) {
		_, n, err := record.Decode(recs[off:], v)
		if err != nil {
			// The broker's own encoding: cannot happen. Let the node
			// refuse the rest whole rather than cut a record.
			return append(out, recs[start:])
		}
		if off+n-start > max && off > start {
			out = append(out, recs[start:off])
			start = off
		}
		off += n
	}
	return append(out, recs[start:])
}
