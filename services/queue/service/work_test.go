package service_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The work stream (QueueService Work), through the Go client against a real
// queue service.

// openWork opens a stream on queue holding at most max leases.
func openWork(t *testing.T, ctx context.Context, h *harness, queue string, max int) *queueclient.Stream {
	t.Helper()
	s, err := h.c.Work(ctx, queue, queueclient.WorkOptions{Worker: "w-" + t.Name(), MaxInFlight: max})
	if err != nil {
		t.Fatalf("open work: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// recvLease receives the stream's next message, which must be a lease.
func recvLease(t *testing.T, s *queueclient.Stream) queueclient.Lease {
	t.Helper()
	ev, err := s.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	if ev.Lease == nil {
		t.Fatalf("recv: %+v, want a lease", ev)
	}
	return *ev.Lease
}

// recvAck receives the stream's next message, which must answer an ack.
func recvAck(t *testing.T, s *queueclient.Stream) queueclient.Result {
	t.Helper()
	ev, err := s.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	if ev.Ack == nil {
		t.Fatalf("recv: %+v, want an ack result", ev)
	}
	return *ev.Ack
}

func inspect(t *testing.T, h *harness, queue, key string) *queuev1.Item {
	t.Helper()
	it, err := h.c.Inspect(ctxT(t), queue, key)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// waitFor polls cond every 10 ms until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkHoldsMaxInFlight: the stream is pushed max_in_flight leases and
// no more, so a unary Lease beside it gets every other key; an answered ack
// frees one slot, which the next ready key fills at once.
func TestWorkHoldsMaxInFlight(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "flow"
	if _, err := h.c.Add(ctx, q, keysN("k", 10), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openWork(t, ctx, h, q, 3)
	var held []queueclient.Lease
	for range 3 {
		held = append(held, recvLease(t, s))
	}
	// Leases are pushed in the queue's order.
	for i, l := range held {
		if want := keysN("k", 10)[i]; l.Key != want {
			t.Fatalf("lease %d is %s, want %s", i, l.Key, want)
		}
	}
	rest, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "unary", MaxItems: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 7 {
		t.Fatalf("unary Lease beside a stream holding 3 of 10 got %d keys, want 7", len(rest))
	}
	if err := s.Ack(queueclient.Ack{Key: held[0].Key, Token: held[0].Token, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if r := recvAck(t, s); r.Key != held[0].Key || r.Status != queueclient.OK {
		t.Fatalf("ack answered %+v", r)
	}
	if _, err := h.c.Add(ctx, q, []string{"new"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if l := recvLease(t, s); l.Key != "new" {
		t.Fatalf("the freed slot got %s, want new", l.Key)
	}
	if st := snap(t, h, q).stats; st.GetLeased() != 3+7 || st.GetPending() != 0 {
		t.Fatalf("stats %v: want 10 leased (the stream's 3, unary's 7), none pending", st)
	}
}

// TestWorkDirtyKeyOnceAfterAck: a key announced while a stream holds it is
// pushed again exactly once, after its ack, with a new token.
func TestWorkDirtyKeyOnceAfterAck(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "dirty"
	if _, err := h.c.Add(ctx, q, []string{"k"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openWork(t, ctx, h, q, 5)
	l := recvLease(t, s)
	for range 3 { // announced three times while held: one more reconcile
		if _, err := h.c.Add(ctx, q, []string{"k"}, queueclient.AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if it := inspect(t, h, q, "k"); it.GetState() != queuev1.ItemState_ITEM_STATE_LEASED || !it.GetDirty() {
		t.Fatalf("k is %v dirty=%v, want leased and dirty", it.GetState(), it.GetDirty())
	}
	if err := s.Ack(queueclient.Ack{Key: "k", Token: l.Token, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	var again *queueclient.Lease
	for again == nil {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Ack != nil && ev.Ack.Status != queueclient.OK:
			t.Fatalf("ack answered %+v", ev.Ack)
		case ev.Lease != nil:
			again = ev.Lease
		}
	}
	if again.Key != "k" || again.Token == l.Token {
		t.Fatalf("pushed again %+v, want k under a new token", again)
	}
	if err := s.Ack(queueclient.Ack{Key: "k", Token: again.Token, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if r := recvAck(t, s); r.Status != queueclient.OK {
		t.Fatalf("second ack answered %+v", r)
	}
	waitFor(t, "k absent after its second ack", func() bool {
		return inspect(t, h, q, "k").GetState() == queuev1.ItemState_ITEM_STATE_ABSENT
	})
	if st := snap(t, h, q).stats; st.GetLeasesTotal() != 2 {
		t.Fatalf("k was leased %d times, want 2", st.GetLeasesTotal())
	}
}

// TestWorkCutStreamHandsBack: a stream that ends while it holds a lease
// hands the key back at once (attempts + 1, "work stream ended"), and
// another worker's stream gets it, long before the lease would lapse.
func TestWorkCutStreamHandsBack(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "cut"
	if _, err := h.c.Add(ctx, q, []string{"k"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := h.c.Work(ctx, q, queueclient.WorkOptions{Worker: "first", MaxInFlight: 1, LeaseDuration: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l := recvLease(t, first)
	second := openWork(t, ctx, h, q, 1)
	first.Close() // the worker goes away mid-lease
	got := recvLease(t, second)
	if got.Key != "k" || got.Token == l.Token || got.Attempt != 1 {
		t.Fatalf("the second stream got %+v, want k under a new token, attempt 1", got)
	}
	it := inspect(t, h, q, "k")
	if it.GetLastError() != "work stream ended" || it.GetWorker() != "w-"+t.Name() {
		t.Fatalf("k: last_error %q worker %q", it.GetLastError(), it.GetWorker())
	}
	// The first stream's token is fenced.
	res, err := h.c.Ack(ctx, q, []queueclient.Ack{{Key: "k", Token: l.Token, Outcome: queueclient.Success()}})
	if err != nil || res[0].Status != queueclient.LeaseLost {
		t.Fatalf("ack with the cut stream's token: %v %v, want LEASE_LOST", res, err)
	}
	if st := snap(t, h, q).stats; st.GetReleasesTotal() != 1 || st.GetLeaseExpirationsTotal() != 0 {
		t.Fatalf("stats %v: want one release, no expiry", st)
	}
}

// TestWorkAndUnaryNeverShareAKey: a stream and unary Lease calls drain one
// queue at once; every key is handed out exactly once (no key is ever held
// by both), and every ack lands.
func TestWorkAndUnaryNeverShareAKey(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q, n = "share", 2000
	keys := keysN("k", n)
	if _, err := h.c.Add(ctx, q, keys, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(k string) {
		mu.Lock()
		seen[k]++
		mu.Unlock()
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}
	s := openWork(t, ctx, h, q, 16)
	// Whichever side sees the last key asks the stream to drain: the stream
	// then answers its outstanding acks and ends, so the loop below never
	// waits on a lease that the unary side took.
	var drain sync.Once
	drained := func() {
		drain.Do(func() {
			if err := s.Drain(); err != nil {
				t.Error(err)
			}
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer drained()
		for !done() {
			ls, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "unary", MaxItems: 7, Wait: 50 * time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			acks := make([]queueclient.Ack, len(ls))
			for i, l := range ls {
				note(l.Key)
				acks[i] = queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()}
			}
			if len(acks) > 0 {
				res, err := h.c.Ack(ctx, q, acks)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range res {
					if r.Status != queueclient.OK {
						t.Errorf("unary ack of %s: %v", r.Key, r.Status)
					}
				}
			}
		}
	})
	acked := 0
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Lease != nil:
			note(ev.Lease.Key)
			if err := s.Ack(queueclient.Ack{Key: ev.Lease.Key, Token: ev.Lease.Token, Outcome: queueclient.Success()}); err != nil {
				t.Fatal(err)
			}
			if done() {
				drained()
			}
		case ev.Ack != nil:
			if ev.Ack.Status != queueclient.OK {
				t.Fatalf("stream ack of %s: %v", ev.Ack.Key, ev.Ack.Status)
			}
			acked++
		}
	}
	wg.Wait()
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%s handed out %d times", k, c)
		}
	}
	if acked == 0 {
		t.Error("the stream acked nothing: the test did not exercise both")
	}
	waitFor(t, "the queue empty", func() bool {
		st := snap(t, h, q).stats
		return st.GetPending()+st.GetLeased() == 0
	})
}

// TestWorkFencing: acks and extends on a stream answer to the token alone,
// as unary ones do: a wrong token is LEASE_LOST and changes nothing.
func TestWorkFencing(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "fence"
	if _, err := h.c.Add(ctx, q, []string{"k"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openWork(t, ctx, h, q, 1)
	l := recvLease(t, s)
	if err := s.Ack(queueclient.Ack{Key: "k", Token: l.Token + 1, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if r := recvAck(t, s); r.Status != queueclient.LeaseLost {
		t.Fatalf("ack with a wrong token answered %v, want LEASE_LOST", r.Status)
	}
	if err := s.Extend(queueclient.LeaseRef{Key: "k", Token: l.Token + 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.Extend == nil || ev.Extend.Status != queueclient.LeaseLost {
		t.Fatalf("extend with a wrong token: %+v %v, want LEASE_LOST", ev, err)
	}
	if err := s.Extend(queueclient.LeaseRef{Key: "k", Token: l.Token}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ev, err = s.Recv()
	if err != nil || ev.Extend == nil || ev.Extend.Status != queueclient.OK || time.Until(ev.Extend.ExpiresAt) < 50*time.Second {
		t.Fatalf("extend with the lease's token: %+v %v, want OK a minute out", ev, err)
	}
	if it := inspect(t, h, q, "k"); it.GetState() != queuev1.ItemState_ITEM_STATE_LEASED || it.GetAttempts() != 0 {
		t.Fatalf("k is %v with %d attempts: the wrong token changed it", it.GetState(), it.GetAttempts())
	}
}

// TestWorkRefusals: a stream that does not open with a valid open, or
// sends a bad message once open, ends with INVALID_ARGUMENT; messages
// before the bad one were applied, it changed nothing.
func TestWorkRefusals(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "refuse"
	for name, o := range map[string]queueclient.WorkOptions{
		"queue name":    {MaxInFlight: 1},
		"max_in_flight": {MaxInFlight: limits.MaxBatch + 1},
		"worker":        {Worker: strings.Repeat("w", limits.MaxNameBytes+1)},
		"lease":         {LeaseDuration: limits.MaxLease + time.Second},
	} {
		queue := q
		if name == "queue name" {
			queue = "Not_A_Label"
		}
		if _, err := h.c.Work(ctx, queue, o); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), strings.Fields(name)[0]) {
			t.Errorf("%s: open answered %v, want INVALID_ARGUMENT naming it", name, err)
		}
	}
	// A first message that is not open.
	ws, err := h.raw.Work(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Drain{Drain: &queuev1.WorkDrain{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("drain before open: %v, want INVALID_ARGUMENT", err)
	}
	// An ack without an outcome after a good one.
	if _, err := h.c.Add(ctx, q, []string{"a", "b"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	ws, err = h.raw.Work(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *queuev1.WorkRequest) {
		t.Helper()
		if err := ws.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: q, MaxInFlight: 2}}})
	var leases []*queuev1.Lease
	for len(leases) < 2 {
		m, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, m.GetLease())
	}
	send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Ack{Ack: &queuev1.Ack{Key: leases[0].GetKey(), Token: leases[0].GetToken(),
		Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
	send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Ack{Ack: &queuev1.Ack{Key: leases[1].GetKey(), Token: leases[1].GetToken()}}})
	for {
		m, err := ws.Recv()
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no outcome") {
				t.Fatalf("an ack without an outcome ended the stream with %v, want INVALID_ARGUMENT", err)
			}
			break
		}
		if r := m.GetAckResult(); r.GetKey() != leases[0].GetKey() || r.GetStatus() != queuev1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("unexpected %v", m)
		}
	}
	// The good ack landed; the bad one changed nothing, and the stream's
	// end handed its lease back.
	if it := inspect(t, h, q, leases[0].GetKey()); it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Errorf("%s is %v after its ack", leases[0].GetKey(), it.GetState())
	}
	waitFor(t, "the refused ack's lease handed back", func() bool {
		it := inspect(t, h, q, leases[1].GetKey())
		return it.GetState() == queuev1.ItemState_ITEM_STATE_PENDING && it.GetLastError() == "work stream ended"
	})
}

// TestWorkDrain: after drain the stream is pushed nothing more, even with
// keys ready, and ends with OK once its leases are answered.
func TestWorkDrain(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "drain"
	if _, err := h.c.Add(ctx, q, keysN("k", 5), queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openWork(t, ctx, h, q, 2)
	held := []queueclient.Lease{recvLease(t, s), recvLease(t, s)}
	if err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	// One success, answered once applied, and one failure, answered once
	// durable: the stream ends after both answers, not before the second.
	if err := s.Ack(queueclient.Ack{Key: held[0].Key, Token: held[0].Token, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(queueclient.Ack{Key: held[1].Key, Token: held[1].Token, Outcome: queueclient.Failure("boom")}); err != nil {
		t.Fatal(err)
	}
	var acks []string
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the drained stream ended with %v, want OK", err)
		}
		if ev.Lease != nil {
			t.Fatalf("pushed %s after drain", ev.Lease.Key)
		}
		acks = append(acks, ev.Ack.Key)
	}
	slices.Sort(acks)
	if !slices.Equal(acks, []string{held[0].Key, held[1].Key}) {
		t.Fatalf("answered %v, want both acks", acks)
	}
	// The failed key is delayed by its backoff (5 ms by default), and
	// may be pending again by the time Stats answers.
	if st := snap(t, h, q).stats; st.GetPending()+st.GetDelayed() != 4 || st.GetLeased() != 0 || st.GetDelayed() > 1 {
		t.Fatalf("stats %v: want the other 3 pending and the failed one delayed or pending", st)
	}
	if it := inspect(t, h, q, held[1].Key); it.GetLastError() != "boom" || it.GetAttempts() != 1 {
		t.Fatalf("the failed key after drain: %v, want its failure recorded", it)
	}
}

// TestWorkEndsWhenTheQueueStops: a queue that shuts down ends an idle
// stream with UNAVAILABLE at once, so its worker opens another elsewhere;
// the graceful stop does not wait for it.
func TestWorkEndsWhenTheQueueStops(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	s := openWork(t, ctx, h, "idle", 4)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Recv()
		errc <- err
	}()
	took, err := h.stop()
	if err != nil {
		t.Fatal(err)
	}
	if took > time.Second {
		t.Errorf("the stop took %v with an idle stream open (grace 2 s)", took)
	}
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Fatalf("the stream ended with %v, want UNAVAILABLE", err)
	}
}

// TestLeasesCarryTheRevision: every lease, unary or streamed, carries the
// highest revision announced to its queue (AddRequest.revision), which a
// lower one does not lower; another queue's is its own; a negative one is
// refused and stores nothing.
func TestLeasesCarryTheRevision(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	add := func(queue, key string, rev int64) error {
		_, err := h.raw.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{key}, Revision: rev})
		return err
	}
	for _, a := range []struct {
		queue, key string
		rev        int64
	}{{"revs", "a", 40}, {"revs", "b", 12}, {"other", "o", 3}} {
		if err := add(a.queue, a.key, a.rev); err != nil {
			t.Fatal(err)
		}
	}
	if err := add("revs", "bad", -1); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a negative revision: %v, want INVALID_ARGUMENT", err)
	}
	if it := inspect(t, h, "revs", "bad"); it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Fatalf("the refused Add stored its key: %v", it)
	}
	ls, err := h.c.Lease(ctx, "revs", queueclient.LeaseOptions{MaxItems: 1})
	if err != nil || len(ls) != 1 || ls[0].MinRevision != 40 {
		t.Fatalf("unary lease %+v %v, want min_revision 40", ls, err)
	}
	s := openWork(t, ctx, h, "revs", 1)
	if l := recvLease(t, s); l.Key != "b" || l.MinRevision != 40 {
		t.Fatalf("streamed lease %+v, want b at min_revision 40", l)
	}
	if ls, err := h.c.Lease(ctx, "other", queueclient.LeaseOptions{}); err != nil || len(ls) != 1 || ls[0].MinRevision != 3 {
		t.Fatalf("the other queue's lease %+v %v, want min_revision 3", ls, err)
	}
}

// TestWorkCloseSend: a worker that closes its side after sending acks has
// them applied (answered or not), the leases it still holds handed back,
// and its stream ended with OK.
func TestWorkCloseSend(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "closesend"
	if _, err := h.c.Add(ctx, q, []string{"a", "b"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	s := openWork(t, ctx, h, q, 2)
	a, b := recvLease(t, s), recvLease(t, s)
	if err := s.Ack(queueclient.Ack{Key: a.Key, Token: a.Token, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the stream closed by its worker ended with %v, want OK", err)
		}
	}
	if it := inspect(t, h, q, a.Key); it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Errorf("%s, acked before the close, is %v", a.Key, it.GetState())
	}
	if it := inspect(t, h, q, b.Key); it.GetState() != queuev1.ItemState_ITEM_STATE_PENDING || it.GetLastError() != "work stream ended" {
		t.Errorf("%s, held at the close, is %v (%q), want handed back", b.Key, it.GetState(), it.GetLastError())
	}
}
