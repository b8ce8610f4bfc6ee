package server

import (
	"net"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStreamsListTheOpenWorkStreams: a work stream is listed from its open
// until it ends, with its queue, worker, max_in_flight, the leases it holds
// unanswered, and whether it drains; an idle one is listed as long as it
// is open, though it asked for keys only once.
func TestStreamsListTheOpenWorkStreams(t *testing.T) {
	b := openBroker(t, t.TempDir())
	streams := NewStreams()
	srv := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(srv, NewWithStreams(b, streams))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := queuev1.NewQueueServiceClient(conn)

	if _, _, err := b.Add(t.Context(), "pods", []string{"default/a", "default/b"}, broker.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	open := func(queue, worker string, max uint32) queuev1.QueueService_WorkClient {
		t.Helper()
		ws, err := c.Work(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := ws.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: queue, Worker: worker, MaxInFlight: max}}}); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	busy := open("pods", "w1", 4)
	for range 2 {
		if m, err := busy.Recv(); err != nil || m.GetLease() == nil {
			t.Fatalf("lease: %v %v", m, err)
		}
	}
	idle := open("jobs", "w2", 1)
	waitFor := func(what string, ok func([]StreamInfo) bool) []StreamInfo {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			l := streams.List()
			if ok(l) {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("streams never %s: %+v", what, l)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	l := waitFor("listed both", func(l []StreamInfo) bool { return len(l) == 2 })
	if g := l[0]; g.Queue != "jobs" || g.Worker != "w2" || g.MaxInFlight != 1 || g.InFlight != 0 || g.Draining || g.Opened.IsZero() {
		t.Errorf("the idle stream: %+v", g)
	}
	if g := l[1]; g.Queue != "pods" || g.Worker != "w1" || g.MaxInFlight != 4 || g.InFlight != 2 || g.Draining || g.Identity != "" {
		t.Errorf("the busy stream: %+v", g)
	}

	if err := busy.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Drain{Drain: &queuev1.WorkDrain{}}}); err != nil {
		t.Fatal(err)
	}
	waitFor("showed the drain", func(l []StreamInfo) bool { return len(l) == 2 && l[1].Draining })
	if err := idle.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Recv(); err == nil {
		t.Fatal("the idle stream did not end")
	}
	waitFor("dropped the closed stream", func(l []StreamInfo) bool { return len(l) == 1 && l[0].Worker == "w1" })
}
