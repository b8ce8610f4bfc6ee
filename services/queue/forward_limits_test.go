package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/runtime/limits"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// openIdle opens a work stream on qc that sends its open and nothing
// else, and returns once the queue's header says it is open (through a
// follower: once the leader opened it), or the status that refused it.
func openIdle(ctx context.Context, qc queuev1.QueueServiceClient, queue string) error {
	s, err := qc.Work(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: queue, Worker: "idle"}}}); err != nil {
		_, err = s.Recv() // the status says why
		return err
	}
	md, err := s.Header()
	if err == nil && md == nil {
		_, err = s.Recv() // ended without a header: refused
	}
	return err
}

// TestReplicatedIdleStreamsDoNotStarveAFollower: one identity holding
// every waiting Lease its limit allows, as idle work streams through a
// follower, takes nothing another identity needs there. worker-a opens
// 1024 streams (the per-identity default) over four connections (256
// each, the per-connection default) through one follower, and they all
// reach the leader; its next one is refused by the follower, naming
// worker-a. worker-b's work stream through the same follower still opens
// and is pushed a key, and eight adders' Adds through it succeed. The
// follower hands every call on over its one connection to the leader's
// peer listener, so that connection must carry more than any one client
// can fill, and the leader must count each handed-on call against its
// caller rather than against the follower.
func TestReplicatedIdleStreamsDoNotStarveAFollower(t *testing.T) {
	d := newTLSDir(t)
	for _, name := range []string{"worker-a", "worker-b"} {
		if _, err := certs.Issue(d.dir, certs.Leaf{Name: name, Roles: []string{tlsfiles.RoleWorker}, Hosts: []string{"127.0.0.1"}, Days: 1}, false, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t, d.serverArgs("queue")...)
	conn := func(addr, name string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(d.source(t, d.dir, name).ClientCredentials("")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, p := range r.procs {
		c := conn(p.grpcAddr, "admin")
		r.qcs = append(r.qcs, queuev1.NewQueueServiceClient(c))
		r.ccs = append(r.ccs, queuev1.NewClusterServiceClient(c))
	}
	r.settle()
	lead := r.leader(ctx)
	f := r.procs[followersOf(lead)[0]].grpcAddr

	// worker-a's streams end with the test, before its members stop.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	const conns = limits.DefaultWaitingLeasesPerIdentity / limits.DefaultWaitingLeasesPerConnection
	var wg sync.WaitGroup
	errs := make(chan error, limits.DefaultWaitingLeasesPerIdentity)
	for range conns {
		qc := queuev1.NewQueueServiceClient(conn(f, "worker-a"))
		wg.Go(func() {
			for range limits.DefaultWaitingLeasesPerConnection {
				if err := openIdle(sctx, qc, "idle"); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	refused := 0
	for err := range errs {
		if refused == 0 {
			t.Errorf("worker-a's stream through a follower, within its limits: %v", err)
		}
		refused++
	}
	if refused > 0 {
		t.Errorf("%d of worker-a's %d streams within its limits refused", refused, limits.DefaultWaitingLeasesPerIdentity)
	}
	err := openIdle(sctx, queuev1.NewQueueServiceClient(conn(f, "worker-a")), "idle")
	want := fmt.Sprintf("too many waiting Leases for identity %q: %d in flight (limit %d)", "worker-a", limits.DefaultWaitingLeasesPerIdentity, limits.DefaultWaitingLeasesPerIdentity)
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != want {
		t.Errorf("worker-a's stream beyond its limit: %v, want RESOURCE_EXHAUSTED %q", err, want)
	}

	// worker-b, through the same follower.
	bc := conn(f, "worker-b")
	b := queueclient.New(bc)
	ws, err := b.Work(ctx, "b", queueclient.WorkOptions{Worker: "b"})
	if err != nil {
		t.Fatalf("worker-b's work stream through the follower: %v", err)
	}
	defer ws.Close()
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "b", Keys: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	if ev, err := ws.Recv(); err != nil || ev.Lease == nil || ev.Lease.Key != "k" {
		t.Fatalf("worker-b's stream: %+v %v, want the lease of k", ev, err)
	}
	adders := queuev1.NewQueueServiceClient(conn(f, "observer"))
	var awg sync.WaitGroup
	for i := range 8 {
		awg.Go(func() {
			for j := range 20 {
				actx, cancel := context.WithTimeout(ctx, 20*time.Second)
				_, err := adders.Add(actx, &queuev1.AddRequest{Queue: "adds", Keys: []string{fmt.Sprintf("%d-%d", i, j)}})
				cancel()
				if err != nil {
					t.Errorf("an Add through the follower beside worker-a's streams: %v", err)
					return
				}
			}
		})
	}
	awg.Wait()
}
