package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// TestReplicatedCutOffLeaderAnswersNoRead: a leader cut off from the others
// still believes it leads until CheckQuorum deposes it, and its memory
// holds changes no other member has (an Add in flight that will never be
// committed). A read on it must not answer from that memory: Inspect,
// List and Stats are refused (ErrNotLeader, retry on any member), never
// answered with old or uncommitted state. A serializable read on a
// follower answers the committed state without the leader.
func TestReplicatedCutOffLeaderAnswersNoRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newRCluster(t)
	lead := c.leader(0)
	if _, _, err := lead.b.Add(ctx, "q", []string{"committed"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	c.isolate(lead)
	// An Add the cut-off leader takes into memory and can never commit.
	actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err := lead.b.Add(actx, "q", []string{"uncommitted"}, AddOptions{})
	acancel()
	if err == nil {
		t.Fatal("the cut-off leader acknowledged an Add")
	}
	if !lead.b.Leading() {
		t.Log("the cut-off leader stepped down before the reads: they are checked on a follower")
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	for _, read := range []struct {
		name string
		call func() error
	}{
		{"Inspect", func() error {
			v, err := lead.b.Inspect(rctx, "q", "uncommitted", ReadOptions{})
			if err == nil {
				t.Errorf("Inspect answered %v", v.State)
			}
			return err
		}},
		{"List", func() error {
			vs, _, err := lead.b.List(rctx, "q", 0, "", 10, ReadOptions{})
			if err == nil {
				t.Errorf("List answered %d items", len(vs))
			}
			return err
		}},
		{"Stats", func() error {
			st, err := lead.b.Stats(rctx, "q", ReadOptions{})
			if err == nil {
				t.Errorf("Stats answered %+v", st)
			}
			return err
		}},
	} {
		if err := read.call(); !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s on the cut-off leader: %v, want ErrNotLeader", read.name, err)
		}
	}

	next := c.leader(lead.id)
	for _, m := range c.members {
		if m == lead || m == next {
			continue
		}
		v, err := m.b.Inspect(ctx, "q", "committed", ReadOptions{Serializable: true})
		if err != nil || v.State != workqueue.Pending {
			t.Errorf("serializable Inspect on follower %d: %v %v, want the committed key pending", m.id, v.State, err)
		}
		if _, err := m.b.Inspect(ctx, "q", "committed", ReadOptions{}); !errors.Is(err, ErrNotLeader) {
			t.Errorf("linearizable Inspect on follower %d: %v, want ErrNotLeader (the server hands it to the leader)", m.id, err)
		}
	}
	if v, err := next.b.Inspect(ctx, "q", "uncommitted", ReadOptions{}); err != nil || v.State != workqueue.Absent {
		t.Errorf("the new leader's Inspect of the uncommitted key: %v %v, want absent", v.State, err)
	}
}

// TestReplicatedRefusalsChangedNothing drives every operation of the
// broker on a follower and on a leader cut off from the others, and wants
// each refused with ErrNotLeader (nothing changed: retry on any member) or,
// for a change that was in flight, replica.ErrLeadershipLost (its outcome
// is unknown): never another error, which the gRPC layer would answer as
// INTERNAL, and never an answer. The translation of those two to
// UNAVAILABLE with their reasons is the server's (TestToStatus).
func TestReplicatedRefusalsChangedNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newRCluster(t)
	lead := c.leader(0)
	if _, _, err := lead.b.Add(ctx, "q", keyNames("k", 4), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	// held is a live lease on the leader, taken before each cut, for the
	// operations that need one.
	var held workqueue.Grant
	holds := 0
	hold := func(b *Broker) {
		t.Helper()
		holds++
		key := fmt.Sprintf("h%d", holds)
		if _, _, err := b.Add(ctx, "q", []string{key}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
		grants, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 100, Duration: time.Minute})
		for _, g := range grants {
			if g.Key == key {
				held = g
				return
			}
		}
		t.Fatalf("Lease of h: %v %v", grants, err)
	}
	hold(lead.b)
	type op struct {
		name string
		call func(ctx context.Context, b *Broker) error
	}
	ops := []op{
		{"Add", func(ctx context.Context, b *Broker) error {
			_, _, err := b.Add(ctx, "q", []string{"new"}, AddOptions{})
			return err
		}},
		{"Lease", func(ctx context.Context, b *Broker) error {
			_, err := b.Lease(ctx, "q", LeaseOptions{Worker: "w", Max: 1, Duration: time.Minute})
			return err
		}},
		{"Ack", func(ctx context.Context, b *Broker) error {
			_, err := b.Ack(ctx, "q", nil, []AckItem{{Key: held.Key, Token: held.Token}})
			return err
		}},
		{"Extend", func(ctx context.Context, b *Broker) error {
			_, err := b.Extend(ctx, "q", nil, []AckItem{{Key: held.Key, Token: held.Token}}, time.Minute)
			return err
		}},
		{"Release", func(ctx context.Context, b *Broker) error {
			_, err := b.Release(ctx, "q", nil, []AckItem{{Key: held.Key, Token: held.Token}})
			return err
		}},
		{"Forget", func(ctx context.Context, b *Broker) error {
			_, err := b.Forget(ctx, "q", []string{"k003"})
			return err
		}},
		{"Inspect", func(ctx context.Context, b *Broker) error {
			_, err := b.Inspect(ctx, "q", "k000", ReadOptions{})
			return err
		}},
		{"List", func(ctx context.Context, b *Broker) error {
			_, _, err := b.List(ctx, "q", 0, "", 10, ReadOptions{})
			return err
		}},
		{"Stats", func(ctx context.Context, b *Broker) error {
			_, err := b.Stats(ctx, "", ReadOptions{})
			return err
		}},
	}
	refused := func(where string, err error, inFlight bool) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: answered, want a refusal", where)
		case errors.Is(err, ErrNotLeader):
		case inFlight && errors.Is(err, replica.ErrLeadershipLost):
		default:
			t.Errorf("%s: %v, want ErrNotLeader", where, err)
		}
	}
	var follower *rmember
	for _, m := range c.members {
		if m != lead {
			follower = m
		}
	}
	for _, o := range ops {
		refused("follower's "+o.name, o.call(ctx, follower.b), false)
	}
	// Each operation on a leader cut off just before it: it still believes
	// it leads until CheckQuorum deposes it, within an election timeout,
	// which ends every wait there; the deadline is a backstop.
	for _, o := range ops {
		c.heal()
		lead := c.leader(0)
		hold(lead.b)
		c.isolate(lead)
		octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
		refused("cut-off leader's "+o.name, o.call(octx, lead.b), true)
		ocancel()
	}
}
