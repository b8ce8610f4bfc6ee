package replica

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Backoff of a Save refused for a full disk.
const (
	noSpaceMinBackoff = 10 * time.Millisecond
	noSpaceMaxBackoff = time.Second
)

// errStopRequested ends the loop from inside a Ready: Close was called
// while a Save waited for space.
var errStopRequested = errors.New("replica: stop requested")

// run is the Ready loop (doc.go): one event, the proposals, then every
// Ready there is, until Close or a failure.
func (n *Node) run() {
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	err := n.loop(tick.C)
	n.exit(err)
}

func (n *Node) loop(tick <-chan time.Time) error {
	for {
		select {
		case <-n.stop:
			return errClosedByCaller
		case <-tick:
			if !n.holding() {
				n.rn.Tick()
			}
			n.captureProgress()
		case m := <-n.recvc:
			if err := n.step(m); err != nil {
				return fmt.Errorf("%w: %w", ErrStopped, err)
			}
			// Everything else that has arrived, before one Ready (and one
			// fdatasync) for all of it.
			for more := true; more; {
				select {
				case m := <-n.recvc:
					if err := n.step(m); err != nil {
						return fmt.Errorf("%w: %w", ErrStopped, err)
					}
				default:
					more = false
				}
			}
		case id := <-n.unreachc:
			n.rn.ReportUnreachable(id)
			n.abandonTransfer(id)
		case r := <-n.snapc:
			n.rn.ReportSnapshot(r.id, r.status)
		case c := <-n.confc:
			n.proposeConf(c)
		case c := <-n.transferc:
			n.transfer(c)
		case c := <-n.leavec:
			n.leave(c)
		case <-n.peerStopc:
			n.abandonTransfer(raft.None)
		case c := <-n.compactc:
			err := n.compact(c.index, c.records, c.data)
			c.done <- err
			if errors.Is(err, store.ErrStopped) {
				return fmt.Errorf("%w: %w", ErrStopped, err)
			}
		case <-n.kick:
		}
		for {
			n.proposePending()
			if n.dropped {
				if err := n.resync(); err != nil {
					return fmt.Errorf("%w: %w", ErrStopped, err)
				}
			}
			n.readPending()
			if !n.rn.HasReady() {
				break
			}
			if err := n.ready(); errors.Is(err, errStopRequested) {
				return errClosedByCaller
			} else if err != nil {
				return fmt.Errorf("%w: %w", ErrStopped, err)
			}
		}
	}
}

// step hands a peer's message to raft. Its errors are messages raft has no
// use for (a response from a member no longer in the configuration, a
// local message type from the network): dropped, as the network may.
// Raft panics on a message that contradicts this member's log (a commit
// index past its last entry, from a leader whose log is not the one this
// member's came from): that ends the loop with ErrCannotFollow, and the
// member stays stopped rather than apply anything more. Raft's state
// after a panic is not to be trusted, so it is not stepped again.
func (n *Node) step(m raftpb.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: raft refused a %s from member %x at term %d: %v", ErrCannotFollow, m.Type, m.From, m.Term, r)
		}
	}()
	if n.refuseTransfer(&m) {
		return nil
	}
	if err := n.rn.Step(m); err != nil {
		n.log.Debug("raft message not stepped", "from", m.From, "type", m.Type.String(), "error", err)
	}
	return nil
}

// ready handles one Ready in order: save, send, apply, Advance; a leader
// sends first, so that its own fdatasync runs while the followers write
// theirs (Raft thesis 10.2.1, as etcd's server does). That is safe for a
// leader: raft counts its own entries towards a commit only once they are
// saved (the self-acknowledgement raft delivers after this Save, at
// Advance), and a leader's Ready changes no vote; the messages of the
// same Ready may be sent while its entries are being written (raft's
// doc.go). A follower saves first: its acknowledgements and votes must
// not go out before what they acknowledge is on its disk.
func (n *Node) ready() error {
	rd := n.rn.Ready()
	sendFirst := raft.IsEmptySnap(rd.Snapshot) && n.rn.BasicStatus().RaftState == raft.StateLeader
	if sendFirst {
		n.tr.Send(rd.Messages)
	}
	if err := n.save(rd); err != nil {
		return err
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		// A leader's snapshot: this member had fallen behind its
		// compacted log. It replaces the whole state, so it also ends a
		// leadership (a member that receives one follows already).
		if err := n.restore(&rd.Snapshot); err != nil {
			return err
		}
	} else if n.leading {
		if bs := n.rn.BasicStatus(); bs.RaftState != raft.StateLeader || bs.Term != n.leadTerm {
			if err := n.follow(); err != nil {
				return err
			}
		}
	} else if n.resyncing {
		if bs := n.rn.BasicStatus(); bs.RaftState != raft.StateLeader || bs.Term != n.leadTerm {
			n.resyncing = false // Follow ran at the drop; it follows now
		}
	}
	if !sendFirst {
		n.tr.Send(rd.Messages)
	}
	for i := range rd.CommittedEntries {
		if err := n.apply(&rd.CommittedEntries[i]); err != nil {
			return err
		}
	}
	// Confirmed once the ReadIndex's heartbeats came back from a
	// majority; the broker needs no entry applied for it, only the
	// leadership.
	n.readDone(rd.ReadStates)
	n.rn.Advance(rd)
	n.observe(rd.SoftState)
	n.maybeRelead()
	return nil
}

// resync rebuilds the state machine after raft dropped proposals while
// this member led (a leadership transfer under way): their callers were
// told (ErrDropped), but the state machine made their changes when it
// enqueued them, and a later caller could build on a change the log will
// never hold. So the state machine follows for a moment: Follow rebuilds
// it from the entries applied so far, the entries this member proposed
// before the drop are applied to it as they commit, as on any follower,
// and once all of them are (maybeRelead), Lead is called again, in the
// same term.
func (n *Node) resync() error {
	n.dropped = false
	if !n.leading {
		return nil
	}
	n.log.Warn("raft dropped proposals while this member leads (a leadership transfer under way): the state machine is rebuilt from the log")
	if err := n.follow(); err != nil {
		return err
	}
	n.resyncing = true
	n.maybeRelead()
	return nil
}

// maybeRelead calls Lead again after a resync, once every proposal of this
// leadership is resolved (applied, or failed) and everything committed is
// applied, while this member still leads the same term and hands it to no
// one.
func (n *Node) maybeRelead() {
	if !n.resyncing || len(n.inflight) > 0 || n.conf != nil {
		return
	}
	bs := n.rn.BasicStatus()
	switch {
	case bs.RaftState != raft.StateLeader || bs.Term != n.leadTerm:
		n.resyncing = false
	case bs.LeadTransferee == raft.None && bs.Commit <= n.applied:
		n.resyncing = false
		n.lead(bs.Term)
	}
}

// save makes the Ready durable, retrying while the disk is full (doc.go:
// the Ready may not be advanced, nor anything else be done, unsaved).
func (n *Node) save(rd raft.Ready) error {
	backoff := noSpaceMinBackoff
	for {
		err := n.cfg.Log.Save(rd.HardState, rd.Entries, rd.Snapshot)
		if err == nil {
			if n.noSpace.Swap(false) {
				n.log.Info("raft log saves again: proposals accepted")
			}
			return nil
		}
		if !errors.Is(err, store.ErrNoSpace) {
			return fmt.Errorf("save a ready: %w", err)
		}
		if !n.noSpace.Swap(true) {
			n.log.Error("raft log full: retrying the save, refusing proposals", "error", err)
		}
		// Not proposed: a known outcome, as the store's refusal. Taken at
		// every retry, for a Propose that passed its check of noSpace just
		// before it was set.
		fail(n.takePending(), fmt.Errorf("replica: %w", store.ErrNoSpace))
		select {
		case <-n.stop:
			return errStopRequested
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, noSpaceMaxBackoff)
	}
}

// apply applies one committed entry: records to the state machine (and
// their callers answered), configuration changes to raft and the
// transport.
func (n *Node) apply(e *raftpb.Entry) error {
	if e.Index <= n.applied {
		return nil
	}
	switch e.Type {
	case raftpb.EntryNormal:
		if len(e.Data) > 0 {
			id, v, recs, err := decodeEntry(e.Data)
			if err != nil {
				return fmt.Errorf("entry %d: %w", e.Index, err)
			}
			n.sm.Apply(Entry{Index: e.Index, Version: v, Records: recs})
			n.complete(id, e.Index)
		} else if bs := n.rn.BasicStatus(); !n.leading && bs.RaftState == raft.StateLeader && e.Term == bs.Term {
			// The empty entry of this leader's term: everything before it
			// is applied.
			n.lead(e.Term)
		}
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := cc.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("entry %d: configuration change: %w", e.Index, err)
		}
		n.applyConfChange(cc.AsV2(), e.Index)
		n.confApplied(e.Data)
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := cc.Unmarshal(e.Data); err != nil {
			return fmt.Errorf("entry %d: configuration change: %w", e.Index, err)
		}
		n.applyConfChange(cc, e.Index)
		n.confApplied(e.Data)
	}
	n.applied = e.Index
	return nil
}

// applyConfChange applies a committed configuration change to raft, then
// to the members (members.go) and the transport, which it points at the
// members it adds and away from those it removes. The change's Context
// (confctx.go) is read when the change is about one member alone, as
// every change this package proposes is: an added member's address is
// there (bootstrap puts each address there), else Peers'.
func (n *Node) applyConfChange(cc raftpb.ConfChangeV2, index uint64) {
	n.confState, n.confIndex = *n.rn.ApplyConfChange(cc), index
	n.noteLearners(n.confState)
	adds := 0
	for _, c := range cc.Changes {
		if c.Type == raftpb.ConfChangeAddNode || c.Type == raftpb.ConfChangeAddLearnerNode {
			adds++
		}
	}
	for _, c := range cc.Changes {
		switch c.Type {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			var ctx []byte
			if adds == 1 {
				ctx = cc.Context
			}
			n.applyAdd(c.NodeID, ctx)
		case raftpb.ConfChangeRemoveNode:
			var ctx []byte
			if len(cc.Changes) == 1 {
				ctx = cc.Context
			}
			n.applyRemove(c.NodeID, ctx)
		case raftpb.ConfChangeUpdateNode:
			if len(cc.Changes) == 1 {
				n.applyUpdate(c.NodeID, cc.Context)
			}
		}
	}
	n.kickPublisher()
}

// applyAdd records a member an applied change added, and a name it had
// removed is the queue's again.
func (n *Node) applyAdd(id uint64, ctx []byte) {
	m, ok := n.memberOf(id, ctx)
	if !ok {
		n.log.Error("a member was added with no address: nothing is sent to it", "peer", id)
		return
	}
	n.membersMu.Lock()
	n.members[id] = m
	delete(n.removed, m.Name)
	n.membersMu.Unlock()
	if id == n.cfg.ID {
		return
	}
	if err := n.tr.AddPeer(id, m.Addr); err != nil {
		n.log.Error("could not add a peer to the transport", "peer", id, "addr", m.Addr, "error", err)
	}
}

// applyRemove forgets a member an applied change removed, and tombstones
// its name if MemberRemove removed it (its context says "removed"); a
// Replace's removal, and those of versions that did not say, do not.
func (n *Node) applyRemove(id uint64, ctx []byte) {
	c := parseContext(ctx)
	n.membersMu.Lock()
	delete(n.members, id)
	if c.removed && c.name != "" {
		n.removed[c.name] = true
	}
	n.membersMu.Unlock()
	if id == n.cfg.ID {
		n.log.Warn("this member was removed from the configuration")
		return
	}
	n.tr.RemovePeer(id)
}

// applyUpdate records the client address a member published (an
// UpdateNode, which raft applies as no change). One for an id no longer
// in the configuration, or under another name, changes nothing.
func (n *Node) applyUpdate(id uint64, ctx []byte) {
	c := parseContext(ctx)
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if m, ok := n.members[id]; ok && m.Name == c.name && c.client != "" {
		m.ClientAddr = c.client
		n.members[id] = m
	}
}

// observe updates Status and the metrics after a Ready, and answers the
// batches of a term this member no longer leads.
func (n *Node) observe(soft *raft.SoftState) {
	bs := n.rn.BasicStatus()
	if soft != nil {
		n.log.Info("raft state", "state", bs.RaftState.String(), "leader", bs.Lead, "term", bs.Term)
	}
	if bs.Lead != n.lastLead {
		if bs.Lead != raft.None {
			n.m.leaderChanges.Inc()
		}
		n.lastLead = bs.Lead
		defer n.kickPublisher() // once Status names the leader
	}
	isLeader := bs.RaftState == raft.StateLeader
	n.m.term.Set(float64(bs.Term))
	if isLeader {
		n.m.isLeader.Set(1)
	} else {
		n.m.isLeader.Set(0)
	}
	lag := uint64(0)
	if bs.Commit > n.applied {
		lag = bs.Commit - n.applied
	}
	n.m.commitLag.Set(float64(lag))
	n.statusMu.Lock()
	last, match, active := n.status.LastIndex, n.status.Match, n.status.Active
	if !isLeader {
		last, match, active = 0, nil, nil
	}
	n.status = Status{ID: n.cfg.ID, Term: bs.Term, Leader: bs.Lead, IsLeader: isLeader, Transferring: isLeader && bs.LeadTransferee != raft.None, Campaigning: bs.RaftState == raft.StateCandidate,
		Commit: bs.Commit, Applied: n.applied, LastIndex: last, Match: match, Active: active}
	n.statusMu.Unlock()
	// After Status: a caller told its leadership was lost finds this
	// member no longer leading.
	if len(n.inflight) > 0 {
		n.failLost(bs)
	}
	n.readLost(bs)
	n.confLost(bs)
}

// exit answers every caller with the loop's end and marks the node
// stopped: the in-flight ones (outcome unknown) and the pending ones
// (never proposed, but a stopped node is what they meet).
func (n *Node) exit(err error) {
	switch {
	case errors.Is(err, ErrCannotFollow):
		n.log.Error("raft node stopped: this member cannot follow the queue's leader; it stays up, not ready. If its data directory was restored from an old copy or belongs to another queue, stop it, empty --data-dir and start it again: it rejoins and catches up", "error", err)
	case !errors.Is(err, errClosedByCaller):
		n.log.Error("raft node stopped: restart to recover from the log", "error", err)
	}
	n.mu.Lock()
	n.closed = true
	n.err = err
	pending := n.pending
	n.pending = nil
	n.mu.Unlock()
	for seq, b := range n.inflight {
		delete(n.inflight, seq)
		fail(b.calls, err)
	}
	fail(pending, err)
	fail(n.takeReads(), err)
	if n.conf != nil {
		n.conf.err = err
		close(n.conf.done)
		n.conf = nil
	}
	if n.read != nil {
		fail(n.read.calls, err)
		n.read = nil
	}
	n.statusMu.Lock()
	n.status.IsLeader = false
	n.statusMu.Unlock()
	n.m.isLeader.Set(0)
	close(n.done)
}

// lead marks this member leading in term and calls Lead. A record enqueued
// in an earlier leadership is not one Last may return now: its outcome was
// settled when that leadership ended.
func (n *Node) lead(term uint64) {
	n.leading, n.leadTerm = true, term
	n.mu.Lock()
	n.last = nil
	n.mu.Unlock()
	n.sm.Lead(term)
	// A leader proposes its own client address only from now on.
	n.kickPublisher()
}

// follow ends a leadership: Follow rebuilds the state machine from the
// entries applied so far.
func (n *Node) follow() error {
	n.leading = false
	n.mu.Lock()
	n.last = nil
	n.mu.Unlock()
	if err := n.sm.Follow(n.replay); err != nil {
		return fmt.Errorf("rebuild after leadership ended: %w", err)
	}
	return nil
}

// replay rebuilds the state machine as of applied, on the loop's
// goroutine, so nothing is applied meanwhile: the log's snapshot, if it
// has been compacted, to Restore, then every entry after it that holds
// records, in log order, to apply.
func (n *Node) replay(apply func(Entry)) error {
	storage := n.cfg.Log.MemoryStorage()
	snap, err := storage.Snapshot()
	if err != nil {
		return err
	}
	if !raft.IsEmptySnap(snap) {
		_, state, err := parseSnapshotData(snap.Data)
		if err != nil {
			return err
		}
		state.Index = snap.Metadata.Index
		if err := n.sm.Restore(state); err != nil {
			return fmt.Errorf("restore the snapshot at %d: %w", snap.Metadata.Index, err)
		}
	}
	first, err := storage.FirstIndex()
	if err != nil {
		return err
	}
	const step = 1024
	for lo := first; lo <= n.applied; lo += step {
		hi := min(lo+step, n.applied+1)
		ents, err := storage.Entries(lo, hi, math.MaxUint64)
		if err != nil {
			return fmt.Errorf("read entries %d to %d: %w", lo, hi-1, err)
		}
		for _, e := range ents {
			if e.Type != raftpb.EntryNormal || len(e.Data) == 0 {
				continue
			}
			_, v, recs, err := decodeEntry(e.Data)
			if err != nil {
				return fmt.Errorf("entry %d: %w", e.Index, err)
			}
			apply(Entry{Index: e.Index, Version: v, Records: recs})
		}
	}
	return nil
}

// restore loads a snapshot a leader sent, once Save has made it the log's:
// the state machine's Restore replaces everything it held, and entries
// are applied from the snapshot's index on.
func (n *Node) restore(snap *raftpb.Snapshot) error {
	n.leading = false
	n.mu.Lock()
	n.last = nil
	n.mu.Unlock()
	start := time.Now()
	ms, state, err := parseSnapshotData(snap.Data)
	if err != nil {
		return fmt.Errorf("the snapshot at %d: %w", snap.Metadata.Index, err)
	}
	n.setMembers(ms)
	state.Index = snap.Metadata.Index
	if err := n.sm.Restore(state); err != nil {
		return fmt.Errorf("restore the snapshot at %d: %w", snap.Metadata.Index, err)
	}
	n.applied = snap.Metadata.Index
	n.confState, n.confIndex = snap.Metadata.ConfState, snap.Metadata.Index
	n.noteLearners(n.confState)
	n.m.snapshotsRestored.Inc()
	n.log.Info("restored a snapshot the leader sent", "index", snap.Metadata.Index, "bytes", len(snap.Data), "took", time.Since(start))
	return nil
}

// compact makes data the log's snapshot at index and drops the entries up
// to it (Compact), on the loop's goroutine: between two Readys, so no
// Save, apply or replay runs meanwhile.
func (n *Node) compact(index uint64, records format.Version, data []byte) error {
	snap, err := n.cfg.Log.MemoryStorage().Snapshot()
	if err != nil {
		return err
	}
	switch {
	case index > n.applied:
		return fmt.Errorf("%w: index %d is beyond the applied %d", ErrCompactRefused, index, n.applied)
	case index <= snap.Metadata.Index:
		return fmt.Errorf("%w: index %d is not past the last snapshot's %d", ErrCompactRefused, index, snap.Metadata.Index)
	case index < n.confIndex:
		return fmt.Errorf("%w: index %d is before the configuration change at %d", ErrCompactRefused, index, n.confIndex)
	}
	start := time.Now()
	cs := n.confState
	v, ok := format.RaftSnapshot.Holding(records, n.level())
	if !ok {
		return fmt.Errorf("%w: no raft snapshot version the queue's level writes holds records of version %d", ErrCompactRefused, records)
	}
	data = snapshotData(n.membership(), data, v)
	if err := n.cfg.Log.CreateSnapshot(index, &cs, data); err != nil {
		return fmt.Errorf("replica: compact the log at %d: %w", index, err)
	}
	n.m.snapshotsCreated.Inc()
	n.log.Info("log compacted", "index", index, "snapshot_bytes", len(data), "took", time.Since(start))
	return nil
}

// captureProgress records, on the leader, how far each member's log
// matches its own, for Status: once a tick, since raft's Status copies
// the progress of every member.
//
// Whether a member is heard from is not raft's RecentActive as it stands:
// with CheckQuorum the leader clears every RecentActive once an election
// timeout, inside the very Tick that precedes this call, so read alone it
// would call every live follower unreachable for one tick in ten. A
// member counts as heard from if RecentActive was set at any tick of the
// last election timeout.
func (n *Node) captureProgress() {
	if n.rn.BasicStatus().RaftState != raft.StateLeader {
		clear(n.heardAt)
		return
	}
	n.ticks++
	st := n.rn.Status()
	match := make(map[uint64]uint64, len(st.Progress))
	active := make(map[uint64]bool, len(st.Progress))
	for id, pr := range st.Progress {
		if pr.RecentActive || id == n.cfg.ID {
			n.heardAt[id] = n.ticks
		}
		at, heard := n.heardAt[id]
		match[id], active[id] = pr.Match, heard && n.ticks-at <= uint64(n.cfg.ElectionTick)
	}
	for id := range n.heardAt {
		if _, ok := st.Progress[id]; !ok {
			delete(n.heardAt, id) // removed from the queue
		}
	}
	last, _ := n.cfg.Log.MemoryStorage().LastIndex()
	n.statusMu.Lock()
	n.status.LastIndex, n.status.Match, n.status.Active = last, match, active
	n.statusMu.Unlock()
	n.writeLevel.Store(uint32(n.ClusterLevel()))
	n.promoteCaughtUp(st)
}

// holding reports whether the election clock is still held
// (Config.HoldElection): until the hold is released or a leader is known.
// Messages are stepped meanwhile, so a member that holds still votes for
// one that does not.
func (n *Node) holding() bool {
	if n.hold == nil {
		return false
	}
	select {
	case <-n.hold:
	default:
		if n.rn.BasicStatus().Lead == raft.None {
			return true
		}
	}
	n.hold = nil
	return false
}
