package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"strings"
	"testing"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// fakeStream is a server stream whose client sent msgs, from a peer with
// cert.
type fakeStream struct {
	ctx  context.Context
	msgs []proto.Message
	recv int // messages taken
	sent int
}

func newFakeStream(ctx context.Context, cert *x509.Certificate, msgs ...proto.Message) *fakeStream {
	ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}})
	return &fakeStream{ctx: ctx, msgs: msgs}
}

func (f *fakeStream) Context() context.Context     { return f.ctx }
func (f *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeStream) SendHeader(metadata.MD) error { return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       {}
func (f *fakeStream) SendMsg(any) error            { f.sent++; return nil }
func (f *fakeStream) RecvMsg(m any) error {
	if f.recv == len(f.msgs) {
		return io.EOF
	}
	proto.Merge(m.(proto.Message), f.msgs[f.recv])
	f.recv++
	return nil
}

// TestStreamQueueCheck drives the stream interceptor with handlers that
// behave well and badly, under a policy that binds workers to greetings.
func TestStreamQueueCheck(t *testing.T) {
	p := newPKI(t)
	worker := p.issue(t, workerName, "baton:worker")
	policy := mustParse(t, greetingsPolicy)
	info := &grpc.StreamServerInfo{FullMethod: queueWork, IsClientStream: true, IsServerStream: true}
	newWork := func() any { return dynamicpb.NewMessage(workRequestDesc) }

	t.Run("allowed queue", func(t *testing.T) {
		a, _, _ := newTestAuthorizer(t, policy)
		fs := newFakeStream(t.Context(), worker, workOpen("greetings"), workAck())
		err := a.StreamServerInterceptor()(nil, fs, info, func(_ any, ss grpc.ServerStream) error {
			for range 2 {
				if err := ss.RecvMsg(newWork()); err != nil {
					return err
				}
				if err := ss.SendMsg(&queuev1.AckResponse{}); err != nil {
					return err
				}
			}
			if err := ss.RecvMsg(newWork()); err != io.EOF {
				t.Errorf("after the client's last message: %v, want io.EOF", err)
			}
			return nil
		})
		if err != nil || fs.recv != 2 || fs.sent != 2 {
			t.Fatalf("got %v, %d received, %d sent; want nil, 2, 2", err, fs.recv, fs.sent)
		}
	})

	t.Run("denied queue, a handler that ignores it", func(t *testing.T) {
		a, reg, logs := newTestAuthorizer(t, policy)
		fs := newFakeStream(t.Context(), worker, workOpen("payments"), workAck())
		var recvErrs []error
		var sendErr error
		err := a.StreamServerInterceptor()(nil, fs, info, func(_ any, ss grpc.ServerStream) error {
			recvErrs = append(recvErrs, ss.RecvMsg(newWork()), ss.RecvMsg(newWork()))
			sendErr = ss.SendMsg(&queuev1.AckResponse{})
			return nil // as if nothing were wrong
		})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `on queue "payments"`) {
			t.Fatalf("the stream ended with %v, want PERMISSION_DENIED naming the queue", err)
		}
		for i, e := range append(recvErrs, sendErr) {
			if status.Code(e) != codes.PermissionDenied {
				t.Errorf("call %d on the denied stream: %v, want PERMISSION_DENIED", i, e)
			}
		}
		if fs.recv != 1 || fs.sent != 0 {
			t.Errorf("%d messages received and %d sent through the denied stream, want 1 and 0", fs.recv, fs.sent)
		}
		if got := deniedCount(t, reg, queueWork, workerName); got != 1 {
			t.Errorf("counted %v, want 1", got)
		}
		if got := logs.lines(`"level":"WARN"`); len(got) != 1 {
			t.Errorf("logged %d lines, want 1 per call: %q", len(got), got)
		}
	})

	t.Run("a first message without open", func(t *testing.T) {
		a, _, _ := newTestAuthorizer(t, policy)
		fs := newFakeStream(t.Context(), worker, workAck())
		err := a.StreamServerInterceptor()(nil, fs, info, func(_ any, ss grpc.ServerStream) error {
			return ss.RecvMsg(newWork())
		})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `on queue ""`) {
			t.Fatalf("got %v, want PERMISSION_DENIED on queue \"\"", err)
		}
	})

	t.Run("a handler that sends first", func(t *testing.T) {
		a, _, _ := newTestAuthorizer(t, policy)
		fs := newFakeStream(t.Context(), worker, workOpen("greetings"))
		err := a.StreamServerInterceptor()(nil, fs, info, func(_ any, ss grpc.ServerStream) error {
			return ss.SendMsg(&queuev1.AckResponse{})
		})
		if status.Code(err) != codes.Internal || fs.sent != 0 {
			t.Fatalf("got %v with %d sent, want INTERNAL and nothing sent", err, fs.sent)
		}
	})

	t.Run("a first message that names its queue", func(t *testing.T) {
		a, _, _ := newTestAuthorizer(t, policy)
		lease := &grpc.StreamServerInfo{FullMethod: queuev1.QueueService_Lease_FullMethodName, IsServerStream: true}
		for q, want := range map[string]codes.Code{"greetings": codes.OK, "payments": codes.PermissionDenied} {
			fs := newFakeStream(t.Context(), worker, &queuev1.LeaseRequest{Queue: q})
			err := a.StreamServerInterceptor()(nil, fs, lease, func(_ any, ss grpc.ServerStream) error {
				return ss.RecvMsg(&queuev1.LeaseRequest{})
			})
			if status.Code(err) != want {
				t.Errorf("queue %s: %v, want %v", q, err, want)
			}
		}
	})

	t.Run("denied at the start", func(t *testing.T) {
		a, _, _ := newTestAuthorizer(t, policy)
		viewer := p.issue(t, viewerName, "baton:viewer")
		fs := newFakeStream(t.Context(), viewer, workOpen("greetings"))
		ran := false
		err := a.StreamServerInterceptor()(nil, fs, info, func(any, grpc.ServerStream) error { ran = true; return nil })
		if status.Code(err) != codes.PermissionDenied || ran || fs.recv != 0 {
			t.Fatalf("got %v, handler ran %v, %d received; want PERMISSION_DENIED before anything", err, ran, fs.recv)
		}
	})
}

func newTestAuthorizer(t *testing.T, policy *Policy) (*Authorizer, *prometheus.Registry, *logBuffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	a, err := New(Options{Policy: policy, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return a, reg, logs
}

// TestFirstQueueOf checks where a stream's queue is read from.
func TestFirstQueueOf(t *testing.T) {
	cases := []struct {
		name string
		m    any
		want string
	}{
		{"a request with a queue", &queuev1.AddRequest{Queue: "a"}, "a"},
		{"open", workOpen("b"), "b"},
		{"not open", workAck(), ""},
		{"empty", dynamicpb.NewMessage(workRequestDesc), ""},
		{"a message without queue or open", &queuev1.AckResponse{}, ""},
		{"not a message", "hello", ""},
	}
	for _, tc := range cases {
		if got := firstQueueOf(tc.m); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestNewSharesCounter checks that two Authorizers on one registry count
// into one counter, and that a different collector under the name is an
// error.
func TestNewSharesCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	a1, err := New(Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := New(Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	a1.denied.WithLabelValues("m", "x").Inc()
	a2.denied.WithLabelValues("m", "x").Inc()
	if got := deniedCount(t, reg, "m", "x"); got != 2 {
		t.Fatalf("counted %v, want 2", got)
	}
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: DeniedMetric, Help: "not ours"}))
	if _, err := New(Options{Registerer: other}); err == nil {
		t.Fatal("New registered over a different collector")
	}
}
