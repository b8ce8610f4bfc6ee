package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// openBroker opens a queue's broker on a directory of the test.
func openBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.Open(broker.Config{Queue: workqueue.DefaultConfig()}, store.Options{Dir: t.TempDir()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// serve serves a dashboard over src on a loopback port until the test ends.
func serve(t *testing.T, src Source) string {
	t.Helper()
	mux := http.NewServeMux()
	New(src, Options{}).Handle(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

// httpOf is the HTTP status the dashboard answers for each code of the
// gRPC API.
var httpOf = map[codes.Code]int{
	codes.OK:               http.StatusOK,
	codes.InvalidArgument:  http.StatusBadRequest,
	codes.NotFound:         http.StatusNotFound,
	codes.Unavailable:      http.StatusServiceUnavailable,
	codes.DeadlineExceeded: http.StatusGatewayTimeout,
	codes.Internal:         http.StatusInternalServerError,
}

// TestInspectAnswersAsTheGRPCAPI: /api/inspect answers each request with
// the code (as HTTP) and, for a refusal, the message that QueueService
// Inspect gives for the same queue and key.
func TestInspectAnswersAsTheGRPCAPI(t *testing.T) {
	b := openBroker(t)
	if _, _, err := b.Add(t.Context(), "pods", []string{"default/a"}, broker.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	grpcAPI := server.New(b)
	base := serve(t, b)
	for _, tc := range []struct {
		name, queue, key string
		want             codes.Code
	}{
		{"a pending key", "pods", "default/a", codes.OK},
		{"an absent key", "pods", "default/b", codes.OK},
		{"a queue that does not exist", "nope", "default/a", codes.OK},
		{"a queue that is no DNS label", "Bad_Name", "default/a", codes.InvalidArgument},
		{"a queue too long", strings.Repeat("q", limits.MaxQueueNameBytes+1), "k", codes.InvalidArgument},
		{"no queue", "", "default/a", codes.InvalidArgument},
		{"no key", "pods", "", codes.InvalidArgument},
		{"a key too long", "pods", strings.Repeat("k", limits.MaxKeyBytes+1), codes.InvalidArgument},
		{"a key that is not UTF-8", "pods", "k\xff", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grpcRes, grpcErr := grpcAPI.Inspect(t.Context(), &queuev1.InspectRequest{Queue: tc.queue, Key: tc.key})
			st := status.Convert(grpcErr)
			if st.Code() != tc.want {
				t.Fatalf("the gRPC API answers %v %q, want %v", st.Code(), st.Message(), tc.want)
			}
			res, body := get(t, base+"/api/inspect?"+url.Values{"queue": {tc.queue}, "key": {tc.key}}.Encode())
			if res.StatusCode != httpOf[st.Code()] {
				t.Fatalf("HTTP %d %q, want %d (the gRPC API's %v %q)", res.StatusCode, body, httpOf[st.Code()], st.Code(), st.Message())
			}
			if st.Code() != codes.OK {
				if got := strings.TrimSpace(body); got != st.Message() {
					t.Errorf("message %q, want the gRPC API's %q", got, st.Message())
				}
				return
			}
			var item struct {
				Key, State string
			}
			if err := json.Unmarshal([]byte(body), &item); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			want := strings.ToLower(strings.TrimPrefix(grpcRes.GetItem().GetState().String(), "ITEM_STATE_"))
			if item.Key != tc.key || item.State != want {
				t.Errorf("item %+v, want key %q state %q (the gRPC API's)", item, tc.key, want)
			}
		})
	}
}

// failingSource answers every read with err.
type failingSource struct{ err error }

func (s failingSource) Stats(context.Context, string, broker.ReadOptions) ([]broker.QueueStats, error) {
	return nil, s.err
}

func (s failingSource) Inspect(context.Context, string, string, broker.ReadOptions) (workqueue.View, error) {
	return workqueue.View{}, s.err
}

func (s failingSource) List(context.Context, string, workqueue.State, string, int, broker.ReadOptions) ([]workqueue.View, bool, error) {
	return nil, false, s.err
}

// TestErrorsAnswerTheGRPCCodes: an error of the broker is answered with
// the HTTP status of the code the gRPC API gives it.
func TestErrorsAnswerTheGRPCCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("read: %w", broker.ErrNotLeader), http.StatusServiceUnavailable},
		{store.ErrClosed, http.StatusServiceUnavailable},
		{store.ErrStopped, http.StatusServiceUnavailable},
		{broker.ErrQueueNotFound, http.StatusNotFound},
		{context.DeadlineExceeded, http.StatusGatewayTimeout},
		{errors.New("something else"), http.StatusInternalServerError},
	} {
		base := serve(t, failingSource{tc.err})
		for _, path := range []string{"/api/queues", "/api/inspect?queue=pods&key=default/a", "/api/workers", "/api/parked"} {
			if res, body := get(t, base+path); res.StatusCode != tc.want {
				t.Errorf("%v: %s answers %d %q, want %d", tc.err, path, res.StatusCode, body, tc.want)
			}
		}
	}
}

// TestSecurityHeaders: every response of the dashboard, the page, its
// script and style, the JSON, an error and a path it does not have,
// carries the headers that keep it out of frames and from loading or
// running anything not its own.
func TestSecurityHeaders(t *testing.T) {
	b := openBroker(t)
	base := serve(t, b)
	want := map[string]string{
		"X-Frame-Options":        "DENY",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	}
	for _, path := range []string{"/", "/index.html", "/dashboard.js", "/dashboard.css", "/api/queues", "/api/members",
		"/api/workers", "/api/parked", "/api/observer",
		"/api/inspect?queue=pods&key=k", "/api/inspect?queue=Bad", "/no-such-file"} {
		res, _ := get(t, base+path)
		for h, v := range want {
			if got := res.Header.Get(h); got != v {
				t.Errorf("%s: %s = %q, want %q", path, h, got, v)
			}
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, d)
			}
		}
	}
}

// countingSource answers Stats with the counters it is given.
type countingSource struct {
	failingSource
	stats []broker.QueueStats
}

func (s *countingSource) Stats(context.Context, string, broker.ReadOptions) ([]broker.QueueStats, error) {
	return s.stats, nil
}

// TestRatesAcrossALeaderChange: the counters are the leading member's
// memory, and start again when another member begins to lead. The rate of
// the sample after that is the count since the restart, never negative or
// an unsigned difference's enormous number; and the page learns since
// when the totals count.
func TestRatesAcrossALeaderChange(t *testing.T) {
	src := &countingSource{}
	d := New(src, Options{})
	at := time.Unix(1_000_000, 0)
	sample := func(adds uint64, since int64) Sample {
		t.Helper()
		qs := broker.QueueStats{Name: "q", Since: since}
		qs.Adds = adds
		src.stats = []broker.QueueStats{qs}
		at = at.Add(time.Second)
		d.sample(at)
		h := d.hist["q"].samples
		return h[len(h)-1]
	}
	const first, second = 1_700_000_000e9, 1_700_000_100e9
	sample(1000, first)
	if s := sample(1500, first); s.AddRate != 500 {
		t.Errorf("rate within one leadership: %v, want 500", s.AddRate)
	}
	if s := sample(40, second); s.AddRate != 40 {
		t.Errorf("rate across a new leader's start: %v, want 40 (its count so far)", s.AddRate)
	}
	if s := sample(30, second); s.AddRate != 30 {
		t.Errorf("rate after counters went down: %v, want 30", s.AddRate)
	}
	rec := httptest.NewRecorder()
	d.queues(rec, httptest.NewRequest("GET", "/api/queues", nil))
	if !strings.Contains(rec.Body.String(), `"counting_since_ms":1700000100000`) {
		t.Errorf("/api/queues does not say since when the totals count: %s", rec.Body)
	}
}
