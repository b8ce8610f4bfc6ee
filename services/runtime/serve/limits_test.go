package serve

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/batonrun/baton/services/runtime/limits"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// leaseStub is a QueueService whose Lease with a wait blocks until its
// queue is released (or the call ends), and which counts the Leases in
// its handler by identity ("" without one).
type leaseStub struct {
	queuev1.UnimplementedQueueServiceServer

	mu       sync.Mutex
	inFlight map[string]int
	released map[string]chan struct{} // queue → closed when released
}

func newLeaseStub() *leaseStub {
	return &leaseStub{inFlight: map[string]int{}, released: map[string]chan struct{}{}}
}

func (s *leaseStub) register(srv *grpc.Server) []string {
	queuev1.RegisterQueueServiceServer(srv, s)
	return []string{queuev1.QueueService_ServiceDesc.ServiceName}
}

func (s *leaseStub) queue(q string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.released[q]
	if !ok {
		ch = make(chan struct{})
		s.released[q] = ch
	}
	return ch
}

// release lets the waiting Leases of queue q return.
func (s *leaseStub) release(q string) { close(s.queue(q)) }

func (s *leaseStub) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight[id]
}

func (s *leaseStub) Lease(ctx context.Context, req *queuev1.LeaseRequest) (*queuev1.LeaseResponse, error) {
	id, _ := tlsfiles.IdentityFromPeer(ctx)
	s.mu.Lock()
	s.inFlight[id.Name]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight[id.Name]--
		s.mu.Unlock()
	}()
	if req.GetWait().AsDuration() <= 0 {
		return &queuev1.LeaseResponse{}, nil
	}
	select {
	case <-s.queue(req.GetQueue()):
		return &queuev1.LeaseResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// client is one connection to a test server.
type client struct {
	q     queuev1.QueueServiceClient
	local string // the connection's own address, as the server sees it
}

// dial opens a connection to addr with src's certificate (plaintext for
// nil) and connects it, so that the server knows its address.
func dial(t *testing.T, addr string, src *tlsfiles.Source) client {
	t.Helper()
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	if src != nil {
		creds = grpc.WithTransportCredentials(src.ClientCredentials(""))
	}
	locals := make(chan string, 1)
	conn, err := grpc.NewClient(addr, creds, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		if err == nil {
			select {
			case locals <- c.LocalAddr().String():
			default: // a reconnection; the tests make none
			}
		}
		return c, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Closed before the server stops (cleanups run last first), which ends
	// the calls still waiting.
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	q := queuev1.NewQueueServiceClient(conn)
	if _, err := q.Lease(ctx, &queuev1.LeaseRequest{Queue: "connect"}); err != nil {
		t.Fatalf("a Lease without a wait: %v", err)
	}
	return client{q: q, local: <-locals}
}

// wait starts a waiting Lease on queue and returns its result's channel.
func (c client) wait(t *testing.T, queue string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.q.Lease(t.Context(), &queuev1.LeaseRequest{Queue: queue, Wait: durationpb.New(30 * time.Second)})
		done <- err
	}()
	return done
}

// waitNow makes a waiting Lease and returns its error, the call bounded by
// 10 s: one beyond a bound is refused at once.
func (c client) waitNow(t *testing.T, queue string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := c.q.Lease(ctx, &queuev1.LeaseRequest{Queue: queue, Wait: durationpb.New(time.Millisecond)})
	return err
}

// refused checks that err is RESOURCE_EXHAUSTED with msg.
func refused(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != msg {
		t.Fatalf("%s: %v; want RESOURCE_EXHAUSTED %q", what, err, msg)
	}
}

// rejected returns limits.RejectedMetric's series in reg, by
// "<limit> <identity>".
func rejected(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != limits.RejectedMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out[l["limit"]+" "+l["identity"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

// limitCerts writes a CA and certificates for 127.0.0.1: server (role
// queue-peer), worker-1 and worker-2 (worker), both (worker and admin),
// observer-1 (observer).
func limitCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA(2, now)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.1"}
	leaf := func(name string, roles ...string) certs.Leaf {
		return certs.Leaf{Name: name, Roles: roles, Hosts: hosts, Days: 1}
	}
	if _, err := certs.Init(dir, ca, []certs.Leaf{
		leaf("server", tlsfiles.RoleQueuePeer),
		leaf("worker-1", tlsfiles.RoleWorker),
		leaf("worker-2", tlsfiles.RoleWorker),
		leaf("both", tlsfiles.RoleWorker, tlsfiles.RoleAdmin),
		leaf("observer-1", tlsfiles.RoleObserver),
	}, false, now); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWaitingLeasesPerIdentity: at a real mutual-TLS server, one
// identity's waiting Leases are bounded over all its connections, and each
// connection's on its own; one more gets RESOURCE_EXHAUSTED naming the
// bound, counted by limit and identity; another identity and a Lease that
// does not wait are unaffected; and when one returns, a new one is
// admitted.
func TestWaitingLeasesPerIdentity(t *testing.T) {
	dir := limitCerts(t)
	stub := newLeaseStub()
	reg := prometheus.NewRegistry()
	g, _ := runServe(t, Options{
		Name: "test", GRPCAddr: "127.0.0.1:0", Register: stub.register, Registry: reg,
		TLS:    load(t, dir, "server", true),
		Limits: limits.Config{WaitingLeasesPerConnection: 2, WaitingLeasesPerIdentity: 3},
	})
	w1 := load(t, dir, "worker-1", true)
	a, b := dial(t, g, w1), dial(t, g, w1)
	other := dial(t, g, load(t, dir, "worker-2", true))

	held := map[string]<-chan error{"a0": a.wait(t, "a0"), "a1": a.wait(t, "a1")}
	waitFor(t, "worker-1 waits on 2 Leases", func() bool { return stub.count("worker-1") == 2 })
	refused(t, "a third waiting Lease on one connection", a.waitNow(t, "a2"),
		fmt.Sprintf("too many waiting Leases on connection %s: 2 in flight (limit 2)", a.local))

	held["b0"] = b.wait(t, "b0")
	waitFor(t, "worker-1 waits on 3 Leases", func() bool { return stub.count("worker-1") == 3 })
	refused(t, "a fourth waiting Lease of one identity, on its second connection", b.waitNow(t, "b1"),
		`too many waiting Leases for identity "worker-1": 3 in flight (limit 3)`)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := b.q.Lease(ctx, &queuev1.LeaseRequest{Queue: "b1"}); err != nil {
		t.Fatalf("a Lease without a wait, of the identity at its bound: %v", err)
	}
	o := other.wait(t, "o0")
	waitFor(t, "worker-2 waits on a Lease beside worker-1's", func() bool { return stub.count("worker-2") == 1 })

	stub.release("a0")
	if err := <-held["a0"]; err != nil {
		t.Fatalf("the released Lease: %v", err)
	}
	held["a2"] = a.wait(t, "a2")
	waitFor(t, "worker-1 waits on a new Lease once one returned", func() bool { return stub.count("worker-1") == 3 })
	refused(t, "a fourth waiting Lease of one identity again", b.waitNow(t, "b3"),
		`too many waiting Leases for identity "worker-1": 3 in flight (limit 3)`)

	want := map[string]float64{
		limits.LimitWaitingLeasesPerConnection + " worker-1": 1,
		limits.LimitWaitingLeasesPerIdentity + " worker-1":   2,
	}
	if got := rejected(t, reg); !maps.Equal(got, want) {
		t.Errorf("%s = %v, want %v", limits.RejectedMetric, got, want)
	}
	for _, q := range []string{"a1", "a2", "b0", "o0"} {
		stub.release(q)
	}
	for q, ch := range held {
		if q != "a0" {
			if err := <-ch; err != nil {
				t.Errorf("Lease on %s: %v", q, err)
			}
		}
	}
	if err := <-o; err != nil {
		t.Errorf("worker-2's Lease: %v", err)
	}
}

// TestWaitingLeasesPerConnection: without TLS there is no identity, and a
// plaintext server bounds each connection's waiting Leases on its own: a
// second connection from the same address is unaffected.
func TestWaitingLeasesPerConnection(t *testing.T) {
	stub := newLeaseStub()
	reg := prometheus.NewRegistry()
	g, _ := runServe(t, Options{
		Name: "test", GRPCAddr: "127.0.0.1:0", Register: stub.register, Registry: reg,
		Limits: limits.Config{WaitingLeasesPerConnection: 2},
	})
	a, b := dial(t, g, nil), dial(t, g, nil)
	held := []<-chan error{a.wait(t, "a0"), a.wait(t, "a1")}
	waitFor(t, "2 waiting Leases", func() bool { return stub.count("") == 2 })
	refused(t, "a third waiting Lease on one connection", a.waitNow(t, "a2"),
		fmt.Sprintf("too many waiting Leases on connection %s: 2 in flight (limit 2)", a.local))
	held = append(held, b.wait(t, "b0"), b.wait(t, "b1"))
	waitFor(t, "another connection's 2 waiting Leases", func() bool { return stub.count("") == 4 })
	refused(t, "a third waiting Lease on the other connection", b.waitNow(t, "b2"),
		fmt.Sprintf("too many waiting Leases on connection %s: 2 in flight (limit 2)", b.local))

	want := map[string]float64{limits.LimitWaitingLeasesPerConnection + " ": 2}
	if got := rejected(t, reg); !maps.Equal(got, want) {
		t.Errorf("%s = %v, want %v", limits.RejectedMetric, got, want)
	}
	for _, q := range []string{"a0", "a1", "b0", "b1"} {
		stub.release(q)
	}
	for _, ch := range held {
		if err := <-ch; err != nil {
			t.Errorf("a released Lease: %v", err)
		}
	}
}

// rolePolicy allows Lease to workers, admins and observers, and bounds the
// waiting Leases of workers at 2 and of admins at 4; observers have the
// server's default.
const rolePolicy = `allow:
  - roles: [worker, admin, observer]
    methods: [/baton.queue.v1.QueueService/Lease]
limits:
  - roles: [worker]
    waiting_leases: 2
  - roles: [admin]
    waiting_leases: 4
`

// TestPolicyRoleLimits: the policy file's limits bound each identity by
// its roles, the most generous of them, and an identity whose roles it
// does not name by the server's default.
func TestPolicyRoleLimits(t *testing.T) {
	dir := limitCerts(t)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(rolePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, err := authz.Load(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	stub := newLeaseStub()
	g, _ := runServe(t, Options{
		Name: "test", GRPCAddr: "127.0.0.1:0", Register: stub.register,
		TLS: load(t, dir, "server", true), AuthzPolicy: policy,
		Limits: limits.Config{WaitingLeasesPerIdentity: 3},
	})
	for _, tc := range []struct {
		name  string
		limit int
	}{
		{"worker-1", 2},   // worker
		{"both", 4},       // worker and admin: admin's is the more generous
		{"observer-1", 3}, // no limit names observer: the server's default
	} {
		c := dial(t, g, load(t, dir, tc.name, true))
		var held []<-chan error
		for i := range tc.limit {
			held = append(held, c.wait(t, fmt.Sprintf("%s-%d", tc.name, i)))
		}
		waitFor(t, fmt.Sprintf("%s waits on %d Leases", tc.name, tc.limit), func() bool { return stub.count(tc.name) == tc.limit })
		refused(t, tc.name+"'s Lease beyond its bound", c.waitNow(t, tc.name+"-more"),
			fmt.Sprintf("too many waiting Leases for identity %q: %d in flight (limit %d)", tc.name, tc.limit, tc.limit))
		for i := range tc.limit {
			stub.release(fmt.Sprintf("%s-%d", tc.name, i))
		}
		for _, ch := range held {
			if err := <-ch; err != nil {
				t.Errorf("%s's released Lease: %v", tc.name, err)
			}
		}
	}
}

// TestPeerListenerCountsForwardedCallers: the peer listener counts the
// waiting Leases a member forwards against the clients the member names,
// not against the member's connection, and lets that one connection open
// more calls than a client's may: a member forwards every call of all its
// clients over it.
func TestPeerListenerCountsForwardedCallers(t *testing.T) {
	dir := limitCerts(t)
	peers, err := authz.Compile([]authz.Rule{{Roles: []string{tlsfiles.RoleQueuePeer}, Methods: []string{"/" + queuev1.QueueService_ServiceDesc.ServiceName + "/*"}}})
	if err != nil {
		t.Fatal(err)
	}
	stub := newLeaseStub()
	peerAddr := make(chan string, 1)
	runServe(t, Options{
		Name: "test", GRPCAddr: "127.0.0.1:0", Register: stub.register,
		PeerAddr: "127.0.0.1:0", RegisterPeer: func(s *grpc.Server) { stub.register(s) },
		OnPeerListen:    func(a net.Addr) { peerAddr <- a.String() },
		PeerAuthzPolicy: peers,
		PeerLimits:      limits.Config{WaitingLeasesPerConnection: 1, WaitingLeasesPerIdentity: -1},
		TLS:             load(t, dir, "server", true),
	})
	member := dial(t, <-peerAddr, load(t, dir, "server", true))
	forwarded := func(ctx context.Context, conn string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, limits.ForwardedKey, "1", limits.ForwardedConnKey, conn, limits.ForwardedHolderKey, "worker-1")
	}
	var held []<-chan error
	waitOn := func(ctx context.Context, queue string) {
		done := make(chan error, 1)
		go func() {
			_, err := member.q.Lease(ctx, &queuev1.LeaseRequest{Queue: queue, Wait: durationpb.New(30 * time.Second)})
			done <- err
		}()
		held = append(held, done)
	}
	waitOn(forwarded(t.Context(), "10.0.0.7:5000"), "a")
	waitOn(forwarded(t.Context(), "10.0.0.7:5001"), "b")
	waitFor(t, "two forwarded clients' waiting Leases on one member connection, bound 1", func() bool { return stub.count("server") == 2 })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = member.q.Lease(forwarded(ctx, "10.0.0.7:5000"), &queuev1.LeaseRequest{Queue: "a", Wait: durationpb.New(time.Millisecond)})
	refused(t, "a forwarded client's second waiting Lease", err,
		fmt.Sprintf("too many waiting Leases on connection 10.0.0.7:5000 via %s: 1 in flight (limit 1)", member.local))

	// Past a client connection's bound of streams, on the member's one
	// connection.
	for i := range MaxConcurrentStreams {
		waitOn(forwarded(t.Context(), fmt.Sprintf("10.0.1.%d:%d", i/250, 5000+i%250)), "c")
	}
	waitFor(t, fmt.Sprintf("%d waiting Leases on one member connection", MaxConcurrentStreams+2), func() bool { return stub.count("server") == MaxConcurrentStreams+2 })
	for _, q := range []string{"a", "b", "c"} {
		stub.release(q)
	}
	for _, ch := range held {
		if err := <-ch; err != nil {
			t.Errorf("a released Lease: %v", err)
		}
	}
}
