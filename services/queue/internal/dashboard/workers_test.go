package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// serveWith serves a dashboard over src with o on a loopback port until
// the test ends.
func serveWith(t *testing.T, src Source, o Options) string {
	t.Helper()
	mux := http.NewServeMux()
	New(src, o).Handle(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// getJSON GETs u and decodes its 200 answer into v.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	res, body := get(t, u)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", u, res.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%s: %v: %s", u, err, body)
	}
}

func add(t *testing.T, b *broker.Broker, queue string, keys ...string) {
	t.Helper()
	if _, _, err := b.Add(t.Context(), queue, keys, broker.AddOptions{}); err != nil {
		t.Fatal(err)
	}
}

func lease(t *testing.T, b *broker.Broker, queue, worker string, n int) []workqueue.Grant {
	t.Helper()
	g, err := b.Lease(t.Context(), queue, broker.LeaseOptions{Worker: worker, Max: n, Duration: 5 * time.Minute})
	if err != nil || len(g) != n {
		t.Fatalf("lease %d of %s as %s: %v %v", n, queue, worker, g, err)
	}
	return g
}

// TestWorkersShowWhatEachHolds: /api/workers lists each worker on each
// queue with the keys it holds (from the queue's Stats) and its open work
// streams, one of them a stream that holds nothing and asked for keys
// only when it opened; and every leased key with its holder, since when,
// its expiry and attempts.
func TestWorkersShowWhatEachHolds(t *testing.T) {
	b := openBroker(t)
	add(t, b, "pods", "default/a", "default/b", "default/c")
	add(t, b, "jobs", "default/j")
	before := time.Now()
	lease(t, b, "pods", "w1", 2)
	lease(t, b, "jobs", "w2", 1)
	opened := time.Now().Add(-time.Hour)
	streams := []server.StreamInfo{
		{Queue: "pods", Worker: "w1", Identity: "worker", Opened: opened, MaxInFlight: 4, InFlight: 2},
		{Queue: "greetings", Worker: "idle", Identity: "worker", Opened: opened, MaxInFlight: 8, Draining: true},
	}
	base := serveWith(t, b, Options{Streams: func() ([]server.StreamInfo, bool) { return streams, true }})
	var got workersJSON
	getJSON(t, base+"/api/workers", &got)
	if !got.StreamsKnown || got.Limit != MaxListedKeys || got.LeasesTotal != 3 || got.LeasesMore != 0 {
		t.Errorf("streams_known %v, limit %d, leases %d (%d more), want true, %d, 3 (0)", got.StreamsKnown, got.Limit, got.LeasesTotal, got.LeasesMore, MaxListedKeys)
	}
	want := []string{
		"idle on greetings: leased 0, streams 1 (0/8 in flight, 1 draining) as [worker]",
		"w1 on pods: leased 2, streams 1 (2/4 in flight, 0 draining) as [worker]",
		"w2 on jobs: leased 1, streams 0 (0/0 in flight, 0 draining) as []",
	}
	if len(got.Workers) != len(want) {
		t.Fatalf("workers %+v, want %d", got.Workers, len(want))
	}
	for i, w := range got.Workers {
		if s := fmt.Sprintf("%s on %s: leased %d, streams %d (%d/%d in flight, %d draining) as %v", w.Worker, w.Queue, w.Leased, w.Streams, w.InFlight, w.MaxInFlight, w.Draining, w.Identities); s != want[i] {
			t.Errorf("worker %d: %s, want %s", i, s, want[i])
		}
		if w.Streams > 0 && w.ConnectedSinceMs != opened.UnixMilli() {
			t.Errorf("%s connected since %d, want %d", w.Worker, w.ConnectedSinceMs, opened.UnixMilli())
		}
		if w.Leased > 0 && w.LastLeaseMs < before.UnixMilli() {
			t.Errorf("%s last asked at %d, before the test's Lease", w.Worker, w.LastLeaseMs)
		}
	}
	if len(got.Leases) != 3 {
		t.Fatalf("leases %+v, want 3", got.Leases)
	}
	for i, wantKey := range []string{"jobs default/j w2", "pods default/a w1", "pods default/b w1"} {
		l := got.Leases[i]
		if s := l.Queue + " " + l.Key + " " + l.Worker; s != wantKey {
			t.Errorf("lease %d: %s, want %s", i, s, wantKey)
		}
		if l.LeasedSinceMs < before.UnixMilli() || l.ExpiresMs-l.LeasedSinceMs != (5*time.Minute).Milliseconds() || l.Attempts != 0 {
			t.Errorf("lease %d: since %d, expires %d, attempts %d: want a 5 min lease taken during the test", i, l.LeasedSinceMs, l.ExpiresMs, l.Attempts)
		}
	}

	// Where another member serves the streams, the page is told so.
	base = serveWith(t, b, Options{Streams: func() ([]server.StreamInfo, bool) { return nil, false }})
	getJSON(t, base+"/api/workers", &got)
	if got.StreamsKnown || len(got.Workers) != 2 {
		t.Errorf("on a follower: streams_known %v, workers %+v: want false and the two of Stats", got.StreamsKnown, got.Workers)
	}
}

// TestListsAreBounded: /api/workers and /api/parked list MaxListedKeys
// keys over every queue, in queue and key order, and count the rest.
func TestListsAreBounded(t *testing.T) {
	b := openBroker(t)
	const first, second = MaxListedKeys + 20, 60
	for q, n := range map[string]int{"a-first": first, "b-second": second} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("ns/k%03d", i)
		}
		add(t, b, q, keys...)
		grants := lease(t, b, q, "w", n)
		// Park the keys of every third grant; the rest stay leased.
		var acks []broker.AckItem
		for i, g := range grants {
			if i%3 == 0 {
				acks = append(acks, broker.AckItem{Key: g.Key, Token: g.Token, Outcome: workqueue.Outcome{Terminal: true, Error: "bad spec: " + g.Key}})
			}
		}
		if ok, err := b.Ack(t.Context(), q, nil, acks); err != nil || len(ok) != len(acks) {
			t.Fatal(ok, err)
		}
	}
	parkedA, parkedB := (first+2)/3, (second+2)/3
	base := serveWith(t, b, Options{})

	var w workersJSON
	getJSON(t, base+"/api/workers", &w)
	if total := first + second - parkedA - parkedB; len(w.Leases) != MaxListedKeys || w.LeasesTotal != total || w.LeasesMore != total-MaxListedKeys {
		t.Errorf("leases: %d listed of %d, %d more; want %d of %d, %d more", len(w.Leases), w.LeasesTotal, w.LeasesMore, MaxListedKeys, total, total-MaxListedKeys)
	}
	if l := w.Leases[len(w.Leases)-1]; l.Queue != "b-second" || w.Leases[0].Queue != "a-first" || w.Leases[0].Key != "ns/k001" {
		t.Errorf("leases from %+v to %+v: want a-first's from its first key, then b-second's", w.Leases[0], l)
	}
	if w.StreamsKnown {
		t.Error("streams_known without a list of streams")
	}

	var p parkedJSON
	getJSON(t, base+"/api/parked", &p)
	if len(p.Parked) != parkedA+parkedB || p.Total != parkedA+parkedB || p.More != 0 || p.Limit != MaxListedKeys {
		t.Fatalf("parked: %d listed of %d, %d more, limit %d; want all %d", len(p.Parked), p.Total, p.More, p.Limit, parkedA+parkedB)
	}
	if k := p.Parked[0]; k.Queue != "a-first" || k.Key != "ns/k000" || k.LastError != "bad spec: ns/k000" || k.Attempts != 1 {
		t.Errorf("first parked key %+v, want a-first's ns/k000 with its error and 1 attempt", k)
	}
}

// TestParkedBeyondTheBound: more parked keys than the bound are counted,
// not listed.
func TestParkedBeyondTheBound(t *testing.T) {
	b := openBroker(t)
	n := MaxListedKeys + 7
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/k%04d", i)
	}
	add(t, b, "q", keys...)
	var acks []broker.AckItem
	for _, g := range lease(t, b, "q", "w", n) {
		acks = append(acks, broker.AckItem{Key: g.Key, Token: g.Token, Outcome: workqueue.Outcome{Terminal: true, Error: "<img src=x onerror=alert(1)>"}})
	}
	if _, err := b.Ack(t.Context(), "q", nil, acks); err != nil {
		t.Fatal(err)
	}
	var p parkedJSON
	getJSON(t, serveWith(t, b, Options{})+"/api/parked", &p)
	if len(p.Parked) != MaxListedKeys || p.Total != n || p.More != 7 {
		t.Errorf("parked: %d listed of %d, %d more; want %d of %d, 7 more", len(p.Parked), p.Total, p.More, MaxListedKeys, n)
	}
	if p.Parked[0].LastError != "<img src=x onerror=alert(1)>" {
		t.Errorf("error %q, want the worker's text as it sent it (the page sets it as text)", p.Parked[0].LastError)
	}
}
