package peers

import (
	"context"
	"sync"
	"testing"
	"time"
)

// forgetful drops an announcement of a key a worker holds, as a queue that
// deduplicates by id does.
type forgetful struct {
	*ClientGo
	mu   sync.Mutex
	held map[string]bool
}

func (f *forgetful) Add(ctx context.Context, keys []string) error {
	f.mu.Lock()
	var keep []string
	for _, k := range keys {
		if !f.held[k] {
			keep = append(keep, k)
		}
	}
	f.mu.Unlock()
	return f.ClientGo.Add(ctx, keep)
}

func (f *forgetful) Lease(ctx context.Context, w string, max int, wait time.Duration) ([]Leased, error) {
	ls, err := f.ClientGo.Lease(ctx, w, max, wait)
	f.mu.Lock()
	for _, l := range ls {
		f.held[l.Key] = true
	}
	f.mu.Unlock()
	return ls, err
}

func (f *forgetful) Ack(ctx context.Context, w string, ls []Leased) error {
	f.mu.Lock()
	for _, l := range ls {
		delete(f.held, l.Key)
	}
	f.mu.Unlock()
	return f.ClientGo.Ack(ctx, w, ls)
}

func TestWorkloadsOnClientGo(t *testing.T) {
	ctx := t.Context()
	q := NewClientGo()
	defer q.Close()
	r, err := Cycle(ctx, q, "c", 100, 4, 100*time.Millisecond)
	if err != nil || r.Keys == 0 {
		t.Fatalf("cycle: %+v, %v", r, err)
	}
	if n, err := Collapse(ctx, q, 20_000, 1000); err != nil || n != 1000 {
		t.Fatalf("collapse: %d deliveries, %v; want 1000", n, err)
	}
	c, n, err := Changes(ctx, q, 500, 100, 4)
	if err != nil || c.Total() != 0 || n != 500 {
		t.Fatalf("changes: %+v, %d events, %v; want no violations in 500", c, n, err)
	}
}

func TestChangesCountsLostAnnouncements(t *testing.T) {
	q := &forgetful{ClientGo: NewClientGo(), held: map[string]bool{}}
	defer q.Close()
	// Every key is delivered once and its announcement while held is
	// dropped: 100 events, all lost, then the queue runs dry.
	c, n, err := Changes(t.Context(), q, 300, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lost != 100 || n != 100 {
		t.Fatalf("%+v in %d events, want 100 lost in 100", c, n)
	}
}
