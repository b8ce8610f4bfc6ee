package limits

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIsWaitingLease(t *testing.T) {
	wait := func(d time.Duration) *queuev1.LeaseRequest {
		return &queuev1.LeaseRequest{Queue: "q", Wait: durationpb.New(d)}
	}
	cases := []struct {
		name   string
		method string
		req    any
		want   bool
	}{
		{"a wait", LeaseMethod, wait(time.Second), true},
		{"a wait under a second", LeaseMethod, wait(time.Millisecond), true},
		{"no wait", LeaseMethod, &queuev1.LeaseRequest{Queue: "q"}, false},
		{"a zero wait", LeaseMethod, wait(0), false},
		{"a negative wait", LeaseMethod, wait(-time.Second), false},
		{"another method", "/baton.queue.v1.QueueService/Ack", wait(time.Second), false},
		{"a request without a wait", LeaseMethod, &queuev1.AckRequest{}, false},
	}
	for _, tc := range cases {
		if got := IsWaitingLease(tc.method, tc.req); got != tc.want {
			t.Errorf("%s: IsWaitingLease = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIdentityLimit(t *testing.T) {
	roles := map[string]int{tlsfiles.RoleWorker: 16, tlsfiles.RoleAdmin: 4000, tlsfiles.RoleViewer: 2}
	cases := []struct {
		name  string
		cfg   Config
		roles []string
		want  int
	}{
		{"the default", Config{}, []string{tlsfiles.RoleWorker}, DefaultWaitingLeasesPerIdentity},
		{"the configured default", Config{WaitingLeasesPerIdentity: 8}, nil, 8},
		{"a role's, lower than the default", Config{RoleWaitingLeases: roles}, []string{tlsfiles.RoleWorker}, 16},
		{"the most generous role", Config{RoleWaitingLeases: roles}, []string{tlsfiles.RoleViewer, tlsfiles.RoleAdmin, tlsfiles.RoleWorker}, 4000},
		{"a role without one adds nothing", Config{RoleWaitingLeases: roles}, []string{tlsfiles.RoleObserver, tlsfiles.RoleViewer}, 2},
		{"no role named", Config{WaitingLeasesPerIdentity: 8, RoleWaitingLeases: roles}, []string{tlsfiles.RoleObserver}, 8},
	}
	for _, tc := range cases {
		if got := tc.cfg.identityLimit(tlsfiles.Identity{Name: "x", Roles: tc.roles}); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// callCtx is the context of a call from addr by a certificate of name and
// roles ("" name: no certificate).
func callCtx(addr, name string, roles ...string) context.Context {
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: mustPort(addr)}}
	if name != "" {
		subj := pkix.Name{CommonName: name}
		for _, r := range roles {
			subj.Organization = append(subj.Organization, tlsfiles.RolePrefix+r)
		}
		p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: subj}}}}
	}
	return peer.NewContext(context.Background(), p)
}

func mustPort(s string) int {
	_, p, err := net.SplitHostPort(s)
	if err != nil {
		panic(err)
	}
	port, err := net.LookupPort("tcp", p)
	if err != nil {
		panic(err)
	}
	return port
}

var waitingLease = &queuev1.LeaseRequest{Queue: "q", Wait: durationpb.New(time.Second)}

// TestBounds: each bound admits its count and refuses the next with its
// message, counted; other clients and calls that do not wait pass; and a
// place is given back when its call returns.
func TestBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := New(Config{WaitingLeasesPerConnection: 2, WaitingLeasesPerIdentity: 3}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ic := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: LeaseMethod}
	// held holds a call in its handler until release is closed.
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	var entered atomic.Int32
	hold := func(ctx context.Context) {
		started := make(chan struct{})
		wg.Go(func() {
			_, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) {
				entered.Add(1)
				close(started)
				<-release
				return nil, nil
			})
			if err != nil {
				t.Errorf("a held call: %v", err)
			}
		})
		<-started
	}
	call := func(ctx context.Context, req any) error {
		_, err := ic(ctx, req, info, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}

	a := callCtx("127.0.0.1:1001", "w1", tlsfiles.RoleWorker)
	hold(a)
	hold(a)
	err = call(a, waitingLease)
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "too many waiting Leases on connection 127.0.0.1:1001: 2 in flight (limit 2)" {
		t.Fatalf("a third waiting Lease on one connection: %v", err)
	}
	if err := call(a, &queuev1.LeaseRequest{Queue: "q"}); err != nil {
		t.Fatalf("a Lease that does not wait, on the full connection: %v", err)
	}
	b := callCtx("127.0.0.1:1002", "w1", tlsfiles.RoleWorker)
	hold(b)
	err = call(b, waitingLease)
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != `too many waiting Leases for identity "w1": 3 in flight (limit 3)` {
		t.Fatalf("a fourth waiting Lease of one identity: %v", err)
	}
	if err := call(callCtx("127.0.0.1:1003", "w2", tlsfiles.RoleWorker), waitingLease); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	if err := call(callCtx("127.0.0.1:1004", ""), waitingLease); err != nil {
		t.Fatalf("a client without an identity: %v", err)
	}
	if got, want := rejected(t, reg), map[string]float64{
		LimitWaitingLeasesPerConnection + " w1": 1,
		LimitWaitingLeasesPerIdentity + " w1":   1,
	}; !maps.Equal(got, want) {
		t.Errorf("%s = %v, want %v", RejectedMetric, got, want)
	}

	// Finished calls give their places back, and the maps forget them.
	if got := entered.Load(); got != 3 {
		t.Fatalf("%d calls held, want 3", got)
	}
	l.mu.Lock()
	conns, ids := len(l.byConn), len(l.byIdentity)
	l.mu.Unlock()
	if conns != 2 || ids != 1 {
		t.Fatalf("counts of %d connections and %d identities, want those of the held calls: 2 and 1", conns, ids)
	}
}

// TestRefusalShowsIdentityBounded: a CN of 60,000 bytes with a NUL and a
// right-to-left override, refused, is one bounded, escaped label value and
// one bounded message, not the CN raw (every refusal would otherwise
// carry it whole into a metric series and the client's error).
func TestRefusalShowsIdentityBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := New(Config{WaitingLeasesPerConnection: 5, WaitingLeasesPerIdentity: 1}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ic := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: LeaseMethod}
	cn := "\u202eevil\x00" + strings.Repeat("a", 60_000)
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	started := make(chan struct{})
	wg.Go(func() {
		_, _ = ic(callCtx("127.0.0.1:2001", cn, tlsfiles.RoleWorker), waitingLease, info, func(context.Context, any) (any, error) {
			close(started)
			<-release
			return nil, nil
		})
	})
	<-started
	_, err = ic(callCtx("127.0.0.1:2002", cn, tlsfiles.RoleWorker), waitingLease, info, func(context.Context, any) (any, error) { return nil, nil })
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.ResourceExhausted || len(msg) > 300 || strings.ContainsAny(msg, "\x00\u202e") {
		t.Errorf("refusal of the long CN: %v (%d bytes), want RESOURCE_EXHAUSTED, bounded and escaped", status.Code(err), len(msg))
	}
	for k := range rejected(t, reg) {
		if len(k) > 200 || strings.ContainsAny(k, "\x00\u202e") {
			t.Errorf("the identity label is %d bytes: %.80q…, want it bounded and escaped", len(k), k)
		}
	}
}

// rejected returns RejectedMetric's series in reg, by "<limit> <identity>".
func rejected(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != RejectedMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			out[labels["limit"]+" "+labels["identity"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestReleased: once calls return, their places are free again and the
// counts forget their clients.
func TestReleased(t *testing.T) {
	l, err := New(Config{WaitingLeasesPerConnection: 1, WaitingLeasesPerIdentity: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ic := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: LeaseMethod}
	ctx := callCtx("127.0.0.1:1001", "w1", tlsfiles.RoleWorker)
	for i := range 3 {
		if _, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
			t.Fatalf("call %d after the others returned: %v", i+1, err)
		}
	}
	// A failed call gives its place back too.
	if _, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) { return nil, status.Error(codes.Internal, "x") }); status.Code(err) != codes.Internal {
		t.Fatal(err)
	}
	if _, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatalf("after a failed call: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.byConn) != 0 || len(l.byIdentity) != 0 {
		t.Fatalf("counts left after every call returned: %v %v", l.byConn, l.byIdentity)
	}
}

// TestConcurrent: many clients racing for one identity's places never have
// more in their handlers than the bound, and every call either runs or is
// refused.
func TestConcurrent(t *testing.T) {
	const limit, callers, calls = 5, 32, 50
	l, err := New(Config{WaitingLeasesPerConnection: -1, WaitingLeasesPerIdentity: limit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ic := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: LeaseMethod}
	var inside, most, ran, refused atomic.Int32
	var wg sync.WaitGroup
	for c := range callers {
		ctx := callCtx(fmt.Sprintf("127.0.0.1:%d", 1000+c), "w1", tlsfiles.RoleWorker)
		wg.Go(func() {
			for range calls {
				_, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) {
					n := inside.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					inside.Add(-1)
					return nil, nil
				})
				switch status.Code(err) {
				case codes.OK:
					ran.Add(1)
				case codes.ResourceExhausted:
					refused.Add(1)
				default:
					t.Errorf("call: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Fatalf("%d calls in their handlers at once, bound %d", m, limit)
	}
	if ran.Load()+refused.Load() != callers*calls || ran.Load() == 0 {
		t.Fatalf("%d ran and %d refused of %d", ran.Load(), refused.Load(), callers*calls)
	}
}

// TestNewSharesCounter: two Limiters of one registry count in one series.
func TestNewSharesCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Config{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{}, reg)
	if err != nil {
		t.Fatalf("a second Limiter on one registry: %v", err)
	}
	if a.rejected != b.rejected {
		t.Fatal("the Limiters count in different counters")
	}
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: RejectedMetric, Help: "not a counter"}, []string{"limit", "identity"}))
	if _, err := New(Config{}, other); err == nil {
		t.Fatal("New accepted a registry whose collector of the name is not a counter")
	}
}

// ctxStream is a server stream with a context and nothing else.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// TestWorkStreamsCount: a work stream holds a waiting Lease's place for as
// long as it is open, so a connection's streams and waiting Leases share
// its bound; another stream method is not limited, and the place is given
// back when the stream ends.
func TestWorkStreamsCount(t *testing.T) {
	l, err := New(Config{WaitingLeasesPerConnection: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sic, uic := l.StreamServerInterceptor(), l.UnaryServerInterceptor()
	a := callCtx("127.0.0.1:2001", "w1", tlsfiles.RoleWorker)
	work := &grpc.StreamServerInfo{FullMethod: WorkMethod}
	release := make(chan struct{})
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Go(func() {
		err := sic(nil, ctxStream{ctx: a}, work, func(any, grpc.ServerStream) error {
			close(started)
			<-release
			return nil
		})
		if err != nil {
			t.Errorf("the first stream: %v", err)
		}
	})
	<-started
	lease := func() error {
		_, err := uic(a, waitingLease, &grpc.UnaryServerInfo{FullMethod: LeaseMethod}, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	if err := lease(); err != nil {
		t.Fatalf("a waiting Lease beside one stream, bound 2: %v", err)
	}
	stream := func(info *grpc.StreamServerInfo) error {
		return sic(nil, ctxStream{ctx: a}, info, func(any, grpc.ServerStream) error { return lease() })
	}
	// The second stream takes the last place: the waiting Lease inside it
	// is refused.
	if err := stream(work); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a waiting Lease beside two streams: %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := stream(&grpc.StreamServerInfo{FullMethod: "/baton.queue.v1.RaftService/Send"}); err != nil {
		t.Fatalf("another stream method takes no place: %v", err)
	}
	close(release)
	wg.Wait()
	if err := lease(); err != nil {
		t.Fatalf("after the stream ended: %v", err)
	}
}

// forwardedCtx is ctx with the metadata of a call a member forwarded for
// the client at conn with identity holder ("": none).
func forwardedCtx(ctx context.Context, conn, holder string) context.Context {
	md := metadata.Pairs(ForwardedKey, "1", ForwardedConnKey, conn)
	if holder != "" {
		md.Set(ForwardedHolderKey, holder)
	}
	return metadata.NewIncomingContext(ctx, md)
}

// TestForwardedCalls: a Limiter that trusts forwarded calls counts a
// member's forwarded waiting Leases against the clients they name, not
// against the member's connection and identity: one client's calls
// through the member fill their own bounds alone, and the refusals name
// that client. The handler learns the client too.
func TestForwardedCalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	l, err := New(Config{TrustForwarded: true, WaitingLeasesPerConnection: 1, WaitingLeasesPerIdentity: 2}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ic := l.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: LeaseMethod}
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()
	hold := func(ctx context.Context) {
		t.Helper()
		started := make(chan struct{})
		wg.Go(func() {
			if _, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) {
				close(started)
				<-release
				return nil, nil
			}); err != nil {
				t.Errorf("a held call: %v", err)
			}
		})
		<-started
	}
	call := func(ctx context.Context) error {
		_, err := ic(ctx, waitingLease, info, func(context.Context, any) (any, error) { return nil, nil })
		return err
	}
	member := callCtx("127.0.0.1:3001", "queue", tlsfiles.RoleQueuePeer)

	var got *Caller
	if _, err := ic(forwardedCtx(member, "10.0.0.7:5000", "w1"), &queuev1.AckRequest{}, &grpc.UnaryServerInfo{FullMethod: "/baton.queue.v1.QueueService/Ack"}, func(ctx context.Context, _ any) (any, error) {
		got, _ = ForwardedCaller(ctx)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Conn != "10.0.0.7:5000 via 127.0.0.1:3001" || got.Holder == nil || *got.Holder != "w1" {
		t.Fatalf("the handler's caller of a forwarded Ack: %+v, want w1 at 10.0.0.7:5000 via 127.0.0.1:3001", got)
	}

	hold(forwardedCtx(member, "10.0.0.7:5000", "w1"))
	err = call(forwardedCtx(member, "10.0.0.7:5000", "w1"))
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != "too many waiting Leases on connection 10.0.0.7:5000 via 127.0.0.1:3001: 1 in flight (limit 1)" {
		t.Fatalf("a second waiting Lease of one forwarded connection: %v", err)
	}
	hold(forwardedCtx(member, "10.0.0.7:5001", "w1"))
	err = call(forwardedCtx(member, "10.0.0.7:5002", "w1"))
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != `too many waiting Leases for identity "w1": 2 in flight (limit 2)` {
		t.Fatalf("a third forwarded waiting Lease of one identity: %v", err)
	}
	// Neither the member's connection nor its identity is full.
	hold(forwardedCtx(member, "10.0.0.8:5000", "w2"))
	if err := call(member); err != nil {
		t.Fatalf("the member's own waiting Lease: %v", err)
	}
	if got, want := rejected(t, reg), map[string]float64{
		LimitWaitingLeasesPerConnection + " w1": 1,
		LimitWaitingLeasesPerIdentity + " w1":   1,
	}; !maps.Equal(got, want) {
		t.Errorf("%s = %v, want %v", RejectedMetric, got, want)
	}
}

// TestForwardedMetadataBelievedFromMembersAlone: the metadata of a
// forwarded call names its client only at a Limiter that trusts forwarded
// calls, and there only from a member (a queue-peer certificate) or where
// there are no identities, and then only the connection; every other
// caller is itself.
func TestForwardedMetadataBelievedFromMembersAlone(t *testing.T) {
	trusting, err := New(Config{TrustForwarded: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		l    *Limiter
		ctx  context.Context
		want *Caller // nil: not forwarded
	}{
		{"a member", trusting, forwardedCtx(callCtx("127.0.0.1:3001", "queue", tlsfiles.RoleQueuePeer), "10.0.0.7:5000", "w1"),
			&Caller{Conn: "10.0.0.7:5000 via 127.0.0.1:3001", Holder: new("w1")}},
		{"a member, for a client without an identity", trusting, forwardedCtx(callCtx("127.0.0.1:3001", "queue", tlsfiles.RoleQueuePeer), "10.0.0.7:5000", ""),
			&Caller{Conn: "10.0.0.7:5000 via 127.0.0.1:3001"}},
		{"no identities", trusting, forwardedCtx(callCtx("127.0.0.1:3001", ""), "10.0.0.7:5000", "w1"),
			&Caller{Conn: "10.0.0.7:5000 via 127.0.0.1:3001"}},
		{"a worker", trusting, forwardedCtx(callCtx("127.0.0.1:3001", "w2", tlsfiles.RoleWorker), "10.0.0.7:5000", "w1"), nil},
		{"not forwarded", trusting, callCtx("127.0.0.1:3001", "queue", tlsfiles.RoleQueuePeer), nil},
		{"a member and a worker, at a Limiter that does not trust", plain,
			forwardedCtx(callCtx("127.0.0.1:3001", "w2", tlsfiles.RoleWorker, tlsfiles.RoleQueuePeer), "10.0.0.7:5000", "w1"), nil},
	}
	for _, tc := range cases {
		var unary, stream *Caller
		if _, err := tc.l.UnaryServerInterceptor()(tc.ctx, waitingLease, &grpc.UnaryServerInfo{FullMethod: LeaseMethod}, func(ctx context.Context, _ any) (any, error) {
			unary, _ = ForwardedCaller(ctx)
			return nil, nil
		}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := tc.l.StreamServerInterceptor()(nil, ctxStream{ctx: tc.ctx}, &grpc.StreamServerInfo{FullMethod: WorkMethod}, func(_ any, ss grpc.ServerStream) error {
			stream, _ = ForwardedCaller(ss.Context())
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, got := range []*Caller{unary, stream} {
			switch {
			case tc.want == nil && got != nil:
				t.Errorf("%s: caller %+v, want none", tc.name, *got)
			case tc.want != nil && (got == nil || got.Conn != tc.want.Conn || (got.Holder == nil) != (tc.want.Holder == nil) ||
				got.Holder != nil && *got.Holder != *tc.want.Holder):
				t.Errorf("%s: caller %+v, want %+v", tc.name, got, tc.want)
			}
		}
	}
}
