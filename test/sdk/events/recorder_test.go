package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// The Recorder against a real etcd, embedded in the test.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func etcd(t *testing.T) *clientv3.Client {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// run runs r until the test ends, and waits for Run to return.
func run(t *testing.T, r *events.Recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
}

func newRecorder(t *testing.T, cli *clientv3.Client, o events.Options) *events.Recorder {
	t.Helper()
	r, err := events.NewRecorder(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// storedEvents returns the Events in etcd, by name, with their leases.
func storedEvents(t *testing.T, cli *clientv3.Client) (map[string]events.Event, map[string]clientv3.LeaseID) {
	t.Helper()
	resp, err := cli.Get(t.Context(), kinds.EventKind().Prefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	evs, leases := map[string]events.Event{}, map[string]clientv3.LeaseID{}
	for _, kv := range resp.Kvs {
		var e events.Event
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		if want := objects.Key(events.Resource, e.Metadata.Namespace, e.Metadata.Name); string(kv.Key) != want {
			t.Errorf("event stored at %s, its metadata says %s", kv.Key, want)
		}
		evs[e.Metadata.Name], leases[e.Metadata.Name] = e, clientv3.LeaseID(kv.Lease)
	}
	return evs, leases
}

// waitFor polls cond every 10 ms until it holds, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var rs = &objects.ReplicaSet{Kind: objects.KindReplicaSet,
	Metadata: objects.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}}

func TestRepeatsCollapseIntoOneEvent(t *testing.T) {
	cli := etcd(t)
	r := newRecorder(t, cli, events.Options{Component: "replicaset-controller"})
	run(t, r)
	start := time.Now()
	for i := range 10 {
		r.Event(rs, events.Warning, "FailedCreate", "Error creating: %s", "quota")
		if i == 4 {
			// Half of them once the first are written: the rest raise
			// the stored event's count.
			waitFor(t, 10*time.Second, "the first repeats written", func() bool { return r.Stats().Created == 1 })
		}
	}
	r.Event(rs, events.Normal, "SuccessfulCreate", "Created pod: %s", "web-x7k2p")
	name := events.Name(rs.Reference(), events.Warning, "FailedCreate", "Error creating: quota", "replicaset-controller")
	var got map[string]events.Event
	waitFor(t, 10*time.Second, "one event counted 10 times, another once", func() bool {
		got, _ = storedEvents(t, cli)
		return len(got) == 2 && got[name].Count == 10
	})
	e := got[name]
	want := objects.ObjectReference{Kind: "ReplicaSet", Namespace: "default", Name: "web", UID: "uid-web"}
	if e.Kind != "Event" || e.InvolvedObject != want || e.Type != events.Warning || e.Reason != "FailedCreate" ||
		e.Message != "Error creating: quota" || e.Source.Component != "replicaset-controller" ||
		e.ReportingController != "replicaset-controller" || e.Metadata.Namespace != "default" || e.Metadata.UID == "" {
		t.Errorf("stored event %+v", e)
	}
	if e.FirstTimestamp.Before(start.Add(-time.Second)) || e.LastTimestamp.Before(e.FirstTimestamp) || time.Since(e.LastTimestamp) > time.Minute {
		t.Errorf("first %v, last %v; want first ≤ last, both since the test started at %v", e.FirstTimestamp, e.LastTimestamp, start)
	}
	// The counts follow the writes they count.
	waitFor(t, 10*time.Second, "both creates counted", func() bool { return r.Stats().Created == 2 })
	if s := r.Stats(); s.Updated < 1 || s.Updated > 9 || s.Failed != 0 {
		t.Errorf("stats %+v; want the repeats as 1 to 9 updates", s)
	}

	// Another process (a restarted worker) knows nothing of it, and finds
	// it by its name: its repeat counts on.
	r2 := newRecorder(t, cli, events.Options{Component: "replicaset-controller"})
	run(t, r2)
	r2.Event(rs, events.Warning, "FailedCreate", "Error creating: %s", "quota")
	waitFor(t, 10*time.Second, "the count raised to 11", func() bool {
		got, _ = storedEvents(t, cli)
		return got[name].Count == 11
	})
	if got[name].Metadata.UID != e.Metadata.UID || !got[name].FirstTimestamp.Equal(e.FirstTimestamp) {
		t.Errorf("after the repeat, %+v; want the uid and first time kept", got[name])
	}
}

func TestConcurrentRecordersLoseNoRepeat(t *testing.T) {
	cli := etcd(t)
	const each = 40
	var recs []*events.Recorder
	for range 3 {
		r := newRecorder(t, cli, events.Options{Component: "c", Burst: each})
		run(t, r)
		recs = append(recs, r)
	}
	var wg sync.WaitGroup
	for _, r := range recs {
		wg.Go(func() {
			for range each {
				r.Event(rs, events.Normal, "Tick", "tick")
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	name := events.Name(rs.Reference(), events.Normal, "Tick", "tick", "c")
	waitFor(t, 20*time.Second, fmt.Sprintf("one event counted %d times", 3*each), func() bool {
		got, _ := storedEvents(t, cli)
		return len(got) == 1 && got[name].Count == 3*each
	})
	for i, r := range recs {
		if s := r.Stats(); s.Failed != 0 || s.Recorded != each {
			t.Errorf("recorder %d: %+v", i, s)
		}
	}
}

func TestHotLoopIsRateLimited(t *testing.T) {
	cli := etcd(t)
	r := newRecorder(t, cli, events.Options{Burst: 5, Refill: time.Hour})
	run(t, r)
	for range 50 {
		r.Event(rs, events.Warning, "FailedReconcile", "boom")
	}
	pod := objects.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-a"}
	r.Event(pod, events.Normal, "Started", "Started")
	waitFor(t, 10*time.Second, "the 5 allowed written", func() bool {
		got, _ := storedEvents(t, cli)
		n := 0
		for _, e := range got {
			n += e.Count
		}
		return n == 6
	})
	if s := r.Stats(); s.RateLimited != 45 || s.Recorded != 6 {
		t.Errorf("stats %+v; want 45 rate-limited, 6 recorded (5 of the hot object's, the other object's)", s)
	}
}

func TestFullBufferDropsAndRunWritesTheRest(t *testing.T) {
	cli := etcd(t)
	r := newRecorder(t, cli, events.Options{Buffer: 3})
	for i := range 5 {
		pod := objects.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("p%d", i)}
		r.Event(pod, events.Normal, "Started", "Started") // not running: nothing takes them
	}
	if s := r.Stats(); s.Recorded != 3 || s.BufferFull != 2 {
		t.Fatalf("stats %+v; want 3 recorded, 2 dropped", s)
	}
	run(t, r)
	waitFor(t, 10*time.Second, "the 3 buffered events written", func() bool {
		got, _ := storedEvents(t, cli)
		return len(got) == 3
	})
	got, _ := storedEvents(t, cli)
	for _, e := range got {
		if e.InvolvedObject.Name > "p2" {
			t.Errorf("event of %s written; want only the first three", e.InvolvedObject.Name)
		}
	}
}

func TestEventsShareLeasesAndExpire(t *testing.T) {
	cli := etcd(t)
	// A bucket far longer than the test: every write shares one lease.
	r := newRecorder(t, cli, events.Options{TTL: time.Second, LeaseBucket: time.Hour})
	run(t, r)
	for i := range 20 {
		pod := objects.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("p%02d", i)}
		r.Event(pod, events.Normal, "Started", "Started")
		r.Event(pod, events.Normal, "Started", "Started")
	}
	waitFor(t, 10*time.Second, "20 events written", func() bool {
		got, _ := storedEvents(t, cli)
		return len(got) == 20
	})
	_, leases := storedEvents(t, cli)
	shared := map[clientv3.LeaseID]int{}
	for _, l := range leases {
		shared[l]++
	}
	if len(shared) != 1 || shared[0] != 0 {
		t.Errorf("events by lease %v; want all 20 under one lease", shared)
	}
	if s := r.Stats(); s.Leases != 1 {
		t.Errorf("%d leases granted; want 1", s.Leases)
	}
	ls, err := cli.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Leases) != 1 {
		t.Errorf("etcd holds %d leases; want 1", len(ls.Leases))
	}
	for id := range shared {
		ttl, err := cli.TimeToLive(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		// The lifetime and one bucket more: every event lives at least
		// its lifetime after its last write.
		if ttl.GrantedTTL < int64((time.Second + time.Hour).Seconds()) {
			t.Errorf("lease granted for %d s; want the lifetime and a bucket, %v", ttl.GrantedTTL, time.Second+time.Hour)
		}
	}
}

func TestEventExpiresWithItsLease(t *testing.T) {
	cli := etcd(t)
	r := newRecorder(t, cli, events.Options{TTL: time.Second, LeaseBucket: time.Second})
	run(t, r)
	r.Event(rs, events.Normal, "ScalingReplicaSet", "Scaled up")
	waitFor(t, 10*time.Second, "the event written", func() bool {
		got, _ := storedEvents(t, cli)
		return len(got) == 1
	})
	_, leases := storedEvents(t, cli)
	for name, l := range leases {
		if l == 0 {
			t.Fatalf("event %s written without a lease", name)
		}
	}
	// Two seconds of lease (one of lifetime, one of bucket), or etcd's
	// least TTL if that is longer; then etcd deletes it by itself.
	waitFor(t, 30*time.Second, "the event gone with its lease", func() bool {
		got, _ := storedEvents(t, cli)
		return len(got) == 0
	})
	// A repeat after it expired makes a new event.
	r.Event(rs, events.Normal, "ScalingReplicaSet", "Scaled up")
	waitFor(t, 10*time.Second, "a new event", func() bool {
		got, _ := storedEvents(t, cli)
		for _, e := range got {
			return e.Count == 1
		}
		return false
	})
}
