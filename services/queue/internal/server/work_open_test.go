package server

import (
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"net"
	"strings"
	"testing"
)

// TestWorkOpenQuotesMaxInFlight: an open whose max_in_flight is over the
// limit is refused with the number the worker sent, not the number it was
// clamped to before the check.
func TestWorkOpenQuotesMaxInFlight(t *testing.T) {
	srv := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(srv, New(openBroker(t, t.TempDir())))
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
	for _, sent := range []uint32{limits.MaxBatch + 1, 50_000, 1<<32 - 1} {
		ws, err := c.Work(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := ws.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: "q", Worker: "w", MaxInFlight: sent}}}); err != nil {
			t.Fatal(err)
		}
		_, err = ws.Recv()
		want := fmt.Sprintf("max_in_flight has %d, over %d", sent, limits.MaxBatch)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("max_in_flight %d: %v, want INVALID_ARGUMENT saying %q", sent, err, want)
		}
	}
}

// TestCountsQuotedAsSent: a Lease's max_items and a List's page_size over
// the limit are refused with the number the client sent.
func TestCountsQuotedAsSent(t *testing.T) {
	s := New(openBroker(t, t.TempDir()))
	for _, sent := range []uint32{limits.MaxBatch + 1, 50_000, 1<<32 - 1} {
		_, err := s.Lease(t.Context(), &queuev1.LeaseRequest{Queue: "q", MaxItems: sent})
		if want := fmt.Sprintf("max_items has %d, over %d", sent, limits.MaxBatch); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("Lease max_items %d: %v, want INVALID_ARGUMENT saying %q", sent, err, want)
		}
		_, err = s.List(t.Context(), &queuev1.ListRequest{Queue: "q", PageSize: sent})
		if want := fmt.Sprintf("page_size has %d, over %d", sent, limits.MaxBatch); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
			t.Errorf("List page_size %d: %v, want INVALID_ARGUMENT saying %q", sent, err, want)
		}
	}
}
