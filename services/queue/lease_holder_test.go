package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

// leaseCalls are the QueueService calls of the holder tests, with their
// answers checked.
type leaseCalls struct {
	t   *testing.T
	ctx context.Context
}

func (c leaseCalls) lease(qc queuev1.QueueServiceClient, queue string) *queuev1.Lease {
	c.t.Helper()
	lr, err := qc.Lease(c.ctx, &queuev1.LeaseRequest{Queue: queue, Worker: "w", LeaseDuration: durationpb.New(time.Minute)})
	if err != nil || len(lr.GetLeases()) != 1 {
		c.t.Fatalf("Lease on %s: %v, %v; want one key", queue, lr, err)
	}
	return lr.GetLeases()[0]
}

func (c leaseCalls) ack(qc queuev1.QueueServiceClient, queue string, l *queuev1.Lease) queuev1.AckStatus {
	c.t.Helper()
	ar, err := qc.Ack(c.ctx, &queuev1.AckRequest{Queue: queue, Acks: []*queuev1.Ack{{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
	if err != nil || len(ar.GetResults()) != 1 {
		c.t.Fatalf("Ack: %v, %v", ar, err)
	}
	return ar.GetResults()[0].GetStatus()
}

func (c leaseCalls) extend(qc queuev1.QueueServiceClient, queue string, l *queuev1.Lease) queuev1.AckStatus {
	c.t.Helper()
	er, err := qc.Extend(c.ctx, &queuev1.ExtendRequest{Queue: queue, Leases: []*queuev1.LeaseRef{{Key: l.GetKey(), Token: l.GetToken()}}, LeaseDuration: durationpb.New(5 * time.Minute)})
	if err != nil || len(er.GetResults()) != 1 {
		c.t.Fatalf("Extend: %v, %v", er, err)
	}
	return er.GetResults()[0].GetStatus()
}

func (c leaseCalls) inspect(qc queuev1.QueueServiceClient, queue, key string) *queuev1.Item {
	c.t.Helper()
	ir, err := qc.Inspect(c.ctx, &queuev1.InspectRequest{Queue: queue, Key: key})
	if err != nil {
		c.t.Fatalf("Inspect: %v", err)
	}
	return ir.GetItem()
}

// TestLeasesBoundToTheirHolderOverMTLS: the real baton-queue over mutual
// TLS binds a lease to the CN of the certificate that took it. worker-2,
// holding worker-1's token, gets LEASE_LOST from Ack and from Extend, and
// the key stays leased to worker-1 with its expiry unchanged; worker-1
// then extends and acks it.
func TestLeasesBoundToTheirHolderOverMTLS(t *testing.T) {
	d := newTLSDir(t)
	for _, name := range []string{"worker-1", "worker-2"} {
		if _, err := certs.Issue(d.dir, certs.Leaf{Name: name, Roles: []string{tlsfiles.RoleWorker}, Hosts: []string{"127.0.0.1"}, Days: 1}, false, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	p := startTLS(t, d)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := func(name string) queuev1.QueueServiceClient {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(d.source(t, d.dir, name).ClientCredentials("")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return queuev1.NewQueueServiceClient(conn)
	}
	observer, w1, w2 := client("observer"), client("worker-1"), client("worker-2")
	c := leaseCalls{t, ctx}
	const queue = "bound"
	if _, err := observer.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	l := c.lease(w1, queue)
	before := c.inspect(w1, queue, "k")
	if st := c.ack(w2, queue, l); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("worker-2's Ack of worker-1's lease: %v, want LEASE_LOST", st)
	}
	if st := c.extend(w2, queue, l); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("worker-2's Extend of worker-1's lease: %v, want LEASE_LOST", st)
	}
	after := c.inspect(w2, queue, "k")
	if after.GetState() != queuev1.ItemState_ITEM_STATE_LEASED || !after.GetLeaseExpiresAt().AsTime().Equal(before.GetLeaseExpiresAt().AsTime()) || after.GetWorker() != "w" {
		t.Fatalf("after worker-2's calls the key is %v, want it as worker-1 left it: %v", after, before)
	}
	if st := c.extend(w1, queue, l); st != queuev1.AckStatus_ACK_STATUS_OK {
		t.Errorf("worker-1's Extend of its own lease: %v, want OK", st)
	}
	if st := c.ack(w1, queue, l); st != queuev1.AckStatus_ACK_STATUS_OK {
		t.Errorf("worker-1's Ack of its own lease: %v, want OK", st)
	}
	if it := c.inspect(w1, queue, "k"); it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Errorf("after worker-1's Ack the key is %v, want absent", it.GetState())
	}
}

// TestLeasesUnboundInPlaintext: without TLS no caller has an identity, so
// a lease answers to its token alone, from any connection, as before
// leases were bound.
func TestLeasesUnboundInPlaintext(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p := newProc(t)
	p.start()
	one, two := dial(t, p.grpcAddr), dial(t, p.grpcAddr)
	p.waitServing(ctx, one)
	q1, q2 := queuev1.NewQueueServiceClient(one), queuev1.NewQueueServiceClient(two)
	c := leaseCalls{t, ctx}
	const queue = "open"
	if _, err := q1.Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	l := c.lease(q1, queue)
	if st := c.extend(q2, queue, l); st != queuev1.AckStatus_ACK_STATUS_OK {
		t.Errorf("Extend from another connection: %v, want OK", st)
	}
	if st := c.ack(q2, queue, l); st != queuev1.AckStatus_ACK_STATUS_OK {
		t.Errorf("Ack from another connection: %v, want OK", st)
	}
}

// TestForwardedHolderIgnoredOnTheClientListener: the holder a member hands
// on with a call (baton-forwarded-holder) is believed on a replicated
// queue's peer listener alone. On the client listener a certificate with
// both the worker and the queue-peer role that sets it is still itself:
// its Ack of worker-1's lease is LEASE_LOST, and the key stays leased.
func TestForwardedHolderIgnoredOnTheClientListener(t *testing.T) {
	d := newTLSDir(t)
	for _, l := range []certs.Leaf{
		{Name: "worker-1", Roles: []string{tlsfiles.RoleWorker}},
		{Name: "worker-peer", Roles: []string{tlsfiles.RoleWorker, tlsfiles.RoleQueuePeer}},
	} {
		l.Hosts, l.Days = []string{"127.0.0.1"}, 1
		if _, err := certs.Issue(d.dir, l, false, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	p := startTLS(t, d)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := func(name string) queuev1.QueueServiceClient {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(d.source(t, d.dir, name).ClientCredentials("")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return queuev1.NewQueueServiceClient(conn)
	}
	c := leaseCalls{t, ctx}
	const queue = "bound"
	if _, err := client("observer").Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	l := c.lease(client("worker-1"), queue)
	spoof := leaseCalls{t, metadata.AppendToOutgoingContext(ctx, "baton-forwarded", "1", "baton-forwarded-holder", "worker-1")}
	if st := spoof.ack(client("worker-peer"), queue, l); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("a worker and queue-peer certificate's Ack of worker-1's lease, claiming to hand it on for worker-1: %v, want LEASE_LOST", st)
	}
	if it := c.inspect(client("worker-1"), queue, "k"); it.GetState() != queuev1.ItemState_ITEM_STATE_LEASED {
		t.Errorf("after the claimed Ack the key is %v, want leased to worker-1", it.GetState())
	}
}
