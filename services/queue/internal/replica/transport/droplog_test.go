package transport

import (
	"strings"
	"sync"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// testClock is a dropLog's clock, moved by the test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestDropLogInterval: a peer that keeps sending what does not fit is
// logged again once dropLogInterval has passed, with every message
// dropped since the last line.
func TestDropLogInterval(t *testing.T) {
	m := startMember(t, 1, listen(t), map[uint64]string{2: "127.0.0.1:1"}, memberOpts{})
	clock := &testClock{now: time.Now()}
	m.tr.drops.mu.Lock()
	m.tr.drops.now = clock.Now
	m.tr.drops.mu.Unlock()
	s := newRawSender(t, m.addr)
	garbage := func(n int) {
		t.Helper()
		msgs := make([][]byte, n)
		for i := range msgs {
			msgs[i] = []byte{0xff, 0xff}
		}
		if err := s.send(&queuev1.SendRequest{ClusterId: testCluster, From: 2, To: 1, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	garbage(2)
	clock.add(dropLogInterval / 2)
	garbage(3)
	// The first message dropped is logged at once, alone.
	if lines := m.warnings("reason=malformed"); len(lines) != 1 || !strings.Contains(lines[0], "dropped=1 ") {
		t.Fatalf("WARN lines %q, want one with dropped=1", lines)
	}
	clock.add(dropLogInterval / 2)
	garbage(4)
	lines := m.warnings("reason=malformed")
	// The next line comes with the first message past the interval, and
	// counts it with the four before it (1 + 3 + 1).
	if len(lines) != 2 || !strings.Contains(lines[1], "dropped=5 ") {
		t.Fatalf("WARN lines %q, want a second with dropped=5", lines)
	}
	if got := m.counter(t, DroppedMetric, map[string]string{"peer": "2", "reason": reasonMalformed}); got != 9 {
		t.Errorf("dropped{reason=malformed} = %v, want 9", got)
	}
}
