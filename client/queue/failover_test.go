package queue_test

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// backups answers Snapshot with a fixed file.
type backups struct {
	queuev1.UnimplementedClusterServiceServer
	data []byte
}

func (b backups) Snapshot(_ *queuev1.SnapshotRequest, s queuev1.ClusterService_SnapshotServer) error {
	return s.Send(&queuev1.SnapshotResponse{Data: b.data})
}

// TestFailoverOfHealthAndSnapshot: given a list of members whose first is
// down, Healthy and Cluster().Snapshot move on to the next member, as
// every other call does, instead of failing on the first.
func TestFailoverOfHealthAndSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus(queuev1.QueueService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	want := []byte("a backup's bytes")
	queuev1.RegisterClusterServiceServer(s, backups{data: want})
	go s.Serve(l)
	defer s.Stop()

	for _, name := range []string{"Healthy", "Snapshot"} {
		c, err := queueclient.Dial(down+","+l.Addr().String(), queueclient.WithBackoff(queueclient.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		switch name {
		case "Healthy":
			if err := c.Healthy(ctx); err != nil {
				t.Errorf("Healthy with the first member down: %v", err)
			}
		case "Snapshot":
			var buf bytes.Buffer
			n, err := c.Cluster().Snapshot(ctx, &buf)
			if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("Snapshot with the first member down: %d bytes %q, %v; want %q", n, buf.Bytes(), err, want)
			}
		}
	}
}
