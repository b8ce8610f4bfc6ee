package replica

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/batonrun/baton/services/queue/internal/format"

	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3"
)

// Propose puts data, one record of version v (RecordVersion's), in the
// log and returns the index of the
// entry that holds it once that entry is committed and applied on this
// member (Apply has returned for it). Records of concurrent callers share
// an entry (group commit), in the order the proposer took them.
//
// Errors: *NotLeaderError (ErrNotLeader) on a follower, ErrTooLarge and
// store.ErrNoSpace (a full disk) leave nothing in the log. ErrLeadershipLost,
// ErrStopped, and ctx's error once the entry may have been proposed, leave
// the outcome unknown: the record may yet be committed.
func (n *Node) Propose(ctx context.Context, v format.Version, data []byte) (uint64, error) {
	p, err := n.Enqueue(v, data)
	if err != nil {
		return 0, err
	}
	return p.Wait(ctx)
}

// A Proposal is a record Enqueue put in line for the log.
type Proposal struct{ c *call }

// Wait returns Propose's answer for the record: the index of its entry once
// committed and applied here, or why not. If ctx ends first it returns
// ctx's error; the record may still be committed.
func (p *Proposal) Wait(ctx context.Context) (uint64, error) {
	if p == nil || p.c == nil {
		return 0, nil // Last with nothing proposed
	}
	select {
	case <-p.c.done:
		return p.c.res.index, p.c.res.err
	case <-ctx.Done():
		return 0, fmt.Errorf("replica: propose: %w", ctx.Err())
	}
}

// Enqueue puts data in line for the log without waiting: records enqueued
// one after another are proposed, and so committed, in that order, which
// is what lets a caller enqueue under its own lock and wait outside it. Its
// errors are Propose's known outcomes (nothing is in line); Wait gives the
// rest.
func (n *Node) Enqueue(v format.Version, data []byte) (*Proposal, error) {
	return n.EnqueueAll(v, [][]byte{data})
}

// RecordVersion is the version of the records to enqueue now: the one the
// entries the queue's level writes hold (format.RaftEntry), so that every
// member reads them.
func (n *Node) RecordVersion() format.Version {
	return format.RaftEntry.RecordsAt(format.RaftEntry.Writes(n.level()))
}

// level is the level the leader writes at (levels.go).
func (n *Node) level() format.Level { return format.Level(n.writeLevel.Load()) }

// EnqueueAll is Enqueue for several records at once, all of version v
// (format.Records: RecordVersion's when they were made): all of them are
// put in line, in order, or none is. The Proposal is the last one's, which
// commits after the others. A caller with more than MaxRecordBytes to log
// splits it into records this way, so that a full disk or a lost
// leadership can never leave half of it in line.
func (n *Node) EnqueueAll(v format.Version, datas [][]byte) (*Proposal, error) {
	if len(datas) == 0 {
		return n.Last(), nil
	}
	for _, data := range datas {
		if size := entryHeader + recordSize(data); size > n.maxData {
			return nil, fmt.Errorf("%w: %d bytes in an entry of at most %d", ErrTooLarge, size, n.maxData)
		}
	}
	if st := n.Status(); !st.IsLeader || st.Transferring {
		if err := n.stoppedErr(); err != nil {
			return nil, err
		}
		// While it hands leadership on, raft drops every proposal: refused
		// here, before anything is in line, the caller undoes its change.
		return nil, &NotLeaderError{Leader: st.Leader}
	}
	if n.noSpace.Load() {
		return nil, fmt.Errorf("replica: %w", store.ErrNoSpace)
	}
	// Copies: the caller may reuse datas at once.
	if _, ok := format.RaftEntry.Holding(v, n.level()); !ok {
		return nil, fmt.Errorf("replica: records of version %d, which no entry the queue's level writes holds", v)
	}
	calls := make([]*call, len(datas))
	for i, data := range datas {
		calls[i] = &call{data: bytes.Clone(data), version: v, done: make(chan struct{})}
	}
	n.mu.Lock()
	if n.closed {
		err := n.err
		n.mu.Unlock()
		return nil, err
	}
	n.pending = append(n.pending, calls...)
	last := calls[len(calls)-1]
	n.last = last
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default: // the loop has been told already
	}
	return &Proposal{last}, nil
}

// MaxRecordBytes is the largest record Enqueue takes: one that fills an
// entry alone.
func (n *Node) MaxRecordBytes() int {
	return n.maxData - entryHeader - binary.MaxVarintLen64
}

// Last returns the latest record enqueued in this member's current
// leadership, or an empty Proposal (Wait answers at once) if there is none:
// waiting on it covers every record enqueued before, since entries commit
// in order. A caller whose change was already made by a record in flight
// (an Add collapsed onto a key just added) waits on it, as on an empty
// Append of the single member's store.
func (n *Node) Last() *Proposal {
	n.mu.Lock()
	defer n.mu.Unlock()
	return &Proposal{n.last}
}

// stoppedErr is why the node stopped, or nil while it runs.
func (n *Node) stoppedErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return n.err
	}
	return nil
}

// takePending hands the loop the proposals waiting.
func (n *Node) takePending() []*call {
	n.mu.Lock()
	defer n.mu.Unlock()
	calls := n.pending
	n.pending = nil
	return calls
}

// proposePending is the proposer, on the loop's goroutine: every record
// waiting goes into as few entries as fit MaxSizePerMsg, each proposed
// without waiting for the one before to commit.
func (n *Node) proposePending() {
	calls := n.takePending()
	if len(calls) == 0 {
		return
	}
	bs := n.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		// Never proposed: a known outcome.
		fail(calls, &NotLeaderError{Leader: bs.Lead})
		return
	}
	for len(calls) > 0 {
		// An entry holds records of one version, in the version of entry
		// the level writes that holds them.
		version, ok := format.RaftEntry.Holding(calls[0].version, n.level())
		if !ok {
			// The level fell below the records' since they were enqueued
			// (a member of an older release joined): never proposed.
			k := 1
			for k < len(calls) && calls[k].version == calls[0].version {
				k++
			}
			fail(calls[:k], fmt.Errorf("%w: records of version %d, which the queue's level no longer writes", ErrDropped, calls[0].version))
			n.dropped = true
			calls = calls[k:]
			continue
		}
		n.seq++
		data := appendEntryHeader(make([]byte, 0, n.entrySize(calls)), version, proposalID{n.cfg.ID, n.incarnation, n.seq})
		k := 0
		for ; k < len(calls); k++ {
			if k > 0 && (calls[k].version != calls[0].version || len(data)+recordSize(calls[k].data) > n.maxData) {
				break
			}
			data = appendRecord(data, calls[k].data)
		}
		taken := calls[:k:k]
		calls = calls[k:]
		if err := n.rn.Propose(data); err != nil {
			fail(taken, fmt.Errorf("%w: %w", ErrDropped, err))
			// Their callers changed the state machine when they enqueued,
			// and the log will never hold it: resync.
			n.dropped = true
			continue
		}
		n.inflight[n.seq] = &batch{calls: taken, term: bs.Term}
	}
}

// entrySize is the data of an entry that takes calls from the first, as
// far as they fit: the buffer to allocate.
func (n *Node) entrySize(calls []*call) int {
	size := entryHeader
	for i, c := range calls {
		s := recordSize(c.data)
		if i > 0 && size+s > n.maxData {
			break
		}
		size += s
	}
	return size
}

// complete answers the callers of the entry id at index, if they are this
// incarnation's.
func (n *Node) complete(id proposalID, index uint64) {
	if id.member != n.cfg.ID || id.incarnation != n.incarnation {
		return
	}
	b := n.inflight[id.seq]
	if b == nil {
		return // answered already: leadership was lost, or its caller gave up
	}
	delete(n.inflight, id.seq)
	for _, c := range b.calls {
		c.finish(result{index: index})
	}
}

// failLost answers ErrLeadershipLost to every batch proposed in a term in
// which this member no longer leads.
func (n *Node) failLost(bs raft.BasicStatus) {
	for seq, b := range n.inflight {
		if bs.RaftState != raft.StateLeader || bs.Term != b.term {
			delete(n.inflight, seq)
			fail(b.calls, ErrLeadershipLost)
		}
	}
}

// fail answers calls with err.
func fail(calls []*call, err error) {
	for _, c := range calls {
		c.finish(result{err: err})
	}
}

// finish answers c once; every Wait on it sees the result.
func (c *call) finish(r result) {
	c.res = r
	close(c.done)
}

// Confirm returns nil once a majority of the members have confirmed, after
// the call, that this member still leads (Raft's ReadIndex, one for all the
// callers waiting at once): what a leader that answers from memory alone,
// as the broker does a Lease, must know first, since a leader cut off from
// the majority believes it leads until CheckQuorum deposes it. Errors:
// *NotLeaderError, ErrLeadershipLost (it stopped leading meanwhile),
// ErrStopped, or ctx's.
func (n *Node) Confirm(ctx context.Context) error {
	c := &call{done: make(chan struct{})}
	n.mu.Lock()
	if n.closed {
		err := n.err
		n.mu.Unlock()
		return err
	}
	n.reads = append(n.reads, c)
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
	select {
	case <-c.done:
		return c.res.err
	case <-ctx.Done():
		return fmt.Errorf("replica: confirm leadership: %w", ctx.Err())
	}
}

// readPending starts a ReadIndex for the Confirm callers waiting, unless
// one is in flight (its callers came before it; the others wait for the
// next). On the loop's goroutine.
func (n *Node) readPending() {
	if n.read != nil {
		return
	}
	calls := n.takeReads()
	if len(calls) == 0 {
		return
	}
	bs := n.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		fail(calls, &NotLeaderError{Leader: bs.Lead})
		return
	}
	n.readSeq++
	var rctx [8]byte
	binary.BigEndian.PutUint64(rctx[:], n.readSeq)
	n.rn.ReadIndex(rctx[:])
	n.read = &readBatch{seq: n.readSeq, term: bs.Term, calls: calls}
}

// takeReads hands the loop the Confirm callers waiting.
func (n *Node) takeReads() []*call {
	n.mu.Lock()
	defer n.mu.Unlock()
	calls := n.reads
	n.reads = nil
	return calls
}

// readDone answers the read in flight once raft reports it confirmed.
func (n *Node) readDone(states []raft.ReadState) {
	if n.read == nil {
		return
	}
	for _, rs := range states {
		if len(rs.RequestCtx) == 8 && binary.BigEndian.Uint64(rs.RequestCtx) == n.read.seq {
			for _, c := range n.read.calls {
				c.finish(result{})
			}
			n.read = nil
			return
		}
	}
}

// readLost fails the read in flight if this member no longer leads its
// term: it is never confirmed.
func (n *Node) readLost(bs raft.BasicStatus) {
	if n.read != nil && (bs.RaftState != raft.StateLeader || bs.Term != n.read.term) {
		fail(n.read.calls, ErrLeadershipLost)
		n.read = nil
	}
}

// Compact makes data, the state machine's state as of index (an applied
// index), the log's snapshot, and drops every entry up to index from the
// log, on disk and in memory. A member that falls behind the log's start
// is then sent the snapshot, and a restart restores it before applying
// the entries after it.
//
// data may reflect changes of entries after index too, if applying those
// entries again over it ends in the same state (the broker's records say
// what a key is, not what happened to it, so they do): the snapshot is
// taken while the state keeps changing, as the store's are. The node
// keeps data; the caller must not change it.
//
// Errors: ErrCompactRefused for an index it may not use now, and the
// log's (store.ErrNoSpace changes nothing; store.ErrStopped stops the
// node), ErrStopped, or ctx's.
func (n *Node) Compact(ctx context.Context, index uint64, records format.Version, data []byte) error {
	c := &compaction{index: index, records: records, data: data, done: make(chan error, 1)}
	select {
	case n.compactc <- c:
	case <-n.done:
		return n.Err()
	case <-ctx.Done():
		return fmt.Errorf("replica: compact: %w", ctx.Err())
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("replica: compact: %w", ctx.Err())
	}
}
