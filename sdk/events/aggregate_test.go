package events

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSimilarEventsCombine(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newIdle(t, Options{Now: clock, Burst: 100})
	rs := pod("web")
	rs.Kind = "ReplicaSet"
	for i := range 12 {
		r.Event(rs, Normal, "SuccessfulCreate", "Created pod: web-%d", i)
	}
	// Another reason, another type and another object are not similar.
	r.Event(rs, Normal, "SuccessfulDelete", "Deleted pod: web-0")
	r.Event(rs, Warning, "SuccessfulCreate", "Created pod: web-0")
	r.Event(pod("other"), Normal, "SuccessfulCreate", "Created pod: web-0")
	var got []record
	for len(r.buf) > 0 {
		got = append(got, <-r.buf)
	}
	if len(got) != 15 {
		t.Fatalf("%d events buffered, want 15", len(got))
	}
	for i, rec := range got[:9] {
		if want := fmt.Sprintf("Created pod: web-%d", i); rec.combined || rec.message != want {
			t.Errorf("event %d: %q (combined %t); want %q on its own", i, rec.message, rec.combined, want)
		}
	}
	combinedName := got[9].name()
	for i, rec := range got[9:12] {
		if want := fmt.Sprintf("%sCreated pod: web-%d", CombinedPrefix, 9+i); !rec.combined || rec.message != want {
			t.Errorf("event %d: %q (combined %t); want %q", 9+i, rec.message, rec.combined, want)
		}
		if rec.name() != combinedName {
			t.Errorf("combined event %d named %s, the first %s: want one Event", 9+i, rec.name(), combinedName)
		}
	}
	if got[9].name() == got[0].name() || !strings.HasPrefix(combinedName, "web.") {
		t.Errorf("the combined event is named %s", combinedName)
	}
	for _, rec := range got[12:] {
		if rec.combined {
			t.Errorf("%s %s about %s combined with events it is not similar to", rec.typ, rec.reason, rec.ref.Name)
		}
	}

	// Similar events forgotten after a quiet window start apart again.
	mu.Lock()
	now = now.Add(AggregateWindow + time.Second)
	mu.Unlock()
	r.Event(rs, Normal, "SuccessfulCreate", "Created pod: web-99")
	if rec := <-r.buf; rec.combined || rec.message != "Created pod: web-99" {
		t.Errorf("after the window: %q (combined %t); want it on its own", rec.message, rec.combined)
	}
}
