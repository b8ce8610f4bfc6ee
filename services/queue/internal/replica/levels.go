package replica

// Format levels. Every member says, with each batch it sends (the
// transport's Heard), the format level of its build: the highest level of
// the formats it reads (package format). The leader writes what it writes
// at the queue's level, the lowest of its voters' levels, counting a voter
// it has not heard from, or one of a release that does not say, as level
// 1: a member one release behind keeps reading everything, and a new
// version of a format is written only once every voter runs a release
// that reads it. Like etcd's cluster version, the level rises by itself
// when the last member is upgraded; unlike it, it is not kept in the log,
// so a member rolled back lowers it again, but what was written at the
// higher level stays in the log, where that member cannot read it: an
// upgrade can be rolled back only while the queue's level has not risen
// (docs/operations.md says how to see it).

import (
	"github.com/batonrun/baton/services/queue/internal/format"
)

// heard records the level a member sent, and whether it said it is
// stopping (leave.go). The transport's Heard.
func (n *Node) heard(from uint64, level format.Level, stopping bool) {
	if level == 0 {
		level = 1 // a release that did not say reads level 1
	}
	n.levelsMu.Lock()
	n.levels[from] = level
	began := stopping && !n.stopping[from]
	if stopping {
		n.stopping[from] = true
	} else {
		delete(n.stopping, from) // started again
	}
	n.levelsMu.Unlock()
	if began {
		select {
		case n.peerStopc <- struct{}{}:
		default: // the loop will look already
		}
	}
}

// MemberLevel is the format level member id last said, 0 if it has said
// none to this member (this member's own is format.BuildLevel).
func (n *Node) MemberLevel(id uint64) format.Level {
	if id == n.cfg.ID {
		return format.BuildLevel
	}
	n.levelsMu.Lock()
	defer n.levelsMu.Unlock()
	return n.levels[id]
}

// ClusterLevel is the queue's format level as this member knows it: the
// lowest of the voters' levels, a voter not heard from counted as 1.
// Meaningful on the leader, which hears from every voter; a follower hears
// from the leader alone.
func (n *Node) ClusterLevel() format.Level {
	level := format.BuildLevel
	for _, m := range n.Members() {
		if m.Learner {
			continue
		}
		l := n.MemberLevel(m.ID)
		if l == 0 {
			l = 1
		}
		level = min(level, l)
	}
	return level
}
