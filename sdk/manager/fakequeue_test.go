package manager

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeQueue is a small in-memory QueueService with the contract's lease
// semantics (dirty, fencing tokens, expiry, backoff), served over real gRPC so
// the manager is tested at its network boundary, with assertions on the
// calls the manager makes (batching, heartbeats) that the real queue does
// not show; the service's tests run the manager against the real queue.
type fakeQueue struct {
	queuev1.UnimplementedQueueServiceServer

	mu        sync.Mutex
	items     map[string]*fakeItem
	order     []string // pending keys, FIFO
	nextToken uint64
	backoff   time.Duration

	leaseCalls, ackCalls, extendCalls int
	maxAcksPerCall                    int
	acks                              []*queuev1.Ack // accepted acks, in order
	refused                           int            // acks refused as LEASE_LOST
	// refuseLeases, if set, answers every Lease (as a queue at a limit
	// does).
	refuseLeases error
}

type fakeItem struct {
	state     queuev1.ItemState
	dirty     bool
	attempts  uint32
	lastError string
	token     uint64
	expires   time.Time
	notBefore time.Time
}

func startFakeQueue(t *testing.T) (*fakeQueue, *queueclient.Client) {
	t.Helper()
	f := &fakeQueue{items: map[string]*fakeItem{}, backoff: 5 * time.Millisecond}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(s, f)
	go s.Serve(lis)
	c, err := queueclient.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Stop() })
	return f, c
}

// tick moves due delayed keys to pending and expired leases back to pending.
// Called with mu held.
func (f *fakeQueue) tick(now time.Time) {
	for k, it := range f.items {
		switch {
		case it.state == queuev1.ItemState_ITEM_STATE_DELAYED && !now.Before(it.notBefore):
			it.state = queuev1.ItemState_ITEM_STATE_PENDING
			f.order = append(f.order, k)
		case it.state == queuev1.ItemState_ITEM_STATE_LEASED && now.After(it.expires):
			it.state, it.dirty, it.lastError = queuev1.ItemState_ITEM_STATE_PENDING, false, "lease expired"
			it.attempts++
			f.order = append(f.order, k)
		}
	}
}

func (f *fakeQueue) Add(_ context.Context, req *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &queuev1.AddResponse{}
	for _, k := range req.GetKeys() {
		it := f.items[k]
		switch {
		case it == nil:
			f.items[k] = &fakeItem{state: queuev1.ItemState_ITEM_STATE_PENDING}
			f.order = append(f.order, k)
			resp.Queued++
		case it.state == queuev1.ItemState_ITEM_STATE_LEASED && !it.dirty:
			it.dirty = true
			resp.Queued++
		case it.state == queuev1.ItemState_ITEM_STATE_DELAYED:
			it.state = queuev1.ItemState_ITEM_STATE_PENDING
			f.order = append(f.order, k)
			resp.Queued++
		default:
			resp.Collapsed++
		}
	}
	return resp, nil
}

func (f *fakeQueue) Lease(ctx context.Context, req *queuev1.LeaseRequest) (*queuev1.LeaseResponse, error) {
	deadline := time.Now().Add(req.GetWait().AsDuration())
	d := req.GetLeaseDuration().AsDuration()
	if d == 0 {
		d = 30 * time.Second
	}
	max := int(req.GetMaxItems())
	if max == 0 {
		max = 1
	}
	f.mu.Lock()
	f.leaseCalls++
	refuse := f.refuseLeases
	f.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	for {
		f.mu.Lock()
		now := time.Now()
		f.tick(now)
		resp := &queuev1.LeaseResponse{}
		for len(f.order) > 0 && len(resp.Leases) < max {
			k := f.order[0]
			f.order = f.order[1:]
			it := f.items[k]
			if it == nil || it.state != queuev1.ItemState_ITEM_STATE_PENDING {
				continue
			}
			f.nextToken++
			it.state, it.token, it.expires = queuev1.ItemState_ITEM_STATE_LEASED, f.nextToken, now.Add(d)
			resp.Leases = append(resp.Leases, &queuev1.Lease{Key: k, Token: it.token, Attempt: it.attempts, ExpiresAt: timestamppb.New(it.expires)})
		}
		f.mu.Unlock()
		if len(resp.Leases) > 0 || !time.Now().Before(deadline) {
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// live returns the item if token is its live lease. Called with mu held.
func (f *fakeQueue) live(key string, token uint64) *fakeItem {
	it := f.items[key]
	if it == nil || it.state != queuev1.ItemState_ITEM_STATE_LEASED || it.token != token {
		return nil
	}
	return it
}

func (f *fakeQueue) Ack(_ context.Context, req *queuev1.AckRequest) (*queuev1.AckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tick(time.Now())
	f.ackCalls++
	f.maxAcksPerCall = max(f.maxAcksPerCall, len(req.GetAcks()))
	resp := &queuev1.AckResponse{}
	for _, a := range req.GetAcks() {
		it := f.live(a.GetKey(), a.GetToken())
		if it == nil {
			f.refused++
			resp.Results = append(resp.Results, &queuev1.AckResult{Key: a.GetKey(), Status: queuev1.AckStatus_ACK_STATUS_LEASE_LOST})
			continue
		}
		f.acks = append(f.acks, a)
		switch o := a.GetOutcome().(type) {
		case *queuev1.Ack_Success:
			it.attempts = 0
			if it.dirty {
				it.state, it.dirty = queuev1.ItemState_ITEM_STATE_PENDING, false
				f.order = append(f.order, a.GetKey())
			} else {
				delete(f.items, a.GetKey())
			}
		case *queuev1.Ack_Failure:
			it.attempts++
			it.lastError = o.Failure.GetError()
			if it.dirty {
				it.state, it.dirty = queuev1.ItemState_ITEM_STATE_PENDING, false
				f.order = append(f.order, a.GetKey())
			} else {
				it.state, it.notBefore = queuev1.ItemState_ITEM_STATE_DELAYED, time.Now().Add(f.backoff)
			}
		case *queuev1.Ack_Terminal:
			it.attempts++
			it.lastError = o.Terminal.GetError()
			if it.dirty {
				it.state, it.dirty = queuev1.ItemState_ITEM_STATE_PENDING, false
				f.order = append(f.order, a.GetKey())
			} else {
				it.state = queuev1.ItemState_ITEM_STATE_PARKED
			}
		case *queuev1.Ack_RequeueAfter:
			it.attempts = 0
			if it.dirty {
				it.state, it.dirty = queuev1.ItemState_ITEM_STATE_PENDING, false
				f.order = append(f.order, a.GetKey())
			} else {
				it.state, it.notBefore = queuev1.ItemState_ITEM_STATE_DELAYED, time.Now().Add(o.RequeueAfter.AsDuration())
			}
		}
		resp.Results = append(resp.Results, &queuev1.AckResult{Key: a.GetKey(), Status: queuev1.AckStatus_ACK_STATUS_OK})
	}
	return resp, nil
}

func (f *fakeQueue) Extend(_ context.Context, req *queuev1.ExtendRequest) (*queuev1.ExtendResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.tick(now)
	f.extendCalls++
	resp := &queuev1.ExtendResponse{}
	for _, l := range req.GetLeases() {
		it := f.live(l.GetKey(), l.GetToken())
		if it == nil {
			resp.Results = append(resp.Results, &queuev1.ExtendResult{Key: l.GetKey(), Status: queuev1.AckStatus_ACK_STATUS_LEASE_LOST})
			continue
		}
		it.expires = now.Add(req.GetLeaseDuration().AsDuration())
		resp.Results = append(resp.Results, &queuev1.ExtendResult{Key: l.GetKey(), Status: queuev1.AckStatus_ACK_STATUS_OK, ExpiresAt: timestamppb.New(it.expires)})
	}
	return resp, nil
}

func (f *fakeQueue) Forget(_ context.Context, req *queuev1.ForgetRequest) (*queuev1.ForgetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &queuev1.ForgetResponse{}
	for _, k := range req.GetKeys() {
		if _, ok := f.items[k]; ok {
			delete(f.items, k)
			resp.Forgotten++
		}
	}
	return resp, nil
}

// item returns a copy of key's item, or nil if absent.
func (f *fakeQueue) item(key string) *fakeItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tick(time.Now())
	it := f.items[key]
	if it == nil {
		return nil
	}
	c := *it
	return &c
}

// empty reports whether no key is left to work on (parked keys wait for a
// new announcement).
func (f *fakeQueue) empty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range f.items {
		if it.state != queuev1.ItemState_ITEM_STATE_PARKED {
			return false
		}
	}
	return true
}
