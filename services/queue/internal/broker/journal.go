package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
)

// A journal is where the broker's records go, and how it learns they are
// kept: a single member's own store, or a replicated queue's Raft log
// (committed = on a majority's disks). The broker writes to it under a
// queue's lock, in the order it made the records, and waits outside.
type journal interface {
	// Append puts recs (the records of one operation) in line and returns
	// what to wait on; with no recs, the latest still in flight, which
	// covers every record before. An error means nothing was put in line.
	Append(recs []byte) (waiter, error)
	// AppendLazy is Append for records whose caller will not wait for
	// them (a work stream's acks of success): they may be kept a little
	// later, with the next Append's (store.AppendLazy).
	AppendLazy(recs []byte) (waiter, error)
	// NextEpoch moves to a fresh token epoch, for a run that has used up
	// the token space of its own.
	NextEpoch() (uint64, error)
	// Durable counts the operations kept so far (the member's applied
	// index for ClusterService).
	Durable() uint64
	Err() error
	NoSpace() bool
	// ProbeSpace tries the disk while it is full.
	ProbeSpace()
	// WALBytes is the log's size and its last snapshot's, for compaction.
	WALBytes() (wal, snap int64)
	Snapshot(walk func(emit func([]byte) error) error) error
	Repairs() int
	Close() error
}

// waiter is an Append's outcome: nil once its records are kept.
type waiter interface {
	Wait(ctx context.Context) error
}

// storeJournal is a single member's store.
type storeJournal struct{ *store.Store }

func (j storeJournal) Append(recs []byte) (waiter, error) {
	b, err := j.Store.Append(recs)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (j storeJournal) AppendLazy(recs []byte) (waiter, error) {
	b, err := j.Store.AppendLazy(recs)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// raftJournal is a replicated queue's log, through this member's node,
// which the broker owns (with the node's RaftLog) and closes.
type raftJournal struct {
	n         *replica.Node
	log       *store.RaftLog
	snapBytes *atomic.Int64 // the broker's
}

// ErrNotLeader is returned by every call on a member of a replicated queue
// that does not lead it now (or leads it but has not yet applied every
// earlier term's entries): the leader answers.
var ErrNotLeader = errors.New("broker: this member does not lead the queue")

// ErrTermTokensUsed is NextEpoch's on a replicated queue: a term's tokens
// are its own (epoch = term), 2^44 of them.
var ErrTermTokensUsed = errors.New("broker: this leadership has handed out every token of its term")

func (j raftJournal) Append(recs []byte) (waiter, error) {
	if len(recs) == 0 {
		return proposal{j.n.Last()}, nil
	}
	p, err := j.n.EnqueueAll(split(recs, j.n.MaxRecordBytes()))
	if errors.Is(err, replica.ErrNotLeader) {
		return nil, fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	if err != nil {
		return nil, err
	}
	return proposal{p}, nil
}

// AppendLazy is Append: the node batches every proposal waiting at once
// into one entry anyway, and commits it as soon as a majority has it.
func (j raftJournal) AppendLazy(recs []byte) (waiter, error) { return j.Append(recs) }

func (j raftJournal) NextEpoch() (uint64, error) { return 0, ErrTermTokensUsed }
func (j raftJournal) Durable() uint64            { return j.n.Status().Applied }
func (j raftJournal) Err() error                 { return j.n.Err() }
func (j raftJournal) NoSpace() bool              { return j.log.NoSpace() }
func (j raftJournal) ProbeSpace()                {} // the node retries its save itself
func (j raftJournal) Repairs() int               { return j.log.Repairs() }

// WALBytes is the Raft log's payload since its last snapshot began it, and
// that snapshot's size (the broker's: it knows what it gave the node).
func (j raftJournal) WALBytes() (int64, int64) { return j.log.Bytes(), j.snapBytes.Load() }

// Snapshot is not called: the broker compacts a replicated log itself
// (compactReplicated), since only it knows whether its memory is the
// log's.
func (j raftJournal) Snapshot(func(emit func([]byte) error) error) error {
	return errors.New("broker: a replicated queue's log is compacted by compactReplicated")
}

func (j raftJournal) Close() error {
	err := j.n.Close()
	return errors.Join(err, j.log.Close())
}

// proposal waits for a record's commit.
type proposal struct{ p *replica.Proposal }

func (p proposal) Wait(ctx context.Context) error {
	_, err := p.p.Wait(ctx)
	return err
}

// split cuts an operation's records into pieces of at most max bytes at
// record boundaries (one piece, without decoding, when they fit): an
// operation may write more than one entry holds (the expiry of a hundred
// thousand leases at once), and every record alone fits.
func split(recs []byte, max int) [][]byte {
	if len(recs) <= max {
		return [][]byte{recs}
	}
	var out [][]byte
	start, off := 0, 0
	for off < len(recs) {
		_, n, err := record.Decode(recs[off:])
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
