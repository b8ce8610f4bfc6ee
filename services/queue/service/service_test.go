package service_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/service"
	"github.com/batonrun/baton/services/runtime/serve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// harness is one real queue service on 127.0.0.1:0 with a client.
type harness struct {
	grpcAddr, httpAddr string
	c                  *queueclient.Client
	raw                queuev1.QueueServiceClient
	conn               *grpc.ClientConn
	// stop cancels Run and returns how long it took to return, and its error.
	stop func() (time.Duration, error)
}

// start runs service.Run in the background on loopback ports and a fresh
// data directory, and stops it when the test ends.
func start(t *testing.T) *harness {
	t.Helper()
	return startIn(t, t.TempDir())
}

// startBench is start for a benchmark.
func startBench(b *testing.B) *harness { return startWith(b, b.TempDir(), nil) }

// startIn is start on the data directory dir.
func startIn(t *testing.T, dir string) *harness {
	t.Helper()
	return startWith(t, dir, nil)
}

// startWith is startIn with the configuration changed by mod (nil: none).
func startWith(t testing.TB, dir string, mod func(*service.Config)) *harness {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", dir
	cfg.GracePeriod = 2 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	addrs := make(chan [2]net.Addr, 1)
	cfg.OnListen = func(g, h net.Addr) { addrs <- [2]net.Addr{g, h} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, cfg, nil) }()
	var h harness
	var once sync.Once
	var took time.Duration
	var runErr error
	h.stop = func() (time.Duration, error) {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(10 * time.Second):
				runErr = errors.New("service.Run did not return within 10s of cancellation")
			}
			took = time.Since(start)
		})
		return took, runErr
	}
	t.Cleanup(func() {
		if _, err := h.stop(); err != nil {
			t.Errorf("service.Run: %v", err)
		}
	})
	select {
	case a := <-addrs:
		h.grpcAddr, h.httpAddr = a[0].String(), a[1].String()
	case err := <-done:
		t.Fatalf("service.Run returned before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("service did not listen within 30s")
	}
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.conn = conn
	h.c = queueclient.New(conn, queueclient.WithBackoff(queueclient.Backoff{Attempts: 1}))
	h.raw = h.c.Raw()
	return &h
}

// rawMessage and rawCodec carry a request's wire bytes as they are.
type rawMessage struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*rawMessage).b, nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	v.(*rawMessage).b = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

// keysOf returns n distinct keys of size bytes each.
func keysOf(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		k := fmt.Sprintf("%06d", i)
		out[i] = k + strings.Repeat("k", size-len(k))
	}
	return out
}

// snapshot is everything a queue shows about its stored state, minus the
// ages that move with the clock.
type snapshot struct {
	stats *queuev1.QueueStats // nil when Stats answers NOT_FOUND
	items []*queuev1.Item
}

func snap(t *testing.T, h *harness, queue string) snapshot {
	t.Helper()
	ctx := ctxT(t)
	var s snapshot
	resp, err := h.raw.Stats(ctx, &queuev1.StatsRequest{Queue: queue})
	switch status.Code(err) {
	case codes.OK:
		s.stats = resp.GetQueues()[0]
		s.stats.OldestPendingAge, s.stats.LongestLeaseAge = nil, nil
	case codes.NotFound:
	default:
		t.Fatalf("stats %s: %v", queue, err)
	}
	items, err := h.c.List(ctx, queue, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.items = items
	return s
}

func (s snapshot) equal(o snapshot) bool {
	if (s.stats == nil) != (o.stats == nil) || (s.stats != nil && !proto.Equal(s.stats, o.stats)) {
		return false
	}
	return slices.EqualFunc(s.items, o.items, func(a, b *queuev1.Item) bool { return proto.Equal(a, b) })
}

func (s snapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stats=%v items=[", s.stats)
	for _, it := range s.items {
		fmt.Fprintf(&b, " %s:%v", it.GetKey(), it.GetState())
	}
	b.WriteString(" ]")
	return b.String()
}

// TestRefusedRequests sends every request docs/design.md's "Refusals" bullet
// refuses and checks the exact code and that nothing was stored: neither in
// a queue that holds keys (a pending "p1", a leased "l1") nor in a queue the
// request would have created.
func TestRefusedRequests(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q, fresh = "work", "fresh"
	if _, err := h.c.Add(ctx, q, []string{"p1", "l1"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	// FIFO: l1 was added second, so lease p1 first and give it back.
	leases, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "w", MaxItems: 2, Duration: 5 * time.Minute})
	if err != nil || len(leases) != 2 {
		t.Fatalf("lease: %v %v", leases, err)
	}
	var live queueclient.Lease
	for _, l := range leases {
		if l.Key == "p1" {
			if _, err := h.c.Ack(ctx, q, []queueclient.Ack{{Key: l.Key, Token: l.Token, Outcome: queueclient.RequeueAfter(0)}}); err != nil {
				t.Fatal(err)
			}
		} else {
			live = l
		}
	}

	long := strings.Repeat("x", 1025)
	tooMany := keysN("k", 10001)
	tooManyAcks := make([]*queuev1.Ack, 10001)
	tooManyRefs := make([]*queuev1.LeaseRef, 10001)
	for i := range tooManyAcks {
		tooManyAcks[i] = &queuev1.Ack{Key: tooMany[i], Token: 1, Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}
		tooManyRefs[i] = &queuev1.LeaseRef{Key: tooMany[i], Token: 1}
	}
	success := &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}
	liveAck := &queuev1.Ack{Key: live.Key, Token: live.Token, Outcome: success}

	type call func(context.Context, queuev1.QueueServiceClient) error
	// notUTF8 sends req with every "bad?" in it turned into "bad\xff" on the
	// wire, as a client in a language that does not check UTF-8 would; the Go
	// client refuses to marshal such a string itself.
	notUTF8 := func(method string, req proto.Message) call {
		return func(ctx context.Context, _ queuev1.QueueServiceClient) error {
			b, err := proto.Marshal(req)
			if err != nil {
				return err
			}
			b = bytes.ReplaceAll(b, []byte("bad?"), []byte("bad\xff"))
			var out rawMessage
			return h.conn.Invoke(ctx, "/baton.queue.v1.QueueService/"+method, &rawMessage{b}, &out, grpc.ForceCodec(rawCodec{}))
		}
	}
	add := func(r *queuev1.AddRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Add(ctx, r); return err }
	}
	lease := func(r *queuev1.LeaseRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Lease(ctx, r); return err }
	}
	ack := func(r *queuev1.AckRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Ack(ctx, r); return err }
	}
	extend := func(r *queuev1.ExtendRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Extend(ctx, r); return err }
	}
	forget := func(r *queuev1.ForgetRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Forget(ctx, r); return err }
	}
	inspect := func(r *queuev1.InspectRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Inspect(ctx, r); return err }
	}
	list := func(r *queuev1.ListRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.List(ctx, r); return err }
	}
	stats := func(r *queuev1.StatsRequest) call {
		return func(ctx context.Context, c queuev1.QueueServiceClient) error { _, err := c.Stats(ctx, r); return err }
	}
	bad := codes.InvalidArgument

	tests := []struct {
		name string
		call call
		code codes.Code
	}{
		// Queue names: a DNS label.
		{"add queue empty", add(&queuev1.AddRequest{Queue: "", Keys: []string{"a"}}), bad},
		{"add queue upper case", add(&queuev1.AddRequest{Queue: "Work", Keys: []string{"a"}}), bad},
		{"add queue leading dash", add(&queuev1.AddRequest{Queue: "-work", Keys: []string{"a"}}), bad},
		{"add queue trailing dash", add(&queuev1.AddRequest{Queue: "work-", Keys: []string{"a"}}), bad},
		{"add queue underscore", add(&queuev1.AddRequest{Queue: "my_queue", Keys: []string{"a"}}), bad},
		{"add queue dot", add(&queuev1.AddRequest{Queue: "a.b", Keys: []string{"a"}}), bad},
		{"add queue 64 chars", add(&queuev1.AddRequest{Queue: strings.Repeat("a", 64), Keys: []string{"a"}}), bad},
		{"lease queue bad", lease(&queuev1.LeaseRequest{Queue: "Q"}), bad},
		{"ack queue bad", ack(&queuev1.AckRequest{Queue: "Q", Acks: []*queuev1.Ack{liveAck}}), bad},
		{"extend queue bad", extend(&queuev1.ExtendRequest{Queue: "Q", Leases: []*queuev1.LeaseRef{{Key: live.Key, Token: live.Token}}}), bad},
		{"forget queue bad", forget(&queuev1.ForgetRequest{Queue: "Q", Keys: []string{"p1"}}), bad},
		{"inspect queue bad", inspect(&queuev1.InspectRequest{Queue: "Q", Key: "p1"}), bad},
		{"list queue bad", list(&queuev1.ListRequest{Queue: "Q"}), bad},
		{"stats queue bad", stats(&queuev1.StatsRequest{Queue: "Q"}), bad},

		// Keys: non-empty, at most 1024 bytes, UTF-8. One bad key refuses
		// the good ones beside it too.
		{"add empty key", add(&queuev1.AddRequest{Queue: fresh, Keys: []string{"ok", ""}}), bad},
		{"add empty key existing queue", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new", ""}}), bad},
		{"add key 1025 bytes", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new", long}}), bad},
		{"add key not utf-8", notUTF8("Add", &queuev1.AddRequest{Queue: q, Keys: []string{"new", "bad?"}}), bad},
		{"add key not utf-8 fresh", notUTF8("Add", &queuev1.AddRequest{Queue: fresh, Keys: []string{"bad?"}}), bad},
		{"ack empty key", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{liveAck, {Key: "", Token: 1, Outcome: success}}}), bad},
		{"ack key 1025 bytes", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{liveAck, {Key: long, Token: 1, Outcome: success}}}), bad},
		{"ack key not utf-8", notUTF8("Ack", &queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{liveAck, {Key: "bad?", Token: 1, Outcome: success}}}), bad},
		{"extend empty key", extend(&queuev1.ExtendRequest{Queue: q, Leases: []*queuev1.LeaseRef{{Key: live.Key, Token: live.Token}, {Key: ""}}}), bad},
		{"forget empty key", forget(&queuev1.ForgetRequest{Queue: q, Keys: []string{"p1", ""}}), bad},
		{"forget key 1025 bytes", forget(&queuev1.ForgetRequest{Queue: q, Keys: []string{"p1", long}}), bad},
		{"forget key not utf-8", notUTF8("Forget", &queuev1.ForgetRequest{Queue: q, Keys: []string{"p1", "bad?"}}), bad},
		{"inspect key not utf-8", notUTF8("Inspect", &queuev1.InspectRequest{Queue: q, Key: "bad?"}), bad},
		{"inspect empty key", inspect(&queuev1.InspectRequest{Queue: q, Key: ""}), bad},
		{"inspect key 1025 bytes", inspect(&queuev1.InspectRequest{Queue: q, Key: long}), bad},

		// More than 10,000 keys or acks in one call.
		{"add 10001 keys", add(&queuev1.AddRequest{Queue: q, Keys: tooMany}), bad},
		{"add 10001 keys fresh", add(&queuev1.AddRequest{Queue: fresh, Keys: tooMany}), bad},
		{"ack 10001 acks", ack(&queuev1.AckRequest{Queue: q, Acks: append([]*queuev1.Ack{liveAck}, tooManyAcks[1:]...)}), bad},
		{"extend 10001 leases", extend(&queuev1.ExtendRequest{Queue: q, Leases: tooManyRefs}), bad},
		{"forget 10001 keys", forget(&queuev1.ForgetRequest{Queue: q, Keys: append([]string{"p1"}, tooMany[1:]...)}), bad},

		// Negative durations.
		{"add negative delay", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Delay: dur(-time.Second)}), bad},
		{"add negative delay fresh", add(&queuev1.AddRequest{Queue: fresh, Keys: []string{"new"}, Delay: dur(-time.Nanosecond)}), bad},
		{"add invalid duration", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Delay: &durationpb.Duration{Seconds: 1, Nanos: -1}}), bad},
		{"lease negative duration", lease(&queuev1.LeaseRequest{Queue: q, MaxItems: 10, LeaseDuration: dur(-time.Second)}), bad},
		{"lease negative wait", lease(&queuev1.LeaseRequest{Queue: q, MaxItems: 10, Wait: dur(-time.Second)}), bad},
		{"ack negative requeue_after", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{{Key: live.Key, Token: live.Token, Outcome: &queuev1.Ack_RequeueAfter{RequeueAfter: dur(-time.Second)}}}}), bad},
		{"extend negative duration", extend(&queuev1.ExtendRequest{Queue: q, Leases: []*queuev1.LeaseRef{{Key: live.Key, Token: live.Token}}, LeaseDuration: dur(-time.Second)}), bad},

		// An Ack without an outcome, even beside a valid one.
		{"ack without outcome", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{liveAck, {Key: "p1", Token: 1}}}), bad},
		{"ack only without outcome", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{{Key: live.Key, Token: live.Token}}}), bad},

		// Unknown enum values.
		{"add unknown priority", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Priority: queuev1.Priority(99)}), bad},
		{"add unknown priority fresh", add(&queuev1.AddRequest{Queue: fresh, Keys: []string{"new"}, Priority: queuev1.Priority(4)}), bad},
		{"list unknown state", list(&queuev1.ListRequest{Queue: q, State: queuev1.ItemState(6)}), bad},

		// Limits: max_items and page_size at most 10,000; lease_duration at
		// most 10 min; wait at most 30 s.
		{"lease max_items 10001", lease(&queuev1.LeaseRequest{Queue: q, MaxItems: 10001}), bad},
		{"list page_size 10001", list(&queuev1.ListRequest{Queue: q, PageSize: 10001}), bad},
		{"lease duration over 10 min", lease(&queuev1.LeaseRequest{Queue: q, MaxItems: 10, LeaseDuration: dur(10*time.Minute + time.Nanosecond)}), bad},
		{"extend duration over 10 min", extend(&queuev1.ExtendRequest{Queue: q, Leases: []*queuev1.LeaseRef{{Key: live.Key, Token: live.Token}}, LeaseDuration: dur(11 * time.Minute)}), bad},
		{"lease wait over 30 s", lease(&queuev1.LeaseRequest{Queue: q, MaxItems: 10, Wait: dur(30*time.Second + time.Nanosecond)}), bad},
		{"list page token not issued", list(&queuev1.ListRequest{Queue: q, PageToken: "!!not-base64!!"}), bad},

		// An Add of no keys (the proto says 1 to 10,000).
		{"add zero keys", add(&queuev1.AddRequest{Queue: q}), bad},
		{"add zero keys fresh", add(&queuev1.AddRequest{Queue: fresh, Keys: []string{}}), bad},

		// Free text: worker and source at most 256 bytes of UTF-8.
		{"add source 257 bytes", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Source: strings.Repeat("s", 257)}), bad},
		{"add source 1 MiB", add(&queuev1.AddRequest{Queue: fresh, Keys: []string{"new"}, Source: strings.Repeat("s", 1<<20)}), bad},
		{"add source not utf-8", notUTF8("Add", &queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Source: "bad?"}), bad},
		{"lease worker 257 bytes", lease(&queuev1.LeaseRequest{Queue: q, MaxItems: 10, Worker: strings.Repeat("w", 257)}), bad},
		{"lease worker not utf-8", notUTF8("Lease", &queuev1.LeaseRequest{Queue: q, MaxItems: 10, Worker: "bad?"}), bad},

		// Durations: delay and requeue_after at most 365 days (a 240-year
		// delay used to wrap into the past and run at once).
		{"add delay 240 years", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Delay: dur(240 * 365 * 24 * time.Hour)}), bad},
		{"add delay over a year", add(&queuev1.AddRequest{Queue: fresh, Keys: []string{"new"}, Delay: dur(365*24*time.Hour + time.Nanosecond)}), bad},
		{"add delay 10000 years", add(&queuev1.AddRequest{Queue: q, Keys: []string{"new"}, Delay: &durationpb.Duration{Seconds: 315_576_000_000}}), bad},
		{"ack requeue_after 240 years", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{{Key: live.Key, Token: live.Token, Outcome: &queuev1.Ack_RequeueAfter{RequeueAfter: dur(240 * 365 * 24 * time.Hour)}}}}), bad},

		// A page token longer than any List issues.
		{"list page token too long", list(&queuev1.ListRequest{Queue: q, PageToken: strings.Repeat("A", 1<<20)}), bad},

		// A request over --max-request-bytes (1.5 MiB by default), refused
		// by gRPC before any handler runs.
		{"add 1.6 MB of keys", add(&queuev1.AddRequest{Queue: q, Keys: keysOf(1600, 1024)}), codes.ResourceExhausted},
		{"ack 3 MiB error", ack(&queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{{Key: live.Key, Token: live.Token, Outcome: &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: strings.Repeat("e", 3<<20)}}}}}), codes.ResourceExhausted},

		// NOT_FOUND for Stats of a queue never used (a Lease or Inspect on
		// it does not make it used).
		{"stats unused queue", stats(&queuev1.StatsRequest{Queue: fresh}), codes.NotFound},
	}

	// Lease and Inspect on the fresh queue must not make Stats find it.
	if _, err := h.c.Lease(ctx, fresh, queueclient.LeaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Inspect(ctx, fresh, "x"); err != nil {
		t.Fatal(err)
	}
	beforeQ, beforeFresh := snap(t, h, q), snap(t, h, fresh)
	if beforeFresh.stats != nil || len(beforeFresh.items) != 0 {
		t.Fatalf("unused queue %s shows %v", fresh, beforeFresh)
	}
	if len(beforeQ.items) != 2 {
		t.Fatalf("queue %s holds %v, want p1 and l1", q, beforeQ)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctxT(t), h.raw)
			got := status.Code(err)
			if got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			if after := snap(t, h, q); !after.equal(beforeQ) {
				t.Errorf("queue %s changed:\n before %v\n after  %v", q, beforeQ, after)
			}
			if after := snap(t, h, fresh); !after.equal(beforeFresh) {
				t.Errorf("queue %s changed:\n before %v\n after  %v", fresh, beforeFresh, after)
			}
		})
	}
	// The lease survived every refused Ack and Extend.
	res, err := h.c.Ack(ctx, q, []queueclient.Ack{{Key: live.Key, Token: live.Token, Outcome: queueclient.Success()}})
	if err != nil || res[0].Status != queueclient.OK {
		t.Fatalf("ack of the live lease after the refused calls: %v %v", res, err)
	}
}

// TestLimitsAccepted checks the bounds themselves are accepted: the errors
// above are exactly at the limits, not below them.
func TestLimitsAccepted(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "limits"
	keys := keysN("k", 10000)
	keys[0] = strings.Repeat("é", 512) // 1024 bytes of UTF-8
	resp, err := h.raw.Add(ctx, &queuev1.AddRequest{Queue: q, Keys: keys, Priority: queuev1.Priority_PRIORITY_LOW})
	if err != nil || resp.GetQueued() != 10000 {
		t.Fatalf("add 10000 keys: %v %v", resp, err)
	}
	lr, err := h.raw.Lease(ctx, &queuev1.LeaseRequest{Queue: q, MaxItems: 10000, LeaseDuration: dur(10 * time.Minute), Wait: dur(30 * time.Second)})
	if err != nil || len(lr.GetLeases()) != 10000 {
		t.Fatalf("lease 10000 for 10 min: %d %v", len(lr.GetLeases()), err)
	}
	refs := make([]*queuev1.LeaseRef, len(lr.GetLeases()))
	acks := make([]*queuev1.Ack, len(lr.GetLeases()))
	for i, l := range lr.GetLeases() {
		refs[i] = &queuev1.LeaseRef{Key: l.GetKey(), Token: l.GetToken()}
		acks[i] = &queuev1.Ack{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}
	}
	if _, err := h.raw.Extend(ctx, &queuev1.ExtendRequest{Queue: q, Leases: refs, LeaseDuration: dur(10 * time.Minute)}); err != nil {
		t.Fatalf("extend 10000 by 10 min: %v", err)
	}
	if _, err := h.raw.List(ctx, &queuev1.ListRequest{Queue: q, PageSize: 10000}); err != nil {
		t.Fatalf("list page of 10000: %v", err)
	}
	ar, err := h.raw.Ack(ctx, &queuev1.AckRequest{Queue: q, Acks: acks})
	if err != nil || len(ar.GetResults()) != 10000 {
		t.Fatalf("ack 10000: %v", err)
	}
	if _, err := h.raw.Forget(ctx, &queuev1.ForgetRequest{Queue: q, Keys: keys}); err != nil {
		t.Fatalf("forget 10000: %v", err)
	}
	// An empty queue that was used answers Stats with zeros.
	st, err := h.c.Stats(ctx, q)
	if err != nil || st[0].GetPending()+st[0].GetLeased()+st[0].GetDelayed() != 0 || st[0].GetAcksTotal() != 10000 {
		t.Fatalf("stats after draining: %v %v", st, err)
	}
}

// TestLeaseLongPollWakes checks a waiting Lease answers as soon as a key is
// added, not at the end of its wait, and that an empty wait ends empty.
func TestLeaseLongPollWakes(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "poll"

	startWait := time.Now()
	got, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "w", Wait: 300 * time.Millisecond})
	if err != nil || len(got) != 0 {
		t.Fatalf("lease on an empty queue: %v %v", got, err)
	}
	if el := time.Since(startWait); el < 250*time.Millisecond {
		t.Fatalf("empty long-poll of 300ms answered after %v", el)
	}

	type result struct {
		leases []queueclient.Lease
		err    error
		at     time.Time
	}
	done := make(chan result, 1)
	go func() {
		l, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "w", Wait: 20 * time.Second})
		done <- result{l, err, time.Now()}
	}()
	// Give the Lease time to park; if it has not yet, it finds the key at
	// once and the test still checks the key is handed out.
	time.Sleep(200 * time.Millisecond)
	added := time.Now()
	if _, err := h.c.Add(ctx, q, []string{"ns/woken"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || len(r.leases) != 1 || r.leases[0].Key != "ns/woken" {
			t.Fatalf("woken lease: %v %v", r.leases, r.err)
		}
		if lag := r.at.Sub(added); lag > 2*time.Second {
			t.Fatalf("lease answered %v after the add", lag)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-polling lease was not woken by an Add within 10s")
	}

	// A delayed key wakes a waiting lease when it becomes ready.
	if _, err := h.c.Add(ctx, q, []string{"ns/later"}, queueclient.AddOptions{Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	startWait = time.Now()
	got, err = h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "w", Wait: 20 * time.Second})
	if err != nil || len(got) != 1 || got[0].Key != "ns/later" {
		t.Fatalf("lease of a delayed key: %v %v", got, err)
	}
	if el := time.Since(startWait); el > 5*time.Second {
		t.Fatalf("delayed key of 300ms handed out after %v", el)
	}
}

// TestShutdownAnswersLongPolls checks a stopping service answers a waiting
// Lease at once (empty) instead of holding its graceful stop for the grace
// period (2 s here) while the Lease waits out its 30 s.
func TestShutdownAnswersLongPolls(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	type result struct {
		leases []queueclient.Lease
		err    error
	}
	done := make(chan result, 1)
	go func() {
		l, err := h.c.Lease(ctx, "idle", queueclient.LeaseOptions{Worker: "w", Wait: 30 * time.Second})
		done <- result{l, err}
	}()
	time.Sleep(200 * time.Millisecond) // let it park; if not, it is refused or answered: checked below
	took, err := h.stop()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took > time.Second {
		t.Errorf("Run took %v to stop with a long poll in flight (grace period 2s)", took)
	}
	select {
	case r := <-done:
		if r.err == nil && len(r.leases) != 0 {
			t.Fatalf("long poll on an empty queue answered %v", r.leases)
		}
		if r.err != nil && status.Code(r.err) != codes.Unavailable {
			t.Fatalf("long poll ended with %v, want an empty answer (or Unavailable if it had not started)", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll still open after the service stopped")
	}
}

// TestListPaging walks a queue by pages and by state.
func TestListPaging(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "paging"
	keys := keysN("ns/k", 250)
	if _, err := h.c.Add(ctx, q, keys, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "w", MaxItems: 10}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size  uint32
		state queuev1.ItemState
		pages []int
	}{
		{0, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, []int{100, 100, 50}},
		{100, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, []int{100, 100, 50}},
		{125, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, []int{125, 125}},
		{1, queuev1.ItemState_ITEM_STATE_LEASED, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{7, queuev1.ItemState_ITEM_STATE_LEASED, []int{7, 3}},
		{10000, queuev1.ItemState_ITEM_STATE_PENDING, []int{240}},
		{10, queuev1.ItemState_ITEM_STATE_DELAYED, []int{0}},
		{10, queuev1.ItemState_ITEM_STATE_ABSENT, []int{0}},
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.state, tc.size), func(t *testing.T) {
			var pages []int
			var seen []string
			token := ""
			for {
				resp, err := h.raw.List(ctx, &queuev1.ListRequest{Queue: q, State: tc.state, PageSize: tc.size, PageToken: token})
				if err != nil {
					t.Fatal(err)
				}
				pages = append(pages, len(resp.GetItems()))
				for _, it := range resp.GetItems() {
					if tc.state != queuev1.ItemState_ITEM_STATE_UNSPECIFIED && it.GetState() != tc.state {
						t.Fatalf("%s in state %v listed for %v", it.GetKey(), it.GetState(), tc.state)
					}
					seen = append(seen, it.GetKey())
				}
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
				if len(pages) > 300 {
					t.Fatal("paging does not end")
				}
			}
			if !slices.Equal(pages, tc.pages) {
				t.Errorf("page sizes %v, want %v", pages, tc.pages)
			}
			if !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
				t.Errorf("keys not in strict key order across pages: %v", seen)
			}
			if tc.state == queuev1.ItemState_ITEM_STATE_UNSPECIFIED && !slices.Equal(seen, keys) {
				t.Errorf("listed %d keys, want all %d", len(seen), len(keys))
			}
		})
	}
}

// TestInspectExtendForget follows one key through the state table as Inspect
// shows it, with Extend and Forget.
func TestInspectExtendForget(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "inspect"
	inspect := func(key string) *queuev1.Item {
		t.Helper()
		it, err := h.c.Inspect(ctx, q, key)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	if it := inspect("ns/a"); it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Fatalf("unknown key: %v", it)
	}
	if _, err := h.c.Add(ctx, q, []string{"ns/a"}, queueclient.AddOptions{Priority: queueclient.PriorityLow}); err != nil {
		t.Fatal(err)
	}
	res, err := h.c.Add(ctx, q, []string{"ns/a"}, queueclient.AddOptions{Priority: queueclient.PriorityHigh})
	if err != nil || res.Queued != 0 || res.Collapsed != 1 {
		t.Fatalf("re-add: %+v %v", res, err)
	}
	it := inspect("ns/a")
	if it.GetState() != queuev1.ItemState_ITEM_STATE_PENDING || it.GetAnnouncements() != 2 ||
		it.GetPriority() != queuev1.Priority_PRIORITY_HIGH || it.GetPendingSince() == nil {
		t.Fatalf("pending key after two adds, the second HIGH: %v", it)
	}

	ls, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "worker-1", Duration: time.Second})
	if err != nil || len(ls) != 1 {
		t.Fatalf("lease: %v %v", ls, err)
	}
	l := ls[0]
	it = inspect("ns/a")
	if it.GetState() != queuev1.ItemState_ITEM_STATE_LEASED || it.GetWorker() != "worker-1" || it.GetDirty() {
		t.Fatalf("leased key: %v", it)
	}
	exp := it.GetLeaseExpiresAt().AsTime()

	// Extend pushes the expiry; a wrong token is LEASE_LOST.
	ext, err := h.c.Extend(ctx, q, []queueclient.LeaseRef{{Key: l.Key, Token: l.Token}, {Key: l.Key, Token: l.Token + 1}, {Key: "ns/none", Token: l.Token}}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ext[0].Status != queueclient.OK || !ext[0].ExpiresAt.After(exp.Add(4*time.Minute)) {
		t.Fatalf("extend of the live lease: %+v (old expiry %v)", ext[0], exp)
	}
	if ext[1].Status != queueclient.LeaseLost || ext[2].Status != queueclient.LeaseLost {
		t.Fatalf("extend with a wrong token or key: %+v", ext[1:])
	}
	if got := inspect("ns/a").GetLeaseExpiresAt().AsTime(); !got.Equal(ext[0].ExpiresAt) {
		t.Fatalf("Inspect shows expiry %v, Extend answered %v", got, ext[0].ExpiresAt)
	}

	// Announced while leased: dirty. A failure ack of a dirty key makes it
	// pending at once with attempts+1 and the error kept.
	if res, err := h.c.Add(ctx, q, []string{"ns/a"}, queueclient.AddOptions{}); err != nil || res.Queued != 1 {
		t.Fatalf("add while leased: %+v %v", res, err)
	}
	if it := inspect("ns/a"); !it.GetDirty() {
		t.Fatalf("key announced while leased is not dirty: %v", it)
	}
	ar, err := h.c.Ack(ctx, q, []queueclient.Ack{{Key: l.Key, Token: l.Token, Outcome: queueclient.Failure("boom")}})
	if err != nil || ar[0].Status != queueclient.OK {
		t.Fatalf("failure ack: %v %v", ar, err)
	}
	it = inspect("ns/a")
	if it.GetState() != queuev1.ItemState_ITEM_STATE_PENDING || it.GetAttempts() != 1 || it.GetLastError() != "boom" || it.GetDirty() {
		t.Fatalf("dirty key after a failure ack: %v", it)
	}
	// The old token is dead for Ack and Extend.
	if ar, _ := h.c.Ack(ctx, q, []queueclient.Ack{{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()}}); ar[0].Status != queueclient.LeaseLost {
		t.Fatalf("second ack of the same token: %v", ar)
	}
	if ext, _ := h.c.Extend(ctx, q, []queueclient.LeaseRef{{Key: l.Key, Token: l.Token}}, 0); ext[0].Status != queueclient.LeaseLost {
		t.Fatalf("extend of an acked token: %v", ext)
	}

	// Forget: a leased key goes absent and its token dies; absent keys are
	// not counted.
	ls, err = h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "worker-2"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("second lease: %v %v", ls, err)
	}
	if _, err := h.c.Add(ctx, q, []string{"ns/b"}, queueclient.AddOptions{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if it := inspect("ns/b"); it.GetState() != queuev1.ItemState_ITEM_STATE_DELAYED || it.GetNotBefore() == nil {
		t.Fatalf("delayed key: %v", it)
	}
	n, err := h.c.Forget(ctx, q, []string{"ns/a", "ns/b", "ns/never"})
	if err != nil || n != 2 {
		t.Fatalf("forget: %d %v, want 2", n, err)
	}
	for _, k := range []string{"ns/a", "ns/b"} {
		if it := inspect(k); it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
			t.Fatalf("%s after forget: %v", k, it)
		}
	}
	if ar, _ := h.c.Ack(ctx, q, []queueclient.Ack{{Key: ls[0].Key, Token: ls[0].Token, Outcome: queueclient.Success()}}); ar[0].Status != queueclient.LeaseLost {
		t.Fatalf("ack of a forgotten lease: %v", ar)
	}
	st, err := h.c.Stats(ctx, q)
	if err != nil || st[0].GetPending()+st[0].GetDelayed()+st[0].GetLeased() != 0 {
		t.Fatalf("stats after forget: %v %v", st, err)
	}
}

// TestReflectionAndHealth lists the services through server reflection and
// checks the health service answers SERVING for the queue.
func TestReflectionAndHealth(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"baton.queue.v1.QueueService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	// The file descriptor behind the service resolves too (grpcurl needs it).
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "baton.queue.v1.QueueService"}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("file containing baton.queue.v1.QueueService: %v %v", resp, err)
	}
	_ = stream.CloseSend()

	// Health turns SERVING once the store is ready (the first check may
	// precede the first readiness probe).
	hc := healthpb.NewHealthClient(h.conn)
	for {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "baton.queue.v1.QueueService"})
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("health never SERVING: %v %v", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetrics checks /metrics carries the baton_queue_ series per queue and
// /healthz and /readyz answer.
func TestMetrics(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	const q = "metrics"
	if _, err := h.c.Add(ctx, q, []string{"a", "b", "c"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Add(ctx, q, []string{"a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	ls, err := h.c.Lease(ctx, q, queueclient.LeaseOptions{Worker: "w"})
	if err != nil || len(ls) != 1 {
		t.Fatal(err)
	}
	if _, err := h.c.Ack(ctx, q, []queueclient.Ack{{Key: ls[0].Key, Token: ls[0].Token, Outcome: queueclient.Failure("x")}}); err != nil {
		t.Fatal(err)
	}
	// The failed key comes back after its few milliseconds of backoff.
	for {
		st, err := h.c.Stats(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if st[0].GetPending() == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("failed key never pending again: %v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	body := httpGet(t, ctx, "http://"+h.httpAddr+"/metrics")
	for _, want := range []string{
		`baton_queue_depth{queue="metrics"} 3`,
		`baton_queue_items{queue="metrics",state="pending"} 3`,
		`baton_queue_adds_total{queue="metrics"} 4`,
		`baton_queue_collapsed_total{queue="metrics"} 1`,
		`baton_queue_retries_total{queue="metrics"} 1`,
		`baton_queue_lease_expirations_total{queue="metrics"} 0`,
		`baton_queue_queue_duration_seconds_count{queue="metrics"} 1`,
		`baton_queue_work_duration_seconds_count{queue="metrics"} 1`,
		`baton_queue_unfinished_work_seconds{queue="metrics"}`,
		`baton_queue_longest_running_processor_seconds{queue="metrics"}`,
		`baton_queue_oldest_pending_age_seconds{queue="metrics"}`,
		`go_memstats_heap_inuse_bytes`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Add",grpc_service="baton.queue.v1.QueueService",grpc_type="unary"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The disk's: the adds above waited on fdatasyncs, and the data
	// directory's file system has room and a size.
	if n := metricValue(t, body, "baton_queue_store_fsync_duration_seconds_count"); n < 1 {
		t.Errorf("fsyncs observed: %v, want at least one", n)
	}
	avail := metricValue(t, body, "baton_queue_store_disk_available_bytes")
	size := metricValue(t, body, "baton_queue_store_disk_size_bytes")
	if avail <= 0 || size < avail {
		t.Errorf("disk available %v of %v bytes, want 0 < available <= size", avail, size)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if got := httpGet(t, ctx, "http://"+h.httpAddr+p); strings.TrimSpace(got) != "ok" {
			t.Errorf("%s: %q", p, got)
		}
	}
}

// metricValue is the value of the unlabelled sample name in a /metrics
// body.
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	for line := range strings.Lines(body) {
		v, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return f
	}
	t.Fatalf("/metrics lacks %s", name)
	return 0
}

func httpGet(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// TestRunRefusesBadConfig checks Run names the bad field instead of serving.
func TestRunRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*service.Config)
		want string
	}{
		{"no data dir", func(c *service.Config) { c.DataDir = "" }, "--data-dir"},
		{"zero backoff", func(c *service.Config) { c.BackoffBase = 0 }, "--backoff-base"},
		{"max below base", func(c *service.Config) { c.BackoffMax = time.Millisecond }, "--backoff-max"},
		{"negative attempts", func(c *service.Config) { c.MaxAttempts = -1 }, "--max-attempts"},
		{"lease over 10 min", func(c *service.Config) { c.DefaultLease = time.Hour }, "--default-lease"},
		{"no waiting leases", func(c *service.Config) { c.MaxWaitingLeases = 0 }, "--max-waiting-leases must be in [1, 1048576], not 0"},
		{"waiting leases per connection at the stream bound", func(c *service.Config) { c.MaxWaitingLeasesPerConn = serve.MaxConcurrentStreams },
			"--max-waiting-leases-per-conn must be in [1, 1023], below the 1024 calls a connection may have open, not 1024"},
		{"no name", func(c *service.Config) { c.Name = "" }, "--name is empty: give a member name"},
		{"name with a space", func(c *service.Config) { c.Name = "queue 0" }, `--name "queue 0" has " " at byte 5: a member name is letters, digits, '.', '-' and '_'`},
		{"name with --initial-cluster's separator", func(c *service.Config) { c.Name = "q=0" }, `--name "q=0" has "=" at byte 1`},
		{"name too long", func(c *service.Config) { c.Name = strings.Repeat("q", 254) }, "--name is 254 bytes, over 253"},
		{"advertise a wildcard", func(c *service.Config) { c.AdvertiseAddr = "0.0.0.0:7070" },
			`--advertise-addr "0.0.0.0:7070" has the wildcard host 0.0.0.0, where a process listens: give the host others dial`},
		{"advertise no host", func(c *service.Config) { c.AdvertiseAddr = ":7070" }, `--advertise-addr ":7070" has no host`},
		{"advertise no port", func(c *service.Config) { c.AdvertiseAddr = "queue-0" }, `--advertise-addr "queue-0" is not host:port`},
		{"advertise port 0", func(c *service.Config) { c.AdvertiseAddr = "queue-0:0" }, `--advertise-addr "queue-0:0": port "0" is not a number from 1 to 65535`},
		{"observer without a port", func(c *service.Config) { c.ObserverAddr = "observer" }, `--observer-addr "observer" is not host:port`},
		{"observer list with a bad member", func(c *service.Config) { c.ObserverAddr = "observer-0:7071,:7071" }, `--observer-addr's address 2 ":7071" has no host`},
		{"observer list with an empty member", func(c *service.Config) { c.ObserverAddr = "observer-0:7071," }, `--observer-addr's address 2 is empty: give host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := service.DefaultConfig()
			cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
			tc.mod(&cfg)
			err := service.Run(t.Context(), cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error naming %s", err, tc.want)
			}
			if errors.Is(err, context.Canceled) {
				t.Fatal("Run served instead of refusing")
			}
		})
	}
}

// TestUnknownQueuesLeaveMetricsFlat makes every call on a thousand queue
// names nobody added to, through the real server: /metrics must not grow
// by a line (it once grew to 6.2 M lines and took 38 s to scrape).
func TestUnknownQueuesLeaveMetricsFlat(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	if _, err := h.c.Add(ctx, "real", []string{"k"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := func(q string) {
		t.Helper()
		ack := &queuev1.Ack{Key: "k", Token: 1, Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}
		for _, err := range []error{
			func() error { _, err := h.raw.Lease(ctx, &queuev1.LeaseRequest{Queue: q, Worker: "w"}); return err }(),
			func() error {
				_, err := h.raw.Lease(ctx, &queuev1.LeaseRequest{Queue: q, Worker: "w", Wait: dur(time.Millisecond)})
				return err
			}(),
			func() error {
				_, err := h.raw.Ack(ctx, &queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{ack}})
				return err
			}(),
			func() error {
				_, err := h.raw.Extend(ctx, &queuev1.ExtendRequest{Queue: q, Leases: []*queuev1.LeaseRef{{Key: "k", Token: 1}}})
				return err
			}(),
			func() error {
				_, err := h.raw.Forget(ctx, &queuev1.ForgetRequest{Queue: q, Keys: []string{"k"}})
				return err
			}(),
			func() error { _, err := h.raw.Inspect(ctx, &queuev1.InspectRequest{Queue: q, Key: "k"}); return err }(),
			func() error { _, err := h.raw.List(ctx, &queuev1.ListRequest{Queue: q}); return err }(),
		} {
			if err != nil {
				t.Fatalf("a call on unknown queue %s: %v", q, err)
			}
		}
		if _, err := h.raw.Stats(ctx, &queuev1.StatsRequest{Queue: q}); status.Code(err) != codes.NotFound {
			t.Fatalf("Stats of unknown queue %s: %v, want NOT_FOUND", q, err)
		}
	}
	calls("warm-up") // every method and code has its gRPC series from here on
	lines := func() int { return strings.Count(httpGet(t, ctx, "http://"+h.httpAddr+"/metrics"), "\n") }
	before := lines()
	for i := range 1000 {
		calls(fmt.Sprintf("nobody-%d", i))
	}
	if after := lines(); after != before {
		t.Errorf("/metrics grew from %d to %d lines after calls on 1,000 unknown queues", before, after)
	}
}

// TestAnswersFitADefaultClient: a Lease of 10,000 keys of 1 KiB, and a
// List page of 10,000 items with long errors, are answered in messages a
// gRPC client with the default 4 MiB receive limit can read: the Lease
// grants fewer keys, the page ends early with a token for the rest.
func TestAnswersFitADefaultClient(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := queuev1.NewQueueServiceClient(conn)
	const q = "big"
	keys := keysOf(6000, 1024)
	for start := 0; start < len(keys); start += 1000 {
		if _, err := raw.Add(ctx, &queuev1.AddRequest{Queue: q, Keys: keys[start : start+1000]}); err != nil {
			t.Fatal(err)
		}
	}
	lr, err := raw.Lease(ctx, &queuev1.LeaseRequest{Queue: q, Worker: "w", MaxItems: 10000, LeaseDuration: dur(time.Minute)})
	if err != nil {
		t.Fatalf("a Lease of 10,000 keys of 1 KiB: %v", err)
	}
	n := len(lr.GetLeases())
	if n == 0 || n >= len(keys) || proto.Size(lr) > 4<<20 {
		t.Fatalf("leased %d keys in %d bytes", n, proto.Size(lr))
	}
	acks := make([]*queuev1.Ack, n)
	for i, l := range lr.GetLeases() {
		acks[i] = &queuev1.Ack{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: strings.Repeat("e", 4096)}}}
	}
	for start := 0; start < n; start += 200 {
		if _, err := raw.Ack(ctx, &queuev1.AckRequest{Queue: q, Acks: acks[start:min(start+200, n)]}); err != nil {
			t.Fatal(err)
		}
	}
	seen, pages, token := 0, 0, ""
	for {
		resp, err := raw.List(ctx, &queuev1.ListRequest{Queue: q, PageSize: 10000, PageToken: token})
		if err != nil {
			t.Fatalf("List page %d: %v", pages, err)
		}
		seen += len(resp.GetItems())
		pages++
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if seen != len(keys) || pages < 2 {
		t.Fatalf("listed %d of %d items in %d pages", seen, len(keys), pages)
	}
}
