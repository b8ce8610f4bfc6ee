package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/store"
	"go.etcd.io/raft/v3/raftpb"
)

// ErrNothingToForce is ForceNewCluster's for a log that holds no queue.
var ErrNothingToForce = errors.New("replica: the raft log is empty: there is no queue to force into a new cluster")

// ForceNewCluster rewrites the log of a stopped member, self, so that the
// node started on it next is a queue of one, holding everything the log
// holds (etcd's --force-new-cluster). It is the operator's way back after
// more disks were lost than a majority survives: the survivor alone can
// elect no leader, and the members that lost their disks must not form a
// queue of their own (Rejoin never lets them). The caller gives the queue
// a new cluster id, so that members still holding the old queue's log
// are refused by the transport.
//
// It appends to the log one configuration change for each other member of
// the configuration (as of the log's last entry), removing it, and saves a
// hard state that commits everything up to them. The removals do not
// tombstone the names: the members left out rejoin on empty data
// directories under their names (Replace), as after a lost disk.
//
// Every entry is committed, those the log held past its commit index too,
// where etcd discards those: an acknowledged change was on a majority's
// disks, this one's perhaps among them, but this member may not have
// heard of its commit before the others were lost. The rest are changes
// whose callers were never answered OK: keeping one is one of the two
// outcomes such a caller was told to expect.
//
// It returns the ids removed. self must be a voter.
func ForceNewCluster(l *store.RaftLog, self uint64, names map[uint64]string) ([]uint64, error) {
	ms := l.MemoryStorage()
	hs, cs, err := ms.InitialState()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's state: %w", err)
	}
	first, err := ms.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's state: %w", err)
	}
	last, err := ms.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's state: %w", err)
	}
	if last == 0 {
		return nil, ErrNothingToForce
	}
	voters, learners, err := configurationAt(ms, cs, first, last)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(voters, self) {
		return nil, fmt.Errorf("replica: this member (%x) is not a voter of the queue its log holds (voters %x, learners %x): it cannot be the queue's survivor", self, voters, learners)
	}
	lastTerm, err := ms.Term(last)
	if err != nil {
		return nil, fmt.Errorf("replica: read the term of entry %d: %w", last, err)
	}
	term := max(hs.Term, lastTerm)
	var (
		ents    []raftpb.Entry
		removed []uint64
	)
	for _, id := range append(slices.Clone(voters), learners...) {
		if id == self {
			continue
		}
		cc := raftpb.ConfChangeV2{
			Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode, NodeID: id}},
			Context: removeContext(names[id], false),
		}
		data, err := cc.Marshal()
		if err != nil {
			return nil, fmt.Errorf("replica: encode the removal of %x: %w", id, err)
		}
		ents = append(ents, raftpb.Entry{Term: term, Index: last + uint64(len(ents)) + 1, Type: raftpb.EntryConfChangeV2, Data: data})
		removed = append(removed, id)
	}
	commit := last + uint64(len(ents))
	// The vote is this term's, and stays: the member votes for no one
	// else in it, as before. The term rises when it campaigns alone.
	hs = raftpb.HardState{Term: term, Vote: hs.Vote, Commit: commit}
	if err := l.Save(hs, ents, raftpb.Snapshot{}); err != nil {
		return nil, fmt.Errorf("replica: save the new configuration: %w", err)
	}
	return removed, nil
}

// configurationAt returns the voters and learners as of entry last: the
// snapshot's configuration cs, changed by every configuration change in
// the entries from first on, in order. Changes this package does not make
// (joint configurations) are refused.
func configurationAt(ms interface {
	Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error)
}, cs raftpb.ConfState, first, last uint64) (voters, learners []uint64, err error) {
	if len(cs.VotersOutgoing) > 0 || cs.AutoLeave {
		return nil, nil, fmt.Errorf("replica: the log's snapshot holds a joint configuration, which this queue never makes")
	}
	voters, learners = slices.Clone(cs.Voters), slices.Clone(cs.Learners)
	const step = 1024
	for lo := first; lo <= last; lo += step {
		ents, err := ms.Entries(lo, min(lo+step, last+1), ^uint64(0))
		if err != nil {
			return nil, nil, fmt.Errorf("replica: read entries %d to %d: %w", lo, min(lo+step, last+1)-1, err)
		}
		for _, e := range ents {
			var cc raftpb.ConfChangeV2
			switch e.Type {
			case raftpb.EntryConfChange:
				var v1 raftpb.ConfChange
				if err := v1.Unmarshal(e.Data); err != nil {
					return nil, nil, fmt.Errorf("replica: entry %d: configuration change: %w", e.Index, err)
				}
				cc = v1.AsV2()
			case raftpb.EntryConfChangeV2:
				if err := cc.Unmarshal(e.Data); err != nil {
					return nil, nil, fmt.Errorf("replica: entry %d: configuration change: %w", e.Index, err)
				}
			default:
				continue
			}
			if len(cc.Changes) > 1 {
				return nil, nil, fmt.Errorf("replica: entry %d changes %d members at once, which this queue never does", e.Index, len(cc.Changes))
			}
			for _, c := range cc.Changes {
				if c.Type == raftpb.ConfChangeUpdateNode {
					continue // a member's client address: no vote changes
				}
				voters = slices.DeleteFunc(voters, func(id uint64) bool { return id == c.NodeID })
				learners = slices.DeleteFunc(learners, func(id uint64) bool { return id == c.NodeID })
				switch c.Type {
				case raftpb.ConfChangeAddNode:
					voters = append(voters, c.NodeID)
				case raftpb.ConfChangeAddLearnerNode:
					learners = append(learners, c.NodeID)
				}
			}
		}
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners, nil
}

// A Seed is what SeedLog writes: the members of the restored queue, one of
// them this member, and the state they hold.
type Seed struct {
	// Self is this member's id, one of Members'.
	Self uint64
	// Members are every member of the restored queue, with ids of their
	// own (never one an earlier queue used), names and peer addresses.
	Members []Member
	// Term is the term the log starts in: at least the token epoch of the
	// queue the state was taken from (backup.Fence), so that the first
	// leader's term, and with it every token of the restored queue, is
	// above every token that queue issued. 0 means 1.
	Term uint64
	// State is a StateMachine's, as Compact is given it, its records of
	// Version.
	State   []byte
	Version format.Version
}

// SeedLog writes into the empty log l a queue of every member of s,
// holding s.State: a snapshot at index 1 of term s.Term holding the state
// and a configuration of every member as a voter, committed. A node
// started on it restores the state and campaigns, but leads only once a
// majority of the members votes for it: the others take the ids the seed
// gives them when they start on empty data directories (Config.Claims,
// Rejoin), and a member of another queue, the one the state came from
// among them, refuses it (another cluster id, other ids). It is how a
// backup seeds a new queue.
func SeedLog(l *store.RaftLog, s Seed) error {
	ms := l.MemoryStorage()
	last, err := ms.LastIndex()
	if err != nil {
		return fmt.Errorf("replica: read the log's state: %w", err)
	}
	if snap, _ := ms.Snapshot(); last != 0 || snap.Metadata.Index != 0 {
		return fmt.Errorf("replica: the raft log holds entries up to %d: a log is seeded only when empty", last)
	}
	members := memberState{members: map[uint64]Member{}, removed: map[string]bool{}}
	var voters []uint64
	for _, m := range s.Members {
		if m.ID == 0 || members.members[m.ID].ID != 0 {
			return fmt.Errorf("replica: seed: member %q has id %x, zero or another member's", m.Name, m.ID)
		}
		members.members[m.ID] = Member{ID: m.ID, Name: m.Name, Addr: m.Addr}
		voters = append(voters, m.ID)
	}
	if members.members[s.Self].ID == 0 {
		return fmt.Errorf("replica: seed: this member's id %x is not among the members", s.Self)
	}
	slices.Sort(voters)
	term := max(s.Term, 1)
	v, ok := format.RaftSnapshot.Holding(s.Version, format.BuildLevel)
	if !ok {
		return fmt.Errorf("replica: seed: no raft snapshot version holds records of version %d", s.Version)
	}
	snap := raftpb.Snapshot{
		Data:     snapshotData(members, s.State, v),
		Metadata: raftpb.SnapshotMetadata{Index: 1, Term: term, ConfState: raftpb.ConfState{Voters: voters}},
	}
	if err := l.Save(raftpb.HardState{Term: term, Commit: 1}, nil, snap); err != nil {
		return fmt.Errorf("replica: seed the raft log: %w", err)
	}
	return nil
}

// SeededMembers returns the members of the configuration a log's snapshot
// holds, as SeedLog wrote them (ids, names, peer addresses): for a
// restored member to check, at its first starts, that it is started with
// the --initial-cluster its restore was given. A log without a snapshot
// holds none.
func SeededMembers(l *store.RaftLog) ([]Member, error) {
	snap, err := l.MemoryStorage().Snapshot()
	if err != nil {
		return nil, fmt.Errorf("replica: read the log's snapshot: %w", err)
	}
	if len(snap.Data) == 0 {
		return nil, nil
	}
	ms, _, err := parseSnapshotData(snap.Data)
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(ms.members))
	for _, m := range ms.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
