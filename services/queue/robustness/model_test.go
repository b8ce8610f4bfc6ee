package robustness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// h builds a hand-written history: each op's times are given in
// milliseconds, an ambiguous one has ret -1.
type h struct{ ops []Op }

func (b *h) op(client int, call, ret int64, o Op) *h {
	o.Client, o.Call, o.Return = client, call*1e6, ret*1e6
	if o.Queue == "" {
		o.Queue = "q"
	}
	if o.Key == "" && o.Kind != KindLease && o.Kind != KindWorkLease {
		o.Key = "k"
	}
	if o.Outcome == "" {
		o.Outcome = OK
	}
	if ret < 0 {
		o.Outcome, o.Return = Ambiguous, call*1e6+1
	}
	o.Seq = len(b.ops)
	b.ops = append(b.ops, o)
	return b
}

func (b *h) add(c int, call, ret int64, queued bool) *h {
	return b.op(c, call, ret, Op{Kind: KindAdd, Queued: queued})
}

func (b *h) lease(c int, call, ret int64, token uint64) *h {
	return b.op(c, call, ret, Op{Kind: KindLease, Grants: []Grant{{Key: "k", Token: token}}})
}

func (b *h) ack(c int, call, ret int64, token uint64, kind, st string) *h {
	return b.op(c, call, ret, Op{Kind: KindAck, Token: token, AckKind: kind, Status: st})
}

func (b *h) inspect(c int, call, ret int64, state string, dirty bool) *h {
	return b.op(c, call, ret, Op{Kind: KindInspect, State: state, Dirty: dirty})
}

func linearizable(t *testing.T, ops []Op) bool {
	t.Helper()
	r := CheckLinearizable(ops, 10*time.Second)
	if r.Result == porcupine.Unknown {
		t.Fatal("porcupine timed out on a hand-written history")
	}
	if r.Result == porcupine.Illegal && len(r.Violations) == 0 {
		t.Fatal("an illegal history without an explanation")
	}
	for _, v := range r.Violations {
		t.Log(v)
	}
	return r.Result == porcupine.Ok
}

func TestModelHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *h
		want bool
	}{
		{"add lease ack inspect", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 5, 10, AckSuccess, StatusOK).inspect(1, 6, 7, StateAbsent, false), true},
		{"stale read: pending after an acked success", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 5, 10, AckSuccess, StatusOK).inspect(1, 6, 7, StatePending, false), false},
		{"concurrent read may see either", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 8, 10, AckSuccess, StatusOK).inspect(1, 5, 6, StateLeased, false).inspect(1, 6, 7, StateAbsent, false), true},
		{"read goes back in time", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 8, 10, AckSuccess, StatusOK).inspect(1, 5, 6, StateAbsent, false).inspect(1, 7, 8, StateLeased, false), false},
		{"a lease may lapse", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).inspect(1, 4, 5, StatePending, false).lease(1, 6, 7, 11), true},
		{"double lease: the first token acked after the second grant", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).lease(1, 4, 5, 11).ack(0, 6, 7, 10, AckSuccess, StatusOK), false},
		{"a lapsed token is LEASE_LOST", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).lease(1, 4, 5, 11).ack(0, 6, 7, 10, AckSuccess, StatusLeaseLost).ack(1, 8, 9, 11, AckSuccess, StatusOK), true},
		{"a live token may not be LEASE_LOST twice over", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 5, 10, AckSuccess, StatusLeaseLost).inspect(0, 6, 7, StateLeased, false), false},
		{"lease of an absent key", new(h).lease(0, 0, 1, 10), false},
		{"ambiguous add, seen later", new(h).add(0, 0, -1, false).inspect(1, 2, 3, StateAbsent, false).inspect(1, 4, 5, StatePending, false), true},
		{"ambiguous add, never seen", new(h).add(0, 0, -1, false).inspect(1, 2, 3, StateAbsent, false), true},
		{"ambiguous add, seen then gone", new(h).add(0, 0, -1, false).inspect(1, 2, 3, StatePending, false).inspect(1, 4, 5, StateAbsent, false), false},
		{"collapsed count: a second Add is collapsed", new(h).add(0, 0, 1, true).add(0, 2, 3, true), false},
		{"collapsed count: Add on pending", new(h).add(0, 0, 1, true).add(0, 2, 3, false), true},
		{"Add while leased marks it dirty and is queued", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).add(1, 4, 5, true).inspect(1, 6, 7, StateLeased, true).add(1, 8, 9, false), true},
		{"dirty: offered once more after success", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).add(1, 4, 5, true).ack(0, 6, 7, 10, AckSuccess, StatusOK).lease(0, 8, 9, 11).ack(0, 10, 11, 11, AckSuccess, StatusOK).inspect(1, 12, 13, StateAbsent, false), true},
		{"dirty: not offered twice more", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).add(1, 4, 5, true).ack(0, 6, 7, 10, AckSuccess, StatusOK).lease(0, 8, 9, 11).ack(0, 10, 11, 11, AckSuccess, StatusOK).lease(0, 12, 13, 12), false},
		{"dirty: acked success is pending, not absent", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).add(1, 4, 5, true).ack(0, 6, 7, 10, AckSuccess, StatusOK).inspect(1, 8, 9, StateAbsent, false), false},
		{"failure delays, then pending", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 5, 10, AckFailure, StatusOK).inspect(1, 6, 7, StateDelayed, false).lease(1, 8, 9, 11), true},
		{"terminal parks", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 5, 10, AckTerminal, StatusOK).inspect(1, 6, 7, StateParked, false).lease(1, 8, 9, 11), false},
		{"Add revives a parked key", new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).ack(0, 4, 5, 10, AckTerminal, StatusOK).add(1, 6, 7, true).lease(1, 8, 9, 11), true},
		{"Forget", new(h).add(0, 0, 1, true).op(0, 2, 3, Op{Kind: KindForget, Forgotten: 1}).op(0, 4, 5, Op{Kind: KindForget, Forgotten: 0}).inspect(1, 6, 7, StateAbsent, false), true},
		{"Forget of an absent key forgets nothing", new(h).op(0, 2, 3, Op{Kind: KindForget, Forgotten: 1}), false},
		{"ambiguous lease may hold any key", new(h).add(0, 0, 1, true).op(1, 2, -1, Op{Kind: KindLease}).inspect(0, 4, 5, StateLeased, false), true},
		{"no lease: leased is a phantom", new(h).add(0, 0, 1, true).inspect(0, 4, 5, StateLeased, false), false},
		{"stream success may come back", new(h).add(0, 0, 1, true).op(1, 2, 3, Op{Kind: KindWorkLease, Grants: []Grant{{Key: "k", Token: 10}}}).op(1, 4, 5, Op{Kind: KindWorkAck, Token: 10, AckKind: AckSuccess, Status: StatusOK}).inspect(0, 6, 7, StateAbsent, false).inspect(0, 8, 9, StatePending, false), true},
		{"unary success does not come back", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).ack(1, 4, 5, 10, AckSuccess, StatusOK).inspect(0, 6, 7, StateAbsent, false).inspect(0, 8, 9, StatePending, false), false},
		{"ambiguous ack: either", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).ack(1, 4, -1, 10, AckSuccess, "").inspect(0, 6, 7, StateLeased, false).inspect(0, 8, 9, StateAbsent, false), true},
		{"refused calls changed nothing", new(h).add(0, 0, 1, true).op(0, 2, 3, Op{Kind: KindForget, Outcome: Refused}).inspect(0, 4, 5, StatePending, false), true},
		{"extend of a live lease", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).op(1, 4, 5, Op{Kind: KindExtend, Token: 10, Status: StatusOK}).op(1, 6, 7, Op{Kind: KindExtend, Token: 9, Status: StatusOK}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := linearizable(t, tc.h.ops); got != tc.want {
				t.Errorf("linearizable %v, want %v", got, tc.want)
			}
		})
	}
}

// Keys are partitions of their own: a violation on one key is found
// among many linearizable others, and named.
func TestModelPartitionsByKey(t *testing.T) {
	b := new(h)
	for i := range 20 {
		k := fmt.Sprintf("k%d", i)
		b.op(i, int64(i), int64(i)+1, Op{Kind: KindAdd, Key: k, Queued: true})
	}
	b.op(0, 30, 31, Op{Kind: KindInspect, Key: "k7", State: StateDelayed})
	r := CheckLinearizable(b.ops, 10*time.Second)
	if r.Result != porcupine.Illegal || len(r.Violations) != 1 || !strings.Contains(r.Violations[0].What, `key "k7"`) {
		t.Fatalf("result %v, violations %v: want k7 alone", r.Result, r.Violations)
	}
}

func TestInvariants(t *testing.T) {
	t.Run("tokens decrease", func(t *testing.T) {
		v := CheckInvariants(new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).lease(0, 4, 5, 9).ops)
		if len(v) != 1 || !strings.Contains(v[0].What, "tokens must increase") {
			t.Fatalf("violations %v", v)
		}
	})
	t.Run("stale token accepted", func(t *testing.T) {
		v := CheckInvariants(new(h).add(0, 0, 1, true).lease(0, 2, 3, 10).lease(1, 4, 5, 11).ack(0, 6, 7, 10, AckSuccess, StatusOK).ops)
		if len(v) != 1 || !strings.Contains(v[0].What, "stale token") {
			t.Fatalf("violations %v", v)
		}
	})
	t.Run("concurrent grants and acks are fine", func(t *testing.T) {
		v := CheckInvariants(new(h).add(0, 0, 1, true).lease(0, 2, 5, 11).lease(1, 3, 4, 10).ack(1, 4, 7, 10, AckSuccess, StatusOK).ack(0, 6, 7, 11, AckSuccess, StatusLeaseLost).ops)
		if len(v) != 0 {
			t.Fatalf("violations %v", v)
		}
	})
	// The workload's stream records each work lease with the call of the
	// ack that freed its slot.
	stream := func(ackRet, leaseRet int64) []Op {
		return new(h).add(0, 0, 1, true).
			op(0, 2, 3, Op{Kind: KindWorkLease, Grants: []Grant{{Key: "k", Token: 10}}}).
			op(0, 4, ackRet, Op{Kind: KindWorkAck, Token: 10, AckKind: AckFailure, Status: StatusOK}).
			op(0, 4, leaseRet, Op{Kind: KindWorkLease, Grants: []Grant{{Key: "k", Token: 11}}}).ops
	}
	t.Run("work lease before the answer that freed its slot", func(t *testing.T) {
		v := CheckInvariants(stream(7, 6))
		if len(v) != 1 || !strings.Contains(v[0].What, "before the answer to the ack of k") || len(v[0].Ops) != 2 || v[0].Ops[0].Kind != KindWorkAck {
			t.Fatalf("violations %v", v)
		}
	})
	t.Run("work lease after the answer", func(t *testing.T) {
		if v := CheckInvariants(stream(5, 6)); len(v) != 0 {
			t.Fatalf("violations %v", v)
		}
	})
	t.Run("INTERNAL is outside the contract", func(t *testing.T) {
		_, desc := Classify(status.Error(codes.Internal, "boom"))
		v := CheckInvariants(new(h).op(0, 0, -1, Op{Kind: KindAck, Token: 1, AckKind: AckSuccess, Err: desc}).ops)
		if len(v) != 1 || v[0].Checker != "contract" {
			t.Fatalf("violations %v", v)
		}
	})
}

func TestSetChecker(t *testing.T) {
	set := func(b *h) *h {
		for i := range b.ops {
			b.ops[i].Queue = "set"
		}
		return b
	}
	for _, tc := range []struct {
		name                        string
		h                           *h
		lost, unexpected, duplicate int
	}{
		{"worked", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).ack(1, 4, 5, 10, AckSuccess, StatusOK), 0, 0, 0},
		{"still there at the drain", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).lease(9, 20, 21, 11), 0, 0, 0},
		{"lost add", new(h).add(0, 0, 1, true), 1, 0, 0},
		{"leased only before the Add began", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).add(0, 4, 5, true), 1, 0, 0},
		{"ambiguous add never seen is not lost", new(h).add(0, 0, -1, false), 0, 0, 0},
		{"unexpected", new(h).lease(1, 2, 3, 10), 0, 1, 0},
		{"duplicated after success", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).ack(1, 4, 5, 10, AckSuccess, StatusOK).lease(1, 6, 7, 11), 0, 0, 1},
		{"ambiguous success may not have landed", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).ack(1, 4, -1, 10, AckSuccess, "").lease(1, 6, 7, 11), 0, 0, 0},
		{"Added while leased: once more", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).add(1, 4, 5, true).ack(1, 6, 7, 10, AckSuccess, StatusOK).lease(1, 8, 9, 11).ack(1, 10, 11, 11, AckSuccess, StatusOK), 0, 0, 0},
		{"Added while leased: not twice more", new(h).add(0, 0, 1, true).lease(1, 2, 3, 10).add(1, 4, 5, true).ack(1, 6, 7, 10, AckSuccess, StatusOK).lease(1, 8, 9, 11).ack(1, 10, 11, 11, AckSuccess, StatusOK).lease(1, 12, 13, 12), 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckSet(set(tc.h).ops, "set")
			if len(r.Lost) != tc.lost || len(r.Unexpected) != tc.unexpected || len(r.Duplicated) != tc.duplicate {
				t.Errorf("lost %v unexpected %v duplicated %v, want %d %d %d", r.Lost, r.Unexpected, r.Duplicated, tc.lost, tc.unexpected, tc.duplicate)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	notLeader := queueclient.Refusal(codes.Unavailable, queueclient.ReasonNotLeader, "not the leader")
	lost := queueclient.Refusal(codes.Unavailable, queueclient.ReasonLeadershipLost, "moved")
	stopped := queueclient.Refusal(codes.Unavailable, queueclient.ReasonStopped, "stopped")
	for _, tc := range []struct {
		err  error
		want Outcome
	}{
		{nil, OK},
		{status.Error(codes.InvalidArgument, "bad"), Refused},
		{status.Error(codes.NotFound, "no"), Refused},
		{status.Error(codes.FailedPrecondition, "no"), Refused},
		{queueclient.Refusal(codes.ResourceExhausted, queueclient.ReasonNoSpace, "full"), Refused},
		{notLeader, Refused},
		{lost, Ambiguous},
		{stopped, Ambiguous},
		{status.Error(codes.Unavailable, "connection refused"), Ambiguous},
		{status.Error(codes.DeadlineExceeded, "late"), Ambiguous},
		{status.Error(codes.Canceled, "cancelled"), Ambiguous},
		{status.Error(codes.Internal, "boom"), Ambiguous},
		{fmt.Errorf("eof"), Ambiguous},
	} {
		if got, desc := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v (%s), want %v", tc.err, got, desc, tc.want)
		}
	}
}

// A read refused by a member that does not lead (the server's UNAVAILABLE
// NOT_LEADER, as a deposed leader now answers Inspect, List and Stats) is
// refused: nothing happened, so the model leaves it out, and it is no
// error outside the contract. INTERNAL, as a deposed leader's refusal
// used to come back, is one.
func TestNotLeaderReadIsRefused(t *testing.T) {
	notLeader := server.ToStatus(fmt.Errorf("%w: leadership changed during the call", broker.ErrNotLeader))
	outcome, desc := Classify(notLeader)
	if outcome != Refused || !strings.Contains(desc, queueclient.ReasonNotLeader) {
		t.Fatalf("Classify(%v) = %v (%s), want refused with %s", notLeader, outcome, desc, queueclient.ReasonNotLeader)
	}
	// An Inspect answered NOT_LEADER between an Add and an Inspect that
	// sees the key: what a refused read would have said (nothing) must
	// not count.
	b := new(h).add(0, 0, 1, true).op(1, 2, 3, Op{Kind: KindInspect, Outcome: Refused, Err: desc}).inspect(0, 4, 5, StatePending, false)
	if !linearizable(t, b.ops) {
		t.Error("a history with a refused Inspect is not linearizable")
	}
	if v := CheckInvariants(b.ops); len(v) != 0 {
		t.Errorf("a refused Inspect broke an invariant: %v", v)
	}
	_, internal := Classify(status.Error(codes.Internal, "replica: not the leader"))
	b = new(h).add(0, 0, 1, true).op(1, 2, -1, Op{Kind: KindInspect, Err: internal})
	if v := CheckInvariants(b.ops); len(v) != 1 || v[0].Checker != "contract" {
		t.Errorf("an INTERNAL answer: invariants say %v, want one contract violation", v)
	}
}
