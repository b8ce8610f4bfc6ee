package dashboard

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// observerServer answers ObserverService Status with resp (or err) and
// grpc.health.v1 with what its health server is set to, over real gRPC on
// a loopback port: the observer's side of the wire as the queue meets it
// (the queue's module may not link the observer; the embedded stack's
// tests show the page a real one).
type observerServer struct {
	observerv1.UnimplementedObserverServiceServer
	mu   sync.Mutex
	resp *observerv1.StatusResponse
	err  error
}

func (s *observerServer) Status(context.Context, *observerv1.StatusRequest) (*observerv1.StatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resp, s.err
}

func (s *observerServer) set(resp *observerv1.StatusResponse, err error) {
	s.mu.Lock()
	s.resp, s.err = resp, err
	s.mu.Unlock()
}

// startObserver serves s and a health server on a loopback port; stop
// ends them.
func startObserver(t *testing.T, s *observerServer) (addr string, hs *health.Server, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs = health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	observerv1.RegisterObserverServiceServer(gs, s)
	hs.SetServingStatus(observerv1.ObserverService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	var once sync.Once
	stop = func() { once.Do(func() { gs.Stop(); <-done }) }
	t.Cleanup(stop)
	return lis.Addr().String(), hs, stop
}

// observerAt runs a dashboard whose observer is at addr until the test
// ends, and returns its URL.
func observerAt(t *testing.T, addr string, timeout time.Duration) string {
	t.Helper()
	w := NewObserverWatch(ObserverConfig{Addr: func() string { return addr }, PollEvery: 20 * time.Millisecond, CallTimeout: timeout})
	d := New(openBroker(t), Options{Observer: w})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	mux := http.NewServeMux()
	d.Handle(mux)
	srv := newServer(t, mux)
	return srv
}

func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + lis.Addr().String()
}

// observerJSONAt reads /api/observer, bounded: the handler must never wait
// on the observer.
func observerJSONAt(t *testing.T, base string) observerJSON {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/observer", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/api/observer: %v", err)
	}
	defer res.Body.Close()
	var o observerJSON
	if err := json.NewDecoder(res.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

// waitObserver polls /api/observer until ok holds.
func waitObserver(t *testing.T, base, what string, ok func(observerJSON) bool) observerJSON {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		o := observerJSONAt(t, base)
		if ok(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("/api/observer never %s: %+v", what, o)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// status is an observer's answer: two watches, one 10 revisions behind
// and not listed yet, an outbox with an error, a built-in rule, and two
// declarations, one in force (with its two rules) and one refused.
func status1() *observerv1.StatusResponse {
	return &observerv1.StatusResponse{
		Prefixes: []*observerv1.PrefixStatus{
			{Prefix: "/baton/rules/", ObservedRevision: 100, HeadRevision: 100, Listed: true},
			{Prefix: "/registry/greetings/", ObservedRevision: 90, HeadRevision: 100},
		},
		OutboxSize: 3,
		Outboxes:   []*observerv1.OutboxStatus{{Queue: "greetings", Size: 3, LastError: "queue unavailable"}},
		Rules: []*observerv1.Rule{
			{Queue: "pods", Prefix: "/registry/pods/", Source: observerv1.RuleSource_RULE_SOURCE_BUILTIN},
			{Queue: "greetings", Prefix: "/registry/greetings/", Source: observerv1.RuleSource_RULE_SOURCE_DECLARATION, DeclarationKey: "/baton/rules/greetings", IgnoreOwnStatus: true},
			{Queue: "greetings", Prefix: "/registry/pods/", OwnerKind: "Greeting", Source: observerv1.RuleSource_RULE_SOURCE_DECLARATION, DeclarationKey: "/baton/rules/greetings"},
		},
		Declarations: []*observerv1.DeclarationStatus{
			{Key: "/baton/rules/greetings", ModRevision: 7, Queue: "greetings", InForceRevision: 7},
			{Key: "/baton/rules/broken", ModRevision: 9, Refused: `declaration: queue "Bad" is not a DNS label`},
		},
	}
}

// TestObserverStatusShown: /api/observer shows what the observer last
// said: ready or not and why, its lag, outboxes, the rules and the
// controllers' declarations with the rules each put in force; a Status the
// observer refuses says so; and an observer that stops answering shows as
// unreachable with its last answer kept.
func TestObserverStatusShown(t *testing.T) {
	if o := observerJSONAt(t, serveWith(t, openBroker(t), Options{})); o.Configured {
		t.Errorf("without an observer: %+v, want configured false", o)
	}

	s := &observerServer{}
	s.set(status1(), nil)
	addr, hs, stop := startObserver(t, s)
	base := observerAt(t, addr, 5*time.Second)
	o := waitObserver(t, base, "answered", func(o observerJSON) bool { return o.AnsweredMs != 0 })
	if !o.Configured || o.Addr != addr || !o.Reachable || !o.Ready || o.Error != "" || o.NotReady != "" || o.StatusError != "" {
		t.Errorf("a ready observer: %+v", o)
	}
	if o.LagRevisions != 10 || len(o.Prefixes) != 2 || o.Prefixes[1].Lag != 10 || o.Prefixes[1].Listed || !o.Prefixes[0].Listed {
		t.Errorf("lag %d, prefixes %+v: want 10, the second 10 behind and not listed", o.LagRevisions, o.Prefixes)
	}
	if o.OutboxSize != 3 || len(o.Outboxes) != 1 || o.Outboxes[0].LastError != "queue unavailable" {
		t.Errorf("outboxes %d %+v", o.OutboxSize, o.Outboxes)
	}
	if len(o.Rules) != 1 || o.Rules[0].Queue != "pods" || o.Rules[0].Source != "built in" {
		t.Errorf("rules %+v, want the built-in one alone (the others are the declaration's)", o.Rules)
	}
	if len(o.Declarations) != 2 {
		t.Fatalf("declarations %+v, want 2", o.Declarations)
	}
	if d := o.Declarations[0]; d.Queue != "greetings" || d.InForceRevision != 7 || d.Refused != "" || len(d.Watches) != 2 ||
		d.Watches[0].Prefix != "/registry/greetings/" || !d.Watches[0].IgnoreOwnStatus || d.Watches[1].OwnerKind != "Greeting" {
		t.Errorf("the greetings declaration: %+v", d)
	}
	if d := o.Declarations[1]; d.Key != "/baton/rules/broken" || d.InForceRevision != 0 || !strings.Contains(d.Refused, "not a DNS label") || len(d.Watches) != 0 {
		t.Errorf("the refused declaration: %+v", d)
	}

	hs.SetServingStatus(observerv1.ObserverService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	o = waitObserver(t, base, "not ready", func(o observerJSON) bool { return !o.Ready })
	if !o.Reachable || !strings.Contains(o.NotReady, "NOT_SERVING") || o.Error != "" {
		t.Errorf("an observer not ready: %+v", o)
	}

	s.set(nil, status.Error(codes.PermissionDenied, `authz: "queue" (roles queue-peer) may not call /baton.observer.v1.ObserverService/Status`))
	o = waitObserver(t, base, "refused Status", func(o observerJSON) bool { return o.StatusError != "" })
	if !strings.Contains(o.StatusError, "PermissionDenied") || len(o.Declarations) != 2 {
		t.Errorf("a refused Status: %+v, want the refusal and the last answer kept", o)
	}

	answered := o.AnsweredMs
	stop()
	o = waitObserver(t, base, "unreachable", func(o observerJSON) bool { return !o.Reachable })
	if o.Ready || o.Error == "" || o.AnsweredMs != answered || len(o.Declarations) != 2 || o.CheckedMs <= answered {
		t.Errorf("a stopped observer: %+v, want unreachable, an error, and the last answer (at %d) kept", o, answered)
	}
}

// TestDownObserverNeverHoldsThePage: an observer that accepts connections
// and never answers holds neither /api/observer nor the queues' page,
// however long its calls may wait; with a short timeout it shows as
// unreachable.
func TestDownObserverNeverHoldsThePage(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})

	// Calls that would wait an hour: the page answers meanwhile, saying
	// the observer is not checked yet.
	base := observerAt(t, lis.Addr().String(), time.Hour)
	for range 5 {
		if o := observerJSONAt(t, base); !o.Configured || o.CheckedMs != 0 {
			t.Fatalf("while the first poll waits: %+v, want configured and not checked yet", o)
		}
		res, body := get(t, base+"/api/queues")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("/api/queues while the observer hangs: %d %s", res.StatusCode, body)
		}
	}

	base = observerAt(t, lis.Addr().String(), 100*time.Millisecond)
	o := waitObserver(t, base, "checked", func(o observerJSON) bool { return o.CheckedMs != 0 })
	if o.Reachable || o.Ready || !strings.Contains(o.Error, "DeadlineExceeded") || o.AnsweredMs != 0 {
		t.Errorf("an observer that never answers: %+v, want unreachable after the call's timeout", o)
	}
}
