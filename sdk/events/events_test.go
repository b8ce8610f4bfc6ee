package events

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// These tests need nothing running: the Recorder is not run, so what
// Event accepts stays in the buffer. Its writes to etcd are tested in the
// module test/sdk.

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := &bucket{tokens: 3, last: t0}
	for i := range 3 {
		if !b.take(t0, 3, time.Second) {
			t.Fatalf("take %d of a full bucket of 3 refused", i+1)
		}
	}
	if b.take(t0, 3, time.Second) {
		t.Fatal("a fourth take at once allowed")
	}
	if b.take(t0.Add(999*time.Millisecond), 3, time.Second) {
		t.Fatal("a take before a refill allowed")
	}
	if !b.take(t0.Add(time.Second), 3, time.Second) {
		t.Fatal("a take after one refill refused")
	}
	// A long quiet fills the bucket to its burst, no more.
	later := t0.Add(time.Hour)
	n := 0
	for b.take(later, 3, time.Second) {
		n++
	}
	if n != 3 {
		t.Errorf("after an hour, %d takes; want the burst, 3", n)
	}
}

func TestLRU(t *testing.T) {
	c := newLRU[int](2)
	c.put("a", 1)
	c.put("b", 2)
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Fatalf("get a = %d, %t", v, ok)
	}
	c.put("c", 3) // b is the least recently used
	if _, ok := c.get("b"); ok {
		t.Error("b kept past the bound; want it forgotten, a was used since")
	}
	if _, ok := c.get("a"); !ok {
		t.Error("a forgotten")
	}
	c.remove("a")
	if _, ok := c.get("a"); ok || c.len() != 1 {
		t.Errorf("after remove: len %d", c.len())
	}
}

func TestName(t *testing.T) {
	ref := objects.ObjectReference{Kind: "ReplicaSet", Namespace: "default", Name: "web", UID: "u1"}
	base := Name(ref, Normal, "SuccessfulCreate", "Created pod: web-a", "replicaset-controller")
	if !strings.HasPrefix(base, "web.") || len(base) != len("web.")+16 {
		t.Errorf("name %q; want web.<16 hex digits>", base)
	}
	if again := Name(ref, Normal, "SuccessfulCreate", "Created pod: web-a", "replicaset-controller"); again != base {
		t.Errorf("the same event named %q, then %q", base, again)
	}
	other := ref
	other.UID = "u2"
	for what, n := range map[string]string{
		"uid":       Name(other, Normal, "SuccessfulCreate", "Created pod: web-a", "replicaset-controller"),
		"type":      Name(ref, Warning, "SuccessfulCreate", "Created pod: web-a", "replicaset-controller"),
		"reason":    Name(ref, Normal, "SuccessfulDelete", "Created pod: web-a", "replicaset-controller"),
		"message":   Name(ref, Normal, "SuccessfulCreate", "Created pod: web-b", "replicaset-controller"),
		"component": Name(ref, Normal, "SuccessfulCreate", "Created pod: web-a", "job-controller"),
	} {
		if n == base {
			t.Errorf("another %s, the same name %q", what, n)
		}
	}
}

func TestTruncate(t *testing.T) {
	if s := truncate("short"); s != "short" {
		t.Errorf("truncate(short) = %q", s)
	}
	long := strings.Repeat("é", MaxMessageBytes) // two bytes each
	s := truncate(long)
	if len(s) > MaxMessageBytes || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
		t.Errorf("cut to %d bytes, valid %t, ends %q; want at most %d, valid, ending …", len(s), utf8.ValidString(s), s[len(s)-4:], MaxMessageBytes)
	}
}

// newIdle returns a Recorder over an etcd client that connects nowhere,
// not run.
func newIdle(t *testing.T, o Options) *Recorder {
	t.Helper()
	cli := clientv3.NewCtxClient(t.Context())
	r, err := NewRecorder(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pod(name string) objects.ObjectReference {
	return objects.ObjectReference{Kind: "Pod", Namespace: "default", Name: name, UID: "uid-" + name}
}

func TestEventDropsWhenTheBufferIsFull(t *testing.T) {
	r := newIdle(t, Options{Buffer: 2})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5 {
			r.Event(pod(string(rune('a'+i))), Normal, "Started", "Started")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Event blocked on a full buffer")
	}
	if s := r.Stats(); s.Recorded != 2 || s.BufferFull != 3 {
		t.Errorf("stats %+v; want 2 recorded, 3 dropped for a full buffer", s)
	}
}

func TestEventRateLimitsEachObject(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newIdle(t, Options{Burst: 3, Refill: time.Minute, Now: clock})
	for range 5 {
		r.Event(pod("hot"), Warning, "Failed", "boom")
	}
	r.Event(pod("calm"), Warning, "Failed", "boom")
	// Another component has a bucket of its own for the same object.
	r.WithComponent("other").Event(pod("hot"), Warning, "Failed", "boom")
	if s := r.Stats(); s.Recorded != 5 || s.RateLimited != 2 {
		t.Errorf("stats %+v; want 3 of hot's 5 and calm's, other's recorded, 2 rate-limited", s)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	r.Event(pod("hot"), Warning, "Failed", "boom")
	r.Event(pod("hot"), Warning, "Failed", "boom")
	if s := r.Stats(); s.Recorded != 6 || s.RateLimited != 3 {
		t.Errorf("after one refill, stats %+v; want one more recorded, one more rate-limited", s)
	}
}

func TestEventRefusesMalformed(t *testing.T) {
	r := newIdle(t, Options{})
	r.Event(pod("p"), "Info", "Started", "no such type")
	r.Event(pod("p"), Normal, "", "no reason")
	r.Event(pod("p"), Normal, strings.Repeat("R", MaxReasonBytes+1), "too long a reason")
	r.Event(objects.ObjectReference{Kind: "Pod", Name: "p"}, Normal, "Started", "no namespace")
	if s := r.Stats(); s.Invalid != 4 || s.Recorded != 0 {
		t.Errorf("stats %+v; want 4 invalid, none recorded", s)
	}
	r.Event(pod("p"), Normal, "Started", "100%% of %s", "it")
	r.Event(pod("p"), Normal, "Started", "100%%")
	got := []string{(<-r.buf).message, (<-r.buf).message}
	if got[0] != "100% of it" || got[1] != "100%" {
		t.Errorf("messages %q; want [100%% of it 100%%]", got)
	}
}

func TestNilRecorderRecordsNothing(t *testing.T) {
	var r *Recorder
	r.Event(pod("p"), Normal, "Started", "Started")
	r.WithComponent("x").Event(pod("p"), Normal, "Started", "Started")
	if s := r.Stats(); s != (Stats{}) {
		t.Errorf("stats of nil: %+v", s)
	}
}

func TestOptions(t *testing.T) {
	cli := clientv3.NewCtxClient(t.Context())
	for _, o := range []Options{{TTL: 500 * time.Millisecond}, {Buffer: -1}, {Burst: -1}, {Writers: -1}, {Refill: -time.Second}} {
		if _, err := NewRecorder(cli, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := NewRecorder(nil, Options{}); err == nil {
		t.Error("no etcd client accepted")
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newIdle(t, Options{Registerer: reg, Buffer: 1})
	r.Event(pod("a"), Normal, "Started", "Started")
	r.Event(pod("b"), Normal, "Started", "Started")
	r.Event(pod("c"), "Bad", "Started", "Started")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		WrittenMetric + "/create": 0, WrittenMetric + "/update": 0,
		DroppedMetric + "/buffer_full": 1, DroppedMetric + "/rate_limited": 0,
		DroppedMetric + "/invalid": 1, DroppedMetric + "/write_failed": 0,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics %v; want %v", got, want)
	}
	if _, err := NewRecorder(clientv3.NewCtxClient(t.Context()), Options{Registerer: reg}); err == nil {
		t.Error("a second Recorder registered the same metrics in one registry")
	}
}
