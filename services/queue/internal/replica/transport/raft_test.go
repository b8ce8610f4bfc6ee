package transport

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// raftMember is a raft.Node on MemoryStorage (no durability: that is the
// storage's step, not the transport's) with a minimal Ready loop, talking
// through a Transport.
type raftMember struct {
	id      uint64
	node    raft.Node
	storage *raft.MemoryStorage
	m       *member
	quit    chan struct{} // ends the Ready loop
	stopped chan struct{} // the Ready loop has ended
	once    sync.Once

	mu      sync.Mutex
	applied []string
	leader  uint64
}

// startRaft starts a node for id of the peers, its transport served on lis.
func startRaft(t *testing.T, id uint64, lis net.Listener, addrs map[uint64]string) *raftMember {
	t.Helper()
	r := &raftMember{id: id, storage: raft.NewMemoryStorage(), quit: make(chan struct{}), stopped: make(chan struct{})}
	var peers []raft.Peer
	others := map[uint64]string{}
	for pid, a := range addrs {
		peers = append(peers, raft.Peer{ID: pid})
		if pid != id {
			others[pid] = a
		}
	}
	r.node = raft.StartNode(&raft.Config{
		ID: id, ElectionTick: 10, HeartbeatTick: 1, Storage: r.storage,
		MaxSizePerMsg: 64 << 10, MaxInflightMsgs: 256, PreVote: true, CheckQuorum: true,
		Logger: quietLogger{},
	}, peers)
	r.m = startMember(t, id, lis, others, memberOpts{
		recv: func(ctx context.Context, m raftpb.Message) {
			_ = r.node.Step(ctx, m)
		},
		// The hook's reason to be: the node's own method.
		reportUnreachable: r.node.ReportUnreachable,
	})
	go r.loop(r.m.tr)
	t.Cleanup(r.stop)
	return r
}

// loop is the Ready loop in the documented order: persist, send, apply,
// Advance.
func (r *raftMember) loop(tr *Transport) {
	defer close(r.stopped)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-tick.C:
			r.node.Tick()
		case rd, ok := <-r.node.Ready():
			if !ok {
				return
			}
			if !raft.IsEmptyHardState(rd.HardState) {
				_ = r.storage.SetHardState(rd.HardState)
			}
			_ = r.storage.Append(rd.Entries)
			tr.Send(rd.Messages)
			for _, e := range rd.CommittedEntries {
				switch e.Type {
				case raftpb.EntryNormal:
					if len(e.Data) > 0 {
						r.mu.Lock()
						r.applied = append(r.applied, string(e.Data))
						r.mu.Unlock()
					}
				case raftpb.EntryConfChange:
					var cc raftpb.ConfChange
					if err := cc.Unmarshal(e.Data); err == nil {
						r.node.ApplyConfChange(cc)
					}
				}
			}
			if rd.SoftState != nil {
				r.mu.Lock()
				r.leader = rd.SoftState.Lead
				r.mu.Unlock()
			}
			r.node.Advance()
		}
	}
}

// stop ends the Ready loop (Ready is never closed, so it needs its own
// signal), then the node, then the transport: the order a member shuts
// down in.
func (r *raftMember) stop() {
	r.once.Do(func() {
		close(r.quit)
		<-r.stopped
		r.node.Stop()
		r.m.stop()
	})
}

func (r *raftMember) appliedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applied)
}

func (r *raftMember) leaderID() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

// quietLogger drops raft's logs, keeps its panics.
type quietLogger struct{}

func (quietLogger) Debug(...any)              {}
func (quietLogger) Debugf(string, ...any)     {}
func (quietLogger) Error(...any)              {}
func (quietLogger) Errorf(string, ...any)     {}
func (quietLogger) Info(...any)               {}
func (quietLogger) Infof(string, ...any)      {}
func (quietLogger) Warning(...any)            {}
func (quietLogger) Warningf(string, ...any)   {}
func (quietLogger) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (quietLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (quietLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (quietLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

// TestRaftOverTransport runs three etcd raft nodes whose only network is
// the transport: they elect a leader, commit proposals made on every
// member (a follower's travel to the leader as MsgProp), and after the
// leader's transport is closed the other two elect a new one and go on
// committing.
func TestRaftOverTransport(t *testing.T) {
	lis := []net.Listener{listen(t), listen(t), listen(t)}
	addrs := map[uint64]string{}
	for i, l := range lis {
		addrs[uint64(i+1)] = l.Addr().String()
	}
	var rs []*raftMember
	for i, l := range lis {
		rs = append(rs, startRaft(t, uint64(i+1), l, addrs))
	}
	leader := func(among []*raftMember) uint64 {
		var lead uint64
		eventually(t, "one leader all agree on", func() bool {
			lead = among[0].leaderID()
			for _, r := range among {
				if r.leaderID() != lead {
					return false
				}
			}
			return lead != 0
		})
		return lead
	}
	propose := func(among []*raftMember, n int, tag string) {
		for i := range n {
			r := among[i%len(among)]
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			if err := r.node.Propose(ctx, []byte(tag+strconv.Itoa(i))); err != nil {
				t.Fatalf("propose on %d: %v", r.id, err)
			}
			cancel()
		}
	}
	lead := leader(rs)
	propose(rs, 30, "a")
	for _, r := range rs {
		eventually(t, fmt.Sprintf("member %d applied 30 entries", r.id), func() bool { return r.appliedCount() == 30 })
	}

	// The leader goes away (transport and node): the others elect a
	// new leader and commit without it.
	var rest []*raftMember
	for _, r := range rs {
		if r.id == lead {
			r.stop()
		} else {
			rest = append(rest, r)
		}
	}
	eventually(t, "a new leader of the two", func() bool {
		l := rest[0].leaderID()
		return l != 0 && l != lead && rest[1].leaderID() == l
	})
	propose(rest, 10, "b")
	for _, r := range rest {
		eventually(t, fmt.Sprintf("member %d applied 40 entries", r.id), func() bool { return r.appliedCount() == 40 })
	}
	// One log: the same entries in the same order on both.
	rest[0].mu.Lock()
	rest[1].mu.Lock()
	if !slices.Equal(rest[0].applied, rest[1].applied) {
		t.Errorf("members applied different logs:\n%d: %q\n%d: %q", rest[0].id, rest[0].applied, rest[1].id, rest[1].applied)
	}
	rest[1].mu.Unlock()
	rest[0].mu.Unlock()
}
