package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Members. The node keeps every member's name, peer address and client
// address by Raft id: the initial ones from Config (Peers, Names), the
// others from the configuration changes that added them, whose context
// names them (confctx.go; bootstrap's entries carry the address alone, and
// the name is Names'). A member's client address comes with MemberAdd, if
// it was given, and from the member itself, which publishes it (publish.go)
// as a change that changes no vote. The names MemberRemove took out are
// kept too (tombstones), so that a removed member started again on an
// empty directory is not taken back as one that lost its disk. Both are
// part of every snapshot (snapshotData), since the entries that made them
// are compacted away with the rest.
//
// A member that lost its disk must not come back under its old Raft id:
// the leader remembers how far that id's log reached and would send it a
// commit index its empty log does not hold (etcd raft panics on that), and
// the vote it cast before the loss is forgotten, so it could vote twice in
// one term. So it rejoins under its name with a new id: Replace, on the
// leader, removes the old id from the configuration and adds the new one,
// one change at a time (a configuration of two in between, whose majority
// is both); the member starts with Config.Join and an empty log, and the
// leader catches it up by snapshot or entries.

// Member is one member of the configuration.
type Member struct {
	ID   uint64
	Name string
	Addr string // its peer address
	// ClientAddr is where clients reach it (its --advertise-addr): empty
	// until MemberAdd gave it or the member published it.
	ClientAddr string
	// Learner: it receives the log but does not vote, nor count towards a
	// majority (AddMember's, until it starts and joins).
	Learner bool
}

// Errors of the membership changes.
var (
	// ErrNotMember: Replace was asked for a name and address that are
	// not a member's, or RemoveMember for a name no member has.
	ErrNotMember = errors.New("replica: no member has that name and address")
	// ErrMemberExists: AddMember was asked for a name or a peer address a
	// member already has.
	ErrMemberExists = errors.New("replica: a member already has that name or address")
	// ErrLastVoter: RemoveMember was asked to remove the only voter.
	ErrLastVoter = errors.New("replica: the only voting member cannot be removed")
	// ErrRemoveLeader: RemoveMember was asked to remove the leader itself.
	ErrRemoveLeader = errors.New("replica: the leader does not remove itself")
	// ErrRemoved: Replace was asked for a name MemberRemove took out of
	// the queue. Its member, started again on an empty directory, is not
	// one that lost its disk; AddMember takes the name back.
	ErrRemoved = errors.New("replica: that member was removed from the queue (MemberRemove): MemberAdd it again to take it back")
)

// noteLearners records which members are learners, from the configuration
// the loop just applied.
func (n *Node) noteLearners(cs raftpb.ConfState) {
	l := make(map[uint64]bool, len(cs.Learners))
	for _, id := range cs.Learners {
		l[id] = true
	}
	n.membersMu.Lock()
	n.learners = l
	n.membersMu.Unlock()
}

// Members returns the members of the configuration as this member knows
// them, by id.
func (n *Node) Members() []Member {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		m.Learner = n.learners[m.ID]
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Initialized reports whether this member's log holds an entry of a
// leader or a snapshot: whether the queue has been in use, as far as it
// knows. Bootstrap's own entries are of term 1, before any election.
func (n *Node) Initialized() bool {
	ms := n.cfg.Log.MemoryStorage()
	if snap, err := ms.Snapshot(); err == nil && !raft.IsEmptySnap(snap) {
		return true
	}
	last, err := ms.LastIndex()
	if err != nil || last == 0 {
		return false
	}
	t, err := ms.Term(last)
	return err == nil && t > 1
}

// confCall is one configuration change waiting to be applied.
type confCall struct {
	cc   raftpb.ConfChangeV2
	data []byte // as proposed, to find it when applied
	term uint64
	done chan struct{}
	err  error
}

// changeConf proposes cc on the leader and waits until it is applied here.
func (n *Node) changeConf(ctx context.Context, cc raftpb.ConfChangeV2) error {
	c := &confCall{cc: cc, done: make(chan struct{})}
	select {
	case n.confc <- c:
	case <-n.done:
		return n.Err()
	case <-ctx.Done():
		return fmt.Errorf("replica: configuration change: %w", ctx.Err())
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("replica: configuration change: %w", ctx.Err())
	}
}

// proposeConf is changeConf's part on the loop.
func (n *Node) proposeConf(c *confCall) {
	bs := n.rn.BasicStatus()
	switch {
	case bs.RaftState != raft.StateLeader || !n.leading:
		c.err = &NotLeaderError{Leader: bs.Lead}
	case n.conf != nil:
		c.err = errors.New("replica: another configuration change is under way")
	}
	if c.err == nil {
		var err error
		if c.data, err = c.cc.Marshal(); err == nil {
			err = n.rn.ProposeConfChange(c.cc)
		}
		if err != nil {
			c.err = fmt.Errorf("%w: %w", ErrDropped, err)
		}
	}
	if c.err != nil {
		close(c.done)
		return
	}
	c.term = bs.Term
	n.conf = c
}

// confApplied answers the change in flight if data is it.
func (n *Node) confApplied(data []byte) {
	if n.conf != nil && string(n.conf.data) == string(data) {
		close(n.conf.done)
		n.conf = nil
	}
}

// confLost fails the change in flight if this member no longer leads its
// term: it may or may not be applied later.
func (n *Node) confLost(bs raft.BasicStatus) {
	if n.conf != nil && (bs.RaftState != raft.StateLeader || bs.Term != n.conf.term) {
		n.conf.err = ErrLeadershipLost
		close(n.conf.done)
		n.conf = nil
	}
}

// Replace takes back a member that lost its disk (see above): on the
// leader, it removes the id name has from the configuration, if it has
// one, adds a fresh id for name at addr as a learner, and returns it and
// the members once both changes are applied here. The learner becomes a
// voter once its log has caught up (promoteCaughtUp): added as a voter at
// once, an empty member would weigh on the majority before it could ack
// anything, and in a queue of one (after --force-new-cluster) the leader
// could then commit nothing, not even the snapshot the newcomer needs. name and addr must be a member's
// (ErrNotMember); this member's own name is refused, and so is a name
// MemberRemove took out (ErrRemoved).
func (n *Node) Replace(ctx context.Context, name, addr string) (uint64, []Member, error) {
	n.replaceMu.Lock()
	defer n.replaceMu.Unlock()
	old, err := n.replaced(name, addr)
	if err != nil {
		return 0, nil, err
	}
	if old.ID == n.cfg.ID {
		return 0, nil, fmt.Errorf("%w: %s is this member, the leader, which has its disk", ErrNotMember, name)
	}
	if old.ID != 0 {
		// Not a tombstone: the name stays the queue's, and if the second
		// change never comes, the member asks again and is let back.
		if err := n.removeID(ctx, name, old.ID, false); err != nil {
			return 0, nil, fmt.Errorf("remove %s's old id %d: %w", name, old.ID, err)
		}
		n.log.Warn("removed a member's old id: it rejoins under a new one", "name", name, "old_id", old.ID)
	}
	id, err := n.freshID()
	if err != nil {
		return 0, nil, err
	}
	// The client address the old id had, until the member publishes its
	// own.
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id}}, Context: addContext(name, addr, old.ClientAddr)}
	if err := n.changeConf(ctx, cc); err != nil {
		return 0, nil, fmt.Errorf("add %s under id %d: %w", name, id, err)
	}
	n.log.Warn("a member rejoined under a new id, as a learner until it has caught up", "name", name, "id", id, "addr", addr)
	return id, n.Members(), nil
}

// promoteTimeout bounds one promotion: a configuration change commits
// within a few round trips of a healthy majority.
const promoteTimeout = 10 * time.Second

// promoteLag is how far behind the commit index a learner's log may be
// and still count as caught up: under steady writes a follower's match
// trails the commit by what is in flight at any tick, and a learner
// required to match it exactly might never be promoted. The rest streams
// to it as to any voter (etcd promotes a learner at 90% of the leader's
// log; a fixed lag keeps a voter from needing a snapshot again).
const promoteLag = 128

// promoteCaughtUp makes a learner a voter, on the leader's loop once a
// tick, when its log has caught up with the commit index (within
// promoteLag) and it has been
// heard from within an election timeout: a member Replace took back. A
// learner MemberAdd added and not started yet never catches up, so it
// stays a learner until it starts and Replace takes it in. One promotion
// at a time, outside the loop (a configuration change waits for its
// apply), after any change under way.
func (n *Node) promoteCaughtUp(st raft.Status) {
	if n.conf != nil || n.promoting.Load() != 0 {
		return
	}
	for id, pr := range st.Progress {
		if !pr.IsLearner || pr.Match == 0 || pr.Match+promoteLag < st.Commit {
			continue
		}
		if at, heard := n.heardAt[id]; !heard || n.ticks-at > uint64(n.cfg.ElectionTick) {
			continue
		}
		n.membersMu.Lock()
		m, ok := n.members[id]
		n.membersMu.Unlock()
		if !ok {
			continue
		}
		n.promoting.Store(id)
		go n.promote(m)
		return
	}
}

// promote proposes the change that makes learner m a voter and waits for
// it; a failure is logged and the next tick tries again.
func (n *Node) promote(m Member) {
	defer n.promoting.Store(0)
	n.replaceMu.Lock()
	defer n.replaceMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), promoteTimeout)
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode, NodeID: m.ID}}, Context: addContext(m.Name, m.Addr, m.ClientAddr)}
	if err := n.changeConf(ctx, cc); err != nil {
		n.log.Warn("could not make a member that caught up a voter; trying again", "name", m.Name, "id", m.ID, "error", err)
		return
	}
	n.log.Info("a member caught up and votes now", "name", m.Name, "id", m.ID)
}

// replaced finds the member Replace takes back: the configuration's
// record of name (its ID 0 if it has none), which must be at addr. A name
// the configuration does not hold is taken back only if it is one of the
// initial members (Peers and Names) at addr and MemberRemove did not take
// it out: a Replace that removed its old id and did not get to add the new
// one leaves it so.
func (n *Node) replaced(name, addr string) (Member, error) {
	for _, m := range n.Members() {
		if m.Name != name {
			continue
		}
		if m.Addr != addr {
			return Member{}, fmt.Errorf("%w: %s is at %s, not %s", ErrNotMember, name, m.Addr, addr)
		}
		return m, nil
	}
	if n.tombstoned(name) {
		return Member{}, fmt.Errorf("%w: %s at %s", ErrRemoved, name, addr)
	}
	if n.initialMember(name, addr) {
		return Member{Name: name, Addr: addr}, nil
	}
	return Member{}, fmt.Errorf("%w: no member is %s at %s", ErrNotMember, name, addr)
}

// tombstoned reports whether MemberRemove took name out of the queue (and
// MemberAdd has not taken it back since).
func (n *Node) tombstoned(name string) bool {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	return n.removed[name]
}

// removeID takes id, name's, out of the configuration. tombstone says
// whether the name leaves the queue with it (MemberRemove) or only the id
// does (Replace's first change). replaceMu must be held.
func (n *Node) removeID(ctx context.Context, name string, id uint64, tombstone bool) error {
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: id}}, Context: removeContext(name, tombstone)}
	return n.changeConf(ctx, cc)
}

// AddMember makes name, reached by its peers at addr and by clients at
// client (empty if not known yet: the member publishes it when it starts),
// a member of the queue: on the leader, it adds a fresh Raft id for it as
// a learner, which receives the log and does not vote, so a member added
// but not started yet weighs on no majority. When the member starts, with
// an empty log, it asks to join (Rejoin), and Replace makes it a voter
// under another fresh id. A name MemberRemove took out is the queue's
// again from then on. It returns the new id and the members once the
// change is applied here. A name or address a member already has is
// ErrMemberExists.
func (n *Node) AddMember(ctx context.Context, name, addr, client string) (uint64, []Member, error) {
	n.replaceMu.Lock()
	defer n.replaceMu.Unlock()
	for _, m := range n.Members() {
		switch {
		case m.Name == name:
			return 0, nil, fmt.Errorf("%w: %s is a member, at %s", ErrMemberExists, name, m.Addr)
		case m.Addr == addr:
			return 0, nil, fmt.Errorf("%w: %s is %s's peer address", ErrMemberExists, addr, m.Name)
		}
	}
	id, err := n.freshID()
	if err != nil {
		return 0, nil, err
	}
	cc := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id}}, Context: addContext(name, addr, client)}
	if err := n.changeConf(ctx, cc); err != nil {
		return 0, nil, fmt.Errorf("add %s under id %d: %w", name, id, err)
	}
	n.log.Info("added a member, as a learner until it starts", "name", name, "id", id, "addr", addr, "client_addr", client)
	return id, n.Members(), nil
}

// RemoveMember takes name out of the configuration, on the leader, and
// returns the members that remain once the change is applied here. The
// name is tombstoned: Replace refuses it (ErrRemoved) until AddMember
// adds it again, so the removed member, started again on an empty
// directory with its old flags, is not taken back. A name
// no member has is ErrNotMember; the only voter is ErrLastVoter; the
// leader's own name is ErrRemoveLeader (once it is stopped, another member
// leads and can remove it).
func (n *Node) RemoveMember(ctx context.Context, name string) ([]Member, error) {
	n.replaceMu.Lock()
	defer n.replaceMu.Unlock()
	var target *Member
	voters := 0
	members := n.Members()
	for i, m := range members {
		if m.Name == name {
			target = &members[i]
		}
		if !m.Learner {
			voters++
		}
	}
	switch {
	case target == nil:
		return nil, fmt.Errorf("%w: no member is named %s", ErrNotMember, name)
	case target.ID == n.cfg.ID:
		return nil, fmt.Errorf("%w: %s leads the queue", ErrRemoveLeader, name)
	case !target.Learner && voters == 1:
		return nil, fmt.Errorf("%w: %s", ErrLastVoter, name)
	}
	if err := n.removeID(ctx, name, target.ID, true); err != nil {
		return nil, fmt.Errorf("remove %s (id %d): %w", name, target.ID, err)
	}
	n.log.Warn("removed a member", "name", name, "id", target.ID)
	return n.Members(), nil
}

// freshID is a random Raft id no member has.
func (n *Node) freshID() (uint64, error) {
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("replica: a new member id: %w", err)
		}
		id := binary.BigEndian.Uint64(b[:])
		n.membersMu.Lock()
		_, taken := n.members[id]
		n.membersMu.Unlock()
		if id != 0 && !taken {
			return id, nil
		}
	}
}

// memberOf reads a configuration change's context for the member it adds:
// "name=addr" (and its client address, if given), or bootstrap's address
// alone, named from Names.
func (n *Node) memberOf(id uint64, ctx []byte) (Member, bool) {
	c := parseContext(ctx)
	if c.pair {
		return Member{ID: id, Name: c.name, Addr: c.peer, ClientAddr: c.client}, true
	}
	addr := c.peer
	if addr == "" {
		addr = n.cfg.Peers[id]
	}
	if addr == "" {
		return Member{}, false
	}
	return Member{ID: id, Name: n.cfg.Names[id], Addr: addr}, true
}

// Snapshot data is the members, then the state machine's:
//
//	version  1 byte, format.RaftSnapshot's
//	count    uvarint
//	members  each: uvarint id, uvarint-length name, uvarint-length addr,
//	         uvarint-length client address
//	removed  uvarint count, then each a uvarint-length name: the tombstones
//	state    the rest: what Compact was given
//
// Version 1, which earlier versions wrote and existing logs still hold, has
// no client addresses and no tombstones; it is read as having none.

// memberState is what a snapshot holds of the membership.
type memberState struct {
	members map[uint64]Member
	removed map[string]bool
}

// snapshotData encodes ms and state as a snapshot's data of version v
// (the queue's level's: format.RaftSnapshot.Holding), whose records state
// must be of (format.RaftSnapshot.RecordsAt(v)): a member one release
// behind must read the snapshots the leader sends it.
func snapshotData(ms memberState, state []byte, v format.Version) []byte {
	b := make([]byte, 0, 1+16+len(ms.members)*64+len(ms.removed)*16+len(state))
	b = append(b, byte(v))
	v1 := v == 1
	b = binary.AppendUvarint(b, uint64(len(ms.members)))
	ids := make([]uint64, 0, len(ms.members))
	for id := range ms.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	appendStr := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, id := range ids {
		m := ms.members[id]
		b = binary.AppendUvarint(b, id)
		appendStr(m.Name)
		appendStr(m.Addr)
		if !v1 {
			appendStr(m.ClientAddr)
		}
	}
	if !v1 {
		names := slices.Sorted(maps.Keys(ms.removed))
		b = binary.AppendUvarint(b, uint64(len(names)))
		for _, name := range names {
			appendStr(name)
		}
	}
	return append(b, state...)
}

// snapshotReader reads snapshotData's fields; ok turns false at the first
// that runs past the data.
type snapshotReader struct {
	data []byte
	off  int
	ok   bool
}

func (r *snapshotReader) uvarint() uint64 {
	if !r.ok {
		return 0
	}
	v, k := binary.Uvarint(r.data[r.off:])
	if k <= 0 {
		r.ok = false
		return 0
	}
	r.off += k
	return v
}

func (r *snapshotReader) str() string {
	l := r.uvarint()
	if !r.ok || l > uint64(len(r.data)-r.off) {
		r.ok = false
		return ""
	}
	s := string(r.data[r.off : r.off+int(l)])
	r.off += int(l)
	return s
}

// count reads a count of items that take at least a byte each.
func (r *snapshotReader) count() uint64 {
	c := r.uvarint()
	if c > uint64(len(r.data)-r.off) {
		r.ok = false
	}
	return c
}

// parseSnapshotData splits snapshotData's, of either version, into the
// membership and the state (its Records aliasing data, its Version the
// one the snapshot's version holds; Index is the caller's to set).
func parseSnapshotData(data []byte) (ms memberState, state State, err error) {
	bad := func(what string) error { return fmt.Errorf("%w: snapshot: %s", errBadEntry, what) }
	if len(data) < 1 {
		return memberState{}, State{}, bad("empty")
	}
	v := format.Version(data[0])
	if err := format.RaftSnapshot.Check(v); err != nil {
		return memberState{}, State{}, fmt.Errorf("%w: %w", errBadEntry, err)
	}
	v1 := data[0] == 1
	r := &snapshotReader{data: data, off: 1, ok: true}
	count := r.count()
	if !r.ok {
		return memberState{}, State{}, bad("member count")
	}
	ms = memberState{members: make(map[uint64]Member, count), removed: map[string]bool{}}
	for range count {
		m := Member{ID: r.uvarint(), Name: r.str(), Addr: r.str()}
		if !v1 {
			m.ClientAddr = r.str()
		}
		if !r.ok || m.ID == 0 {
			return memberState{}, State{}, bad("a member")
		}
		ms.members[m.ID] = m
	}
	if !v1 {
		removed := r.count()
		for range removed {
			if name := r.str(); r.ok {
				ms.removed[name] = true
			}
		}
		if !r.ok {
			return memberState{}, State{}, bad("the removed members")
		}
	}
	return ms, State{Version: format.RaftSnapshot.RecordsAt(v), Records: data[r.off:]}, nil
}

// membership is the node's members and tombstones, copied.
func (n *Node) membership() memberState {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	return memberState{members: maps.Clone(n.members), removed: maps.Clone(n.removed)}
}

// setMembers makes a snapshot's membership the node's, and points the
// transport at its members.
func (n *Node) setMembers(ms memberState) {
	n.membersMu.Lock()
	old := n.members
	n.members, n.removed = ms.members, ms.removed
	n.membersMu.Unlock()
	n.kickPublisher()
	if n.tr == nil {
		return // New: the transport is made from them
	}
	for id := range old {
		if _, ok := ms.members[id]; !ok && id != n.cfg.ID {
			n.tr.RemovePeer(id)
		}
	}
	for id, m := range ms.members {
		if id == n.cfg.ID {
			continue
		}
		if err := n.tr.AddPeer(id, m.Addr); err != nil {
			n.log.Error("could not add a peer to the transport", "peer", id, "addr", m.Addr, "error", err)
		}
	}
}
