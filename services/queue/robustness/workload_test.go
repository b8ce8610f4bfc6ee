package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The workloads' queues. lin and work share the model; set and kept are
// the set checker's: set's keys are leased and acked as they come, kept's
// are only Added, and stay until the run's final drain, so that an
// acknowledged Add lost at any fault is seen even if no worker was quick
// enough to lease it first.
const (
	linQueue  = "lin"
	workQueue = "work"
	setQueue  = "set"
	keptQueue = "kept"
	// preciousQueue is the two-disks attack's (TestScenarioTwoDisksLost).
	preciousQueue = "precious"
)

var (
	linKeys  = keys("k", 12)
	workKeys = keys("w", 8)
)

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// client is one recording client: it dials one member, or a list that it
// moves along when a call fails UNAVAILABLE. It never retries a call: a
// second try is a second operation.
type client struct {
	id      int
	h       *History
	names   []string
	qcs     []queuev1.QueueServiceClient
	conns   []*grpc.ClientConn
	cur     int
	rng     *rand.Rand
	held    []Grant // lin leases it holds
	timeout time.Duration
	quiet   *sync.RWMutex // the cluster's; nil for a fault's own client, which runs while the fault holds it
}

func (c *cluster) client(id int, h *History, members []int, seed uint64) *client {
	cl := &client{id: id, h: h, rng: rand.New(rand.NewPCG(seed, uint64(id))), timeout: time.Second, quiet: &c.quiet}
	for _, m := range members {
		cl.names = append(cl.names, c.procs[m].name)
		cl.qcs = append(cl.qcs, c.qcs[m])
		cl.conns = append(cl.conns, c.conns[m])
	}
	return cl
}

// do runs one call through the client's current member and records it.
// f fills op's outputs on success.
//
// A member whose connection is in TRANSIENT_FAILURE (down, or just
// restarted) is not called: gRPC would fail the call at once without
// sending it, and the suite would count it ambiguous, by its rule for
// connection errors; a flood of those only slows the checker. The client
// waits a moment and moves along its list instead, and the skipped call
// is not recorded (its Outcome is empty).
func (cl *client) do(ctx context.Context, op Op, extra time.Duration, f func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error) Op {
	if cl.conns[cl.cur].GetState() == connectivity.TransientFailure {
		cl.conns[cl.cur].Connect()
		cl.cur = (cl.cur + 1) % len(cl.qcs)
		time.Sleep(50 * time.Millisecond)
		return Op{}
	}
	op.Client = cl.id
	op.Member = cl.names[cl.cur]
	qc := cl.qcs[cl.cur]
	if cl.quiet != nil {
		cl.quiet.RLock()
	}
	cctx, cancel := context.WithTimeout(ctx, cl.timeout+extra)
	op.Call = cl.h.Now()
	err := f(cctx, qc, &op)
	op.Return = cl.h.Now()
	cancel()
	if cl.quiet != nil {
		cl.quiet.RUnlock()
	}
	op.Outcome, op.Err = Classify(err)
	if ctx.Err() != nil && err != nil && op.Outcome != Refused {
		op.Outcome = Ambiguous // the run's end cut it short
	}
	if status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
		cl.cur = (cl.cur + 1) % len(cl.qcs)
	}
	if op.Outcome != OK {
		op.Grants, op.Status, op.State, op.Queued, op.Forgotten, op.Dirty = nil, "", "", false, 0, false
	}
	cl.h.Record(op)
	if op.Outcome == Ambiguous {
		time.Sleep(time.Duration(20+cl.rng.IntN(30)) * time.Millisecond)
	}
	return op
}

func (cl *client) add(ctx context.Context, queue, key string, delay time.Duration) Op {
	return cl.do(ctx, Op{Kind: KindAdd, Queue: queue, Key: key, Delay: delay}, 0, func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error {
		req := &queuev1.AddRequest{Queue: queue, Keys: []string{key}, Source: fmt.Sprintf("c%d", cl.id)}
		if delay > 0 {
			req.Delay = durationpb.New(delay)
		}
		r, err := qc.Add(ctx, req)
		if err == nil {
			if r.GetQueued()+r.GetCollapsed() != 1 {
				return fmt.Errorf("add of one key answered queued %d collapsed %d", r.GetQueued(), r.GetCollapsed())
			}
			op.Queued = r.GetQueued() == 1
		}
		return err
	})
}

func (cl *client) lease(ctx context.Context, queue string, max uint32, wait, dur time.Duration) Op {
	return cl.do(ctx, Op{Kind: KindLease, Queue: queue}, wait, func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error {
		r, err := qc.Lease(ctx, &queuev1.LeaseRequest{Queue: queue, Worker: fmt.Sprintf("c%d", cl.id), MaxItems: max,
			LeaseDuration: durationpb.New(dur), Wait: durationpb.New(wait)})
		for _, l := range r.GetLeases() {
			op.Grants = append(op.Grants, Grant{Key: l.GetKey(), Token: l.GetToken()})
		}
		return err
	})
}

func ackOf(key string, token uint64, kind string, requeue time.Duration) *queuev1.Ack {
	a := &queuev1.Ack{Key: key, Token: token}
	switch kind {
	case AckSuccess:
		a.Outcome = &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}
	case AckFailure:
		a.Outcome = &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: "robustness: failure"}}
	case AckRequeue:
		a.Outcome = &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(requeue)}
	case AckTerminal:
		a.Outcome = &queuev1.Ack_Terminal{Terminal: &queuev1.AckTerminal{Error: "robustness: terminal"}}
	}
	return a
}

func ackStatus(s queuev1.AckStatus) string {
	switch s {
	case queuev1.AckStatus_ACK_STATUS_OK:
		return StatusOK
	case queuev1.AckStatus_ACK_STATUS_LEASE_LOST:
		return StatusLeaseLost
	}
	return s.String()
}

func (cl *client) ack(ctx context.Context, queue string, g Grant, kind string) Op {
	requeue := time.Duration(1+cl.rng.IntN(200)) * time.Millisecond
	return cl.do(ctx, Op{Kind: KindAck, Queue: queue, Key: g.Key, Token: g.Token, AckKind: kind}, 0, func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error {
		r, err := qc.Ack(ctx, &queuev1.AckRequest{Queue: queue, Acks: []*queuev1.Ack{ackOf(g.Key, g.Token, kind, requeue)}})
		if err == nil {
			if len(r.GetResults()) != 1 || r.GetResults()[0].GetKey() != g.Key {
				return fmt.Errorf("ack of one key answered %v", r.GetResults())
			}
			op.Status = ackStatus(r.GetResults()[0].GetStatus())
		}
		return err
	})
}

// ackAll acks gs with success in one call and records one operation per
// key, each with the call's times.
func (cl *client) ackAll(ctx context.Context, queue string, gs []Grant) error {
	var acks []*queuev1.Ack
	for _, g := range gs {
		acks = append(acks, ackOf(g.Key, g.Token, AckSuccess, 0))
	}
	qc := cl.qcs[cl.cur]
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl.quiet.RLock()
	call := cl.h.Now()
	r, err := qc.Ack(cctx, &queuev1.AckRequest{Queue: queue, Acks: acks})
	ret := cl.h.Now()
	cl.quiet.RUnlock()
	outcome, desc := Classify(err)
	for i, g := range gs {
		op := Op{Client: cl.id, Member: cl.names[cl.cur], Kind: KindAck, Queue: queue, Key: g.Key, Token: g.Token, AckKind: AckSuccess, Call: call, Return: ret, Outcome: outcome, Err: desc}
		if err == nil {
			op.Status = ackStatus(r.GetResults()[i].GetStatus())
		}
		cl.h.Record(op)
	}
	return err
}

func (cl *client) extend(ctx context.Context, queue string, g Grant) Op {
	return cl.do(ctx, Op{Kind: KindExtend, Queue: queue, Key: g.Key, Token: g.Token}, 0, func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error {
		r, err := qc.Extend(ctx, &queuev1.ExtendRequest{Queue: queue, Leases: []*queuev1.LeaseRef{{Key: g.Key, Token: g.Token}}, LeaseDuration: durationpb.New(time.Second)})
		if err == nil {
			if len(r.GetResults()) != 1 {
				return fmt.Errorf("extend of one lease answered %v", r.GetResults())
			}
			op.Status = ackStatus(r.GetResults()[0].GetStatus())
		}
		return err
	})
}

func (cl *client) forget(ctx context.Context, queue, key string) Op {
	return cl.do(ctx, Op{Kind: KindForget, Queue: queue, Key: key}, 0, func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error {
		r, err := qc.Forget(ctx, &queuev1.ForgetRequest{Queue: queue, Keys: []string{key}})
		op.Forgotten = int(r.GetForgotten())
		return err
	})
}

func stateName(s queuev1.ItemState) string {
	switch s {
	case queuev1.ItemState_ITEM_STATE_ABSENT:
		return StateAbsent
	case queuev1.ItemState_ITEM_STATE_PENDING:
		return StatePending
	case queuev1.ItemState_ITEM_STATE_DELAYED:
		return StateDelayed
	case queuev1.ItemState_ITEM_STATE_LEASED:
		return StateLeased
	case queuev1.ItemState_ITEM_STATE_PARKED:
		return StateParked
	}
	return s.String()
}

func (cl *client) inspect(ctx context.Context, queue, key string) Op {
	return cl.do(ctx, Op{Kind: KindInspect, Queue: queue, Key: key}, 0, func(ctx context.Context, qc queuev1.QueueServiceClient, op *Op) error {
		r, err := qc.Inspect(ctx, &queuev1.InspectRequest{Queue: queue, Key: key})
		op.State, op.Dirty = stateName(r.GetItem().GetState()), r.GetItem().GetDirty()
		return err
	})
}

func (cl *client) pick(keys []string) string { return keys[cl.rng.IntN(len(keys))] }

func (cl *client) pause() { time.Sleep(time.Duration(2+cl.rng.IntN(8)) * time.Millisecond) }

// runLin is a client of the lin queue: every unary call on a small key
// space, so calls conflict, and now and then an Add or Inspect of the
// work queue's keys.
func (cl *client) runLin(ctx context.Context) {
	for ctx.Err() == nil {
		r := cl.rng.IntN(100)
		if len(cl.held) >= 3 && r < 45 {
			r = 45 + cl.rng.IntN(20) // hold few leases: ack or extend
		}
		switch {
		case r < 25:
			var delay time.Duration
			if cl.rng.IntN(4) == 0 {
				delay = time.Duration(20+cl.rng.IntN(280)) * time.Millisecond
			}
			cl.add(ctx, linQueue, cl.pick(linKeys), delay)
		case r < 45:
			var wait time.Duration
			if cl.rng.IntN(3) == 0 {
				wait = time.Duration(50+cl.rng.IntN(250)) * time.Millisecond
			}
			op := cl.lease(ctx, linQueue, uint32(1+cl.rng.IntN(3)), wait, time.Duration(500+cl.rng.IntN(1500))*time.Millisecond)
			cl.held = append(cl.held, op.Grants...)
		case r < 58:
			if len(cl.held) == 0 {
				continue
			}
			i := cl.rng.IntN(len(cl.held))
			g := cl.held[i]
			cl.held = append(cl.held[:i], cl.held[i+1:]...)
			kind := AckSuccess
			switch x := cl.rng.IntN(20); {
			case x < 3:
				kind = AckFailure
			case x < 6:
				kind = AckRequeue
			case x < 8:
				kind = AckTerminal
			}
			cl.ack(ctx, linQueue, g, kind)
		case r < 65:
			if len(cl.held) == 0 {
				continue
			}
			cl.extend(ctx, linQueue, cl.held[cl.rng.IntN(len(cl.held))])
		case r < 70:
			cl.forget(ctx, linQueue, cl.pick(linKeys))
		case r < 88:
			cl.inspect(ctx, linQueue, cl.pick(linKeys))
		case r < 95:
			cl.add(ctx, workQueue, cl.pick(workKeys), 0)
		default:
			cl.inspect(ctx, workQueue, cl.pick(workKeys))
		}
		cl.pause()
	}
}

// runWork is a worker on the work stream of the work queue: it opens a
// stream (max_in_flight 1), acks each pushed lease, and reopens the
// stream after a few seconds or when it breaks. A lease pushed while the
// slot was free began when the slot was freed (the stream's open, or the
// send of the ack that freed it); a broken stream may have granted a
// lease it never delivered, recorded as an ambiguous work lease.
func (cl *client) runWork(ctx context.Context) {
	for ctx.Err() == nil {
		cl.stream(ctx)
		cl.cur = (cl.cur + 1) % len(cl.qcs)
		time.Sleep(time.Duration(20+cl.rng.IntN(80)) * time.Millisecond)
	}
}

func (cl *client) stream(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, time.Duration(2000+cl.rng.IntN(4000))*time.Millisecond)
	defer cancel()
	member := cl.names[cl.cur]
	freed := cl.h.Now()
	s, err := cl.qcs[cl.cur].Work(sctx)
	broken := func(err error) {
		op := Op{Client: cl.id, Member: member, Kind: KindWorkLease, Queue: workQueue, Call: freed, Return: cl.h.Now(), Outcome: Ambiguous}
		_, op.Err = Classify(err)
		cl.h.Record(op)
	}
	if err != nil {
		broken(err)
		return
	}
	if err := s.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: workQueue, Worker: fmt.Sprintf("c%d", cl.id), MaxInFlight: 1, LeaseDuration: durationpb.New(time.Second)}}}); err != nil {
		broken(err)
		return
	}
	type recv struct {
		m   *queuev1.WorkResponse
		err error
	}
	msgs := make(chan recv, 4)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			m, err := s.Recv()
			msgs <- recv{m, err}
			if err != nil {
				return
			}
		}
	})
	defer wg.Wait()
	// Acks sent and not answered, by key, oldest first. docs/design.md
	// holds a lease until its ack is answered, so with max_in_flight 1 the
	// answer comes before the next lease (CheckInvariants holds the queue
	// to it: each lease is recorded with the call of the ack that freed
	// its slot). The worker reads either order all the same, each answer
	// going to the oldest unanswered ack of its key, so that a queue that
	// broke it is reported by the checker, not misread here.
	pending := map[string][]*Op{}
	// Each ack sent holds the cluster's quiet shared until its answer (or
	// the stream's end); a re-Add, which takes it too, is made only while
	// none is held, since a shared lock taken twice can deadlock against
	// a fault waiting for it.
	held := 0
	defer func() {
		for ; held > 0; held-- {
			cl.quiet.RUnlock()
		}
	}()
	for {
		r := <-msgs
		if r.err != nil {
			for _, ops := range pending {
				for _, op := range ops {
					op.Return, op.Outcome = cl.h.Now(), Ambiguous
					_, op.Err = Classify(r.err)
					cl.h.Record(*op)
				}
			}
			if errors.Is(r.err, io.EOF) {
				r.err = errors.New("stream ended")
			}
			broken(r.err)
			return
		}
		switch m := r.m.GetResponse().(type) {
		case *queuev1.WorkResponse_Lease:
			g := Grant{Key: m.Lease.GetKey(), Token: m.Lease.GetToken()}
			cl.h.Record(Op{Client: cl.id, Member: member, Kind: KindWorkLease, Queue: workQueue, Call: freed, Return: cl.h.Now(), Outcome: OK, Grants: []Grant{g}})
			time.Sleep(time.Duration(cl.rng.IntN(20)) * time.Millisecond)
			if cl.rng.IntN(6) == 0 && held == 0 {
				cl.add(ctx, workQueue, g.Key, 0) // announced while leased: dirty
			}
			kind := AckSuccess
			switch x := cl.rng.IntN(10); {
			case x < 2:
				kind = AckFailure
			case x < 3:
				kind = AckRequeue
			}
			op := &Op{Client: cl.id, Member: member, Kind: KindWorkAck, Queue: workQueue, Key: g.Key, Token: g.Token, AckKind: kind}
			op.Call = cl.h.Now()
			freed = op.Call
			pending[g.Key] = append(pending[g.Key], op)
			cl.quiet.RLock()
			held++
			// A failed Send is the stream's end, which Recv reports.
			_ = s.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Ack{Ack: ackOf(g.Key, g.Token, kind, time.Duration(1+cl.rng.IntN(100))*time.Millisecond)}})
		case *queuev1.WorkResponse_AckResult:
			k := m.AckResult.GetKey()
			if len(pending[k]) == 0 {
				cl.h.Record(Op{Client: cl.id, Member: member, Kind: KindWorkAck, Queue: workQueue, Key: k, Call: cl.h.Now(), Return: cl.h.Now(), Outcome: Ambiguous, Err: "an ack result for no ack sent"})
				continue
			}
			op := pending[k][0]
			pending[k] = pending[k][1:]
			if held > 0 {
				held--
				cl.quiet.RUnlock()
			}
			op.Return, op.Outcome, op.Status = cl.h.Now(), OK, ackStatus(m.AckResult.GetStatus())
			cl.h.Record(*op)
		}
	}
}

// setLoad is the set checker's workload: an adder of unique keys and a
// worker that leases them, acks each with success, and re-Adds one in
// ten while it holds it (which must offer it exactly once more).
type setLoad struct {
	next, nextKept atomic.Int64
}

func (sl *setLoad) runAdder(ctx context.Context, cl *client) {
	for ctx.Err() == nil {
		k := fmt.Sprintf("s%06d", sl.next.Add(1))
		cl.add(ctx, setQueue, k, 0)
		cl.pause()
	}
}

// runKeptAdder Adds unique keys to the kept queue, which nobody leases
// before the final drain.
func (sl *setLoad) runKeptAdder(ctx context.Context, cl *client) {
	for ctx.Err() == nil {
		k := fmt.Sprintf("a%06d", sl.nextKept.Add(1))
		cl.add(ctx, keptQueue, k, 0)
		cl.pause()
	}
}

func (sl *setLoad) runWorker(ctx context.Context, cl *client) {
	for ctx.Err() == nil {
		op := cl.lease(ctx, setQueue, 5, 100*time.Millisecond, 2*time.Second)
		for _, g := range op.Grants {
			if cl.rng.IntN(10) == 0 {
				cl.add(ctx, setQueue, g.Key, 0)
			}
			cl.ack(ctx, setQueue, g, AckSuccess)
		}
		cl.pause()
	}
}
