// Package refs measures the physical figures Baton's targets are ratios of,
// in the same run and on the same machine as the queue: one small durable
// append (append + fdatasync), an empty gRPC unary call (grpc.health.v1 Check
// against a bare grpc.Server), and gRPC merely carrying 1000-key messages (a
// QueueService whose Add does nothing).
package refs

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/batonrun/baton/bench/internal/load"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Fsync appends 64 bytes and makes them durable, one op at a time, for d,
// in a file under dir (put it on the queue's disk).
func Fsync(ctx context.Context, dir string, d time.Duration) (load.Result, error) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync.bench"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return load.Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rec := make([]byte, 64)
	return load.Run(ctx, load.Spec{Callers: 1, Duration: d, Latency: true}, func(context.Context, int) (int, error) {
		if _, err := f.Write(rec); err != nil {
			return 0, err
		}
		return 1, datasync(f)
	})
}

// serve starts a gRPC server on loopback and returns a connection to it.
func serve(register func(*grpc.Server)) (*grpc.ClientConn, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
	register(s)
	go func() { _ = s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20), grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		s.Stop()
		return nil, nil, err
	}
	return conn, func() { conn.Close(); s.Stop() }, nil
}

// Register adds the reference services to s: grpc.health.v1 (the empty
// call Echo makes) and a QueueService whose Add only counts keys (Carry).
// A child process serves them so that the references cross the same process
// boundary over loopback as the calls to baton-queue do.
func Register(s *grpc.Server) {
	healthpb.RegisterHealthServer(s, health.NewServer())
	queuev1.RegisterQueueServiceServer(s, &carrier{})
}

// dial connects to the reference server at addr, or starts one in this
// process when addr is "".
func dial(addr string) (*grpc.ClientConn, func(), error) {
	if addr == "" {
		return serve(Register)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20), grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, nil, err
	}
	return conn, func() { conn.Close() }, nil
}

// Echo measures empty unary calls (a health Check of a bare server at addr,
// or in this process when addr is "") from callers goroutines for d.
func Echo(ctx context.Context, addr string, callers int, d time.Duration) (load.Result, error) {
	conn, stop, err := dial(addr)
	if err != nil {
		return load.Result{}, err
	}
	defer stop()
	hc := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{}
	if _, err := hc.Check(ctx, req, grpc.WaitForReady(true)); err != nil { // connect outside the clock
		return load.Result{}, fmt.Errorf("echo: %w", err)
	}
	return load.Run(ctx, load.Spec{Callers: callers, Duration: d, Latency: true}, func(ctx context.Context, _ int) (int, error) {
		_, err := hc.Check(ctx, req)
		return 1, err
	})
}

// carrier is the reference QueueService: its Add on carryQueue only counts
// the keys (Carry); on any other queue it hands them to the queue's relay
// (relay.go).
type carrier struct {
	queuev1.UnimplementedQueueServiceServer
	relays relays
}

func (c *carrier) Add(_ context.Context, r *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	if r.GetQueue() != carryQueue {
		if err := c.relays.open(r.GetQueue()).add(r.GetKeys()); err != nil {
			return nil, err
		}
	}
	return &queuev1.AddResponse{Queued: uint32(len(r.GetKeys()))}, nil
}

func (c *carrier) Work(stream queuev1.QueueService_WorkServer) error { return c.relays.work(stream) }

// carryQueue is the queue Carry adds to, whose keys are only counted.
const carryQueue = "carry"

// Carry measures how many keys per second gRPC carries in Add requests of
// batch keys from callers goroutines for d, to a server (at addr, or in this
// process when addr is "") that only counts them: the most any queue can
// take over one connection.
func Carry(ctx context.Context, addr string, callers, batch int, d time.Duration) (load.Result, error) {
	conn, stop, err := dial(addr)
	if err != nil {
		return load.Result{}, err
	}
	defer stop()
	qc := queuev1.NewQueueServiceClient(conn)
	reqs := make([]*queuev1.AddRequest, callers)
	for c := range reqs {
		reqs[c] = &queuev1.AddRequest{Queue: carryQueue, Keys: Keys(fmt.Sprintf("c%02d", c), 0, batch)}
	}
	if _, err := qc.Add(ctx, reqs[0], grpc.WaitForReady(true)); err != nil {
		return load.Result{}, fmt.Errorf("carry: %w", err)
	}
	return load.Run(ctx, load.Spec{Callers: callers, Duration: d}, func(ctx context.Context, c int) (int, error) {
		resp, err := qc.Add(ctx, reqs[c])
		return int(resp.GetQueued()), err
	})
}

// Keys returns n keys of 11 bytes ("<p>/<7 digits>" for a 3-byte prefix
// p) numbered from first, the size client-go's figures are quoted for.
func Keys(prefix string, first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%07d", prefix, first+i)
	}
	return out
}
