package rpcmetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// testService has a method of each kind, ending in different ways.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return nil, status.Error(codes.NotFound, "no such thing")
}

// StreamingOutputCall sends two messages and ends as a cancelled context
// would (a plain context error, not a status).
func (testService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range 2 {
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return context.Canceled
}

// FullDuplexCall answers every message once, until the client is done.
func (testService) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		if _, err := s.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// serve runs testService with ours and go-grpc-middleware's provider both
// counting every call, each into a registry of its own.
func serve(t *testing.T) (testpb.TestServiceClient, *prometheus.Registry, *prometheus.Registry) {
	t.Helper()
	ours, theirs := New(), grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	regOurs, regTheirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	regOurs.MustRegister(ours)
	regTheirs.MustRegister(theirs)
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ours.UnaryServerInterceptor(), theirs.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ours.StreamServerInterceptor(), theirs.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(s, testService{})
	ours.Init(s)
	theirs.InitializeMetrics(s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn), regOurs, regTheirs
}

// series is every series a registry gathers: a counter's value, or a
// histogram's count of observations (its sums are times, never equal).
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(ls)
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("%s: unexpected type %v", key, mf.GetType())
			}
		}
	}
	return out
}

// TestSameSeriesAsTheProvider: for calls of every kind, ending in success,
// a status error and a context error, the collector exposes exactly the
// series go-grpc-middleware's Prometheus provider does, with the same
// values, so what reads those names (dashboards, the bench) reads the same.
func TestSameSeriesAsTheProvider(t *testing.T) {
	c, regOurs, regTheirs := serve(t)
	ctx := t.Context()
	for range 2 {
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.NotFound {
		t.Fatalf("UnaryCall: %v", err)
	}
	out, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := out.Recv(); err != nil {
			if status.Code(err) != codes.Canceled {
				t.Fatalf("StreamingOutputCall: %v", err)
			}
			break
		}
	}
	duplex, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := duplex.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := duplex.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := duplex.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := duplex.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("FullDuplexCall end: %v", err)
	}

	// The handlers' ends are counted after the client sees them: wait for
	// both collectors to count the last call.
	last := `grpc_server_handled_total{grpc_code=OK,grpc_method=FullDuplexCall,grpc_service=grpc.testing.TestService,grpc_type=bidi_stream}`
	var got, want map[string]float64
	for i := 0; ; i++ {
		got, want = series(t, regOurs), series(t, regTheirs)
		if got[last] == 1 && want[last] == 1 {
			break
		}
		if i == 1000 {
			t.Fatalf("the duplex call's end was never counted: ours %v, the provider's %v", got[last], want[last])
		}
		waitABit(ctx)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: ours %v (present %v), the provider's %v", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s = %v: not a series of the provider", k, v)
		}
	}

	// And the figures themselves, so the comparison cannot pass by both
	// being wrong alike.
	svc := "grpc_service=grpc.testing.TestService"
	for k, v := range map[string]float64{
		`grpc_server_started_total{grpc_method=EmptyCall,` + svc + `,grpc_type=unary}`:                                      2,
		`grpc_server_msg_sent_total{grpc_method=EmptyCall,` + svc + `,grpc_type=unary}`:                                     2,
		`grpc_server_msg_sent_total{grpc_method=UnaryCall,` + svc + `,grpc_type=unary}`:                                     0,
		`grpc_server_handled_total{grpc_code=NotFound,grpc_method=UnaryCall,` + svc + `,grpc_type=unary}`:                   1,
		`grpc_server_handled_total{grpc_code=Canceled,grpc_method=StreamingOutputCall,` + svc + `,grpc_type=server_stream}`: 1,
		`grpc_server_msg_sent_total{grpc_method=StreamingOutputCall,` + svc + `,grpc_type=server_stream}`:                   2,
		`grpc_server_msg_received_total{grpc_method=FullDuplexCall,` + svc + `,grpc_type=bidi_stream}`:                      3,
		`grpc_server_msg_sent_total{grpc_method=FullDuplexCall,` + svc + `,grpc_type=bidi_stream}`:                          3,
		`grpc_server_handling_seconds{grpc_method=FullDuplexCall,` + svc + `,grpc_type=bidi_stream}`:                        1,
		`grpc_server_started_total{grpc_method=HalfDuplexCall,` + svc + `,grpc_type=bidi_stream}`:                           0,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// waitABit waits a millisecond, or until ctx ends.
func waitABit(ctx context.Context) {
	select {
	case <-time.After(time.Millisecond):
	case <-ctx.Done():
	}
}

// nopStream is a stream whose messages go nowhere, for the benchmarks.
type nopStream struct{ grpc.ServerStream }

func (nopStream) SendMsg(any) error        { return nil }
func (nopStream) RecvMsg(any) error        { return nil }
func (nopStream) Context() context.Context { return context.Background() }

// BenchmarkInterceptors: the cost each collector adds to a unary call and
// to a message of a stream (handlers that do nothing, no network).
func BenchmarkInterceptors(b *testing.B) {
	ours, theirs := New(), grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	prometheus.NewRegistry().MustRegister(ours)
	prometheus.NewRegistry().MustRegister(theirs) // apart: their help texts differ
	for _, c := range []struct {
		name   string
		unary  grpc.UnaryServerInterceptor
		stream grpc.StreamServerInterceptor
	}{
		{"rpcmetrics", ours.UnaryServerInterceptor(), ours.StreamServerInterceptor()},
		{"grpcprom", theirs.UnaryServerInterceptor(), theirs.StreamServerInterceptor()},
	} {
		b.Run("unary/"+c.name, func(b *testing.B) {
			info := &grpc.UnaryServerInfo{FullMethod: "/baton.queue.v1.QueueService/Add"}
			handler := func(context.Context, any) (any, error) { return nil, nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.unary(ctx, nil, info, handler)
			}
		})
		b.Run("stream-message/"+c.name, func(b *testing.B) {
			info := &grpc.StreamServerInfo{FullMethod: "/baton.queue.v1.QueueService/Work", IsClientStream: true, IsServerStream: true}
			b.ReportAllocs()
			_ = c.stream(nil, nopStream{}, info, func(_ any, s grpc.ServerStream) error {
				for b.Loop() {
					_ = s.SendMsg(nil)
				}
				return nil
			})
		})
	}
}

// TestSplit: a full method name's service and method.
func TestSplit(t *testing.T) {
	for full, want := range map[string]string{
		"/baton.queue.v1.QueueService/Add": "baton.queue.v1.QueueService Add",
		"/svc/m":                           "svc m",
		"bare":                             "unknown bare",
	} {
		s, m := split(full)
		if got := fmt.Sprint(s, " ", m); got != want {
			t.Errorf("split(%q) = %q, want %q", full, got, want)
		}
	}
}
