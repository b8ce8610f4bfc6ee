package service_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
)

// BenchmarkWatchToQueue measures changes per second through the observer
// into the real queue: b.N puts of distinct pods (16 writers), timed until
// the queue has accepted every key.
func BenchmarkWatchToQueue(b *testing.B) {
	srv, cli := etcdWithClient(b)
	q := startQueue(b)
	o := startObserver(b, srv.Endpoints(), q.addr, nil)
	settle(b, o, cli)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				name := fmt.Sprintf("p%08d", i)
				if _, err := cli.Put(context.Background(), "/registry/pods/bench/"+name, podValue("bench", name, "rs0", "")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	settle(b, o, cli)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
}

// addRecorder is a queue that only records when each key first arrived.
type addRecorder struct {
	queuev1.UnimplementedQueueServiceServer
	mu      sync.Mutex
	arrived map[string]time.Time
}

func (r *addRecorder) Add(_ context.Context, req *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range req.GetKeys() {
		if _, ok := r.arrived[k]; !ok {
			r.arrived[k] = now
		}
	}
	return &queuev1.AddResponse{Queued: uint32(len(req.GetKeys()))}, nil
}

// BenchmarkPutToAddLatency measures the time from an etcd Put to the Add
// that announces it, at 1,000 changes a second, and reports p50 and p99,
// with the p99 of the Put calls themselves (etcd's share) for comparison.
// The queue is a recorder at the gRPC boundary, so its own latency does not
// count.
func BenchmarkPutToAddLatency(b *testing.B) {
	srv, cli := etcdWithClient(b)
	rec := &addRecorder{arrived: map[string]time.Time{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(gs, rec)
	go func() { _ = gs.Serve(l) }()
	defer gs.Stop()
	o := startObserver(b, srv.Endpoints(), l.Addr().String(), nil)
	settle(b, o, cli)

	n := max(b.N, 1000)
	sent := make([]time.Time, n)
	putLat := make([]time.Duration, n) // Put call to its return, for comparison
	b.ResetTimer()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := range n {
		<-tick.C
		name := fmt.Sprintf("p%08d", i)
		sent[i] = time.Now()
		wg.Go(func() {
			if _, err := cli.Put(context.Background(), "/registry/pods/lat/"+name, podValue("lat", name, "", "")); err != nil {
				b.Error(err)
			}
			putLat[i] = time.Since(sent[i])
		})
	}
	wg.Wait()
	settle(b, o, cli)
	b.StopTimer()
	lat := make([]time.Duration, 0, n)
	rec.mu.Lock()
	for i := range n {
		if at, ok := rec.arrived[fmt.Sprintf("lat/p%08d", i)]; ok {
			lat = append(lat, at.Sub(sent[i]))
		}
	}
	rec.mu.Unlock()
	if len(lat) != n {
		b.Fatalf("%d of %d keys arrived", len(lat), n)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[n*99/100].Microseconds())/1000, "p99-ms")
	slices.Sort(putLat)
	b.ReportMetric(float64(putLat[n*99/100].Microseconds())/1000, "put-p99-ms")
}
