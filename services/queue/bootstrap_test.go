package queue_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
)

// startingMember answers on a member's peer address as a member does
// while it asks the others whether the queue is new: its log is empty.
type startingMember struct {
	queuev1.UnimplementedRaftServiceServer
}

func (startingMember) Join(context.Context, *queuev1.JoinRequest) (*queuev1.JoinResponse, error) {
	return &queuev1.JoinResponse{}, nil
}

// TestReplicatedSlowMemberFormsTheQueue: three members started together
// form the new queue together even when one is slow. m2 and m3 start while
// m1's peer address answers only that its log is empty, as a member that
// has not yet decided how to start does; they decide that the queue is
// new, and must not elect a leader before m1 runs too. m1, started three
// election timeouts later, finds the queue new and forms it with them
// under its own id. Before, m2 and m3 elected at once, m1 found the queue
// in use and rejoined under a new id as if it had lost its disk, and the
// queue had two voters until it caught up: a leader lost then stopped it.
func TestReplicatedSlowMemberFormsTheQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	peers := make([]string, 3)
	var cluster []string
	for i := range peers {
		peers[i] = freePort(t)
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, peers[i]))
	}
	lis, err := net.Listen("tcp", peers[0])
	if err != nil {
		t.Fatal(err)
	}
	fake := grpc.NewServer()
	queuev1.RegisterRaftServiceServer(fake, startingMember{})
	go func() { _ = fake.Serve(lis) }()
	defer fake.Stop()

	r := &replicated{t: t, peers: peers}
	for i := range peers {
		p := newProc(t, "--name", fmt.Sprintf("m%d", i+1), "--peer-addr", peers[i], "--initial-cluster", strings.Join(cluster, ","),
			"--heartbeat-interval", "50ms", "--election-timeout", "500ms")
		r.procs = append(r.procs, p)
		conn := dial(t, p.grpcAddr)
		r.qcs = append(r.qcs, queuev1.NewQueueServiceClient(conn))
		r.ccs = append(r.ccs, queuev1.NewClusterServiceClient(conn))
	}
	r.procs[1].start()
	r.procs[2].start()
	// Each answers ClusterService once it has decided that the queue is
	// new and started its node (it is ready only once it knows a leader).
	for _, i := range []int{1, 2} {
		for {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			_, err := r.ccs[i].Status(sctx, &queuev1.StatusRequest{})
			scancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil || !r.procs[i].running() {
				t.Fatalf("m%d does not start: %v", i+1, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Three election timeouts: without the hold, a leader is elected
	// within one or two.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, i := range []int{1, 2} {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := r.ccs[i].Status(sctx, &queuev1.StatusRequest{})
			scancel()
			if err == nil && st.GetLeaderName() != "" {
				t.Fatalf("m%d knows leader %s while m1 has not started", i+1, st.GetLeaderName())
			}
		}
	}
	fake.Stop()
	r.procs[0].start()
	r.settle()
	if line := grepLines(r.procs[0].log(), "rejoined under a new Raft id"); line != "" {
		t.Fatalf("m1 rejoined a queue it was started with: %s", line)
	}
	ml, err := r.ccs[0].MemberList(ctx, &queuev1.MemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.GetMembers()) != 3 {
		t.Fatalf("members %v, want m1, m2, m3", ml.GetMembers())
	}
	for _, i := range []int{1, 2} {
		if line := grepLines(r.procs[i].log(), "elects without hearing every other member start"); line != "" {
			t.Errorf("m%d gave up waiting for m1: %s", i+1, line)
		}
	}
}

// TestReplicatedWipedMemberStartedExistingSaysWhatItWaitsFor: a member
// whose disk was lost, started on an empty directory with
// --initial-cluster-state existing while the others are down, waits, and
// its log says what for: a member of the queue in use to answer, since it
// never forms a queue. It said the words meant for a member started with
// new, that it waits for every member to answer before it may form a new
// queue. Once the others run, it rejoins.
func TestReplicatedWipedMemberStartedExistingSaysWhatItWaitsFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t, "--log-level", "info")
	for i := range 20 {
		if !r.add(ctx, fmt.Sprintf("k%d", i)) {
			t.Fatalf("Add k%d was not acknowledged", i)
		}
	}
	for _, p := range r.procs {
		if _, err := p.signal(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	}
	wiped := r.procs[2]
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	wiped.args = append(wiped.args, "--initial-cluster-state", "existing")
	wiped.start()
	var line string
	for deadline := time.Now().Add(30 * time.Second); line == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || !wiped.running() {
			t.Fatalf("m3 says nothing of what it waits for:\n%s", wiped.log())
		}
		line = grepLines(wiped.log(), "a member with an empty log")
	}
	if strings.Contains(line, "form a new queue") || !strings.Contains(line, "--initial-cluster-state existing") || !strings.Contains(line, "in use") {
		t.Errorf("m3, started with --initial-cluster-state existing, says it waits as a member started with new would:\n%s", line)
	}
	r.procs[0].start()
	r.procs[1].start()
	r.settle()
	if grepLines(wiped.log(), "rejoined under a new Raft id") == "" {
		t.Errorf("m3 did not rejoin:\n%s", wiped.log())
	}
	if !r.add(ctx, "after") {
		t.Fatal("no Add acknowledged once m3 rejoined")
	}
}
