package refs

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The relay is the floor of the single-key cycle through the work stream:
// the same messages as baton-queue's (a unary Add, a pushed Lease, an Ack
// and its AckResult, each with the fields baton-queue fills) between the
// same client (client/queue and peers.BatonStream) and a server that does
// none of a queue's work: no collapsing, no leases to expire, no log, no
// fsync. Keys wait in a Go channel, and each stream pushes from it while it
// holds fewer than its max_in_flight. What baton-queue does beyond the
// relay in the same run is the queue's own cost; what the relay itself
// reaches is the most any server of this protocol reaches on this machine
// through grpc-go.
//
// Every queue name but Carry's has a relay, made by its first Add or work
// stream.

// relayBacklog is the most keys a relay holds unpushed. The cycle holds at
// most its callers' batch each; an Add beyond it is refused, not blocked.
const relayBacklog = 1 << 16

// relayLeaseDuration is a pushed lease's expiry when the open names none,
// as baton-queue's default; the relay never expires one.
const relayLeaseDuration = time.Minute

// relayed is a key waiting in a relay, with the time of its Add (a lease's
// pending_since).
type relayed struct {
	key string
	at  time.Time
}

// relay is one queue name's keys.
type relay struct {
	keys chan relayed
}

// relays maps queue names to their relays.
type relays struct {
	mu sync.Mutex
	m  map[string]*relay
}

// open returns queue's relay, making it.
func (rs *relays) open(queue string) *relay {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*relay{}
	}
	r := rs.m[queue]
	if r == nil {
		r = &relay{keys: make(chan relayed, relayBacklog)}
		rs.m[queue] = r
	}
	return r
}

// add puts keys in r without waiting: RESOURCE_EXHAUSTED if they do not
// fit (some may have gone in; the relay is a reference, not a queue).
func (r *relay) add(keys []string) error {
	now := time.Now()
	for _, k := range keys {
		select {
		case r.keys <- relayed{key: k, at: now}:
		default:
			return status.Errorf(codes.ResourceExhausted, "relay holds %d keys", relayBacklog)
		}
	}
	return nil
}

// giveBack returns a key pushed to a stream that ended without acking it.
// The relay had room for it before it was pushed; if others' Adds took
// that room since, it is dropped (and the cycle that owes it times out).
func (r *relay) giveBack(k relayed) {
	select {
	case r.keys <- k:
	default:
	}
}

// work serves one work stream on its relay: a pusher sends leases while
// the stream holds fewer than max_in_flight, and the reader answers every
// ack OK and frees its slot. When the stream ends, the keys it was pushed
// and did not ack go back to the relay, as baton-queue hands them back.
func (rs *relays) work(stream queuev1.QueueService_WorkServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil || open.GetQueue() == "" {
		return status.Error(codes.InvalidArgument, "the first message must be an open naming a queue")
	}
	inFlight := max(int(open.GetMaxInFlight()), 1)
	leaseFor := relayLeaseDuration
	if d := open.GetLeaseDuration(); d != nil {
		leaseFor = d.AsDuration()
	}
	r := rs.open(open.GetQueue())
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	var (
		sendMu sync.Mutex // one SendMsg at a time
		heldMu sync.Mutex
		held   = map[uint64]relayed{}
		token  uint64
		closed bool // the stream is over: a key taken now goes back
	)
	send := func(m *queuev1.WorkResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	slots := make(chan struct{}, inFlight)
	for range inFlight {
		slots <- struct{}{}
	}
	ctx := stream.Context()
	pushErr := make(chan error, 1)
	go func() {
		pushErr <- func() error {
			for {
				select {
				case <-slots:
				case <-ctx.Done():
					return nil
				}
				var k relayed
				select {
				case k = <-r.keys:
				case <-ctx.Done():
					return nil
				}
				heldMu.Lock()
				if closed {
					heldMu.Unlock()
					r.giveBack(k)
					return nil
				}
				token++
				t := token
				held[t] = k
				heldMu.Unlock()
				l := &queuev1.Lease{Key: k.key, Token: t, Attempt: 1,
					ExpiresAt: timestamppb.New(time.Now().Add(leaseFor)), PendingSince: timestamppb.New(k.at)}
				if err := send(&queuev1.WorkResponse{Response: &queuev1.WorkResponse_Lease{Lease: l}}); err != nil {
					return err
				}
			}
		}()
	}()
	defer func() {
		// The stream is over: what it held goes back for the others.
		heldMu.Lock()
		defer heldMu.Unlock()
		closed = true
		for _, k := range held {
			r.giveBack(k)
		}
	}()
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch req := m.GetRequest().(type) {
		case *queuev1.WorkRequest_Ack:
			a := req.Ack
			heldMu.Lock()
			_, ok := held[a.GetToken()]
			delete(held, a.GetToken())
			heldMu.Unlock()
			st := queuev1.AckStatus_ACK_STATUS_LEASE_LOST
			if ok {
				st = queuev1.AckStatus_ACK_STATUS_OK
				slots <- struct{}{}
			}
			if err := send(&queuev1.WorkResponse{Response: &queuev1.WorkResponse_AckResult{AckResult: &queuev1.AckResult{Key: a.GetKey(), Status: st}}}); err != nil {
				return err
			}
		case *queuev1.WorkRequest_Extend:
			return status.Error(codes.Unimplemented, "the relay does not extend leases")
		default:
			return status.Error(codes.InvalidArgument, fmt.Sprintf("unexpected %T after the open", req))
		}
		select {
		case err := <-pushErr:
			return err
		default:
		}
	}
}

// RelayClient is a client/queue Client of the relay at addr (the reference
// server in a child process), dialled as the bench dials baton-queue in
// plaintext: one attempt a call, since a benchmark must not hide retries.
func RelayClient(addr string) (*queueclient.Client, func(), error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, nil, err
	}
	return queueclient.New(conn, queueclient.WithBackoff(queueclient.Backoff{Attempts: 1})), func() { conn.Close() }, nil
}
