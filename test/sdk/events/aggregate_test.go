package events_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/batonrun/baton/sdk/events"
)

// TestSimilarEventsAreCombined: a ReplicaSet that creates 15 pods leaves
// an event for each of the first 9 and one for the other 6, counted 6
// times, with the latest message: client-go's aggregation.
func TestSimilarEventsAreCombined(t *testing.T) {
	cli := etcd(t)
	r := newRecorder(t, cli, events.Options{Component: "replicaset-controller"})
	run(t, r)
	for i := range 15 {
		r.Event(rs, events.Normal, "SuccessfulCreate", "Created pod: web-%02d", i)
		if i == 11 {
			// The rest once the combined event is stored: they raise
			// its count.
			waitFor(t, 10*time.Second, "the first events written", func() bool { return r.Stats().Created == 10 })
		}
	}
	combined := events.Name(rs.Reference(), events.Normal, "SuccessfulCreate", events.CombinedPrefix, "replicaset-controller")
	var got map[string]events.Event
	waitFor(t, 10*time.Second, "9 events and a combined one counted 6 times", func() bool {
		got, _ = storedEvents(t, cli)
		return len(got) == 10 && got[combined].Count == 6
	})
	if want := events.CombinedPrefix + "Created pod: web-14"; got[combined].Message != want {
		t.Errorf("combined message %q, want the latest, %q", got[combined].Message, want)
	}
	for i := range 9 {
		msg := fmt.Sprintf("Created pod: web-%02d", i)
		if e := got[events.Name(rs.Reference(), events.Normal, "SuccessfulCreate", msg, "replicaset-controller")]; e.Message != msg || e.Count != 1 {
			t.Errorf("event of web-%02d: %+v; want one of its own", i, e)
		}
	}
}
