package ratelog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines returns what log wrote, one decoded JSON object a line.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestOneLinePerCausePerInterval: a cause repeated within its interval is
// logged once, another cause at once; after the interval the cause is
// logged again with the count of lines held back.
func TestOneLinePerCausePerInterval(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	for range 1000 {
		l.Warn("stream a RESOURCE_EXHAUSTED", "opening the work stream failed", "queue", "a")
	}
	l.Warn("stream b UNAVAILABLE", "opening the work stream failed", "queue", "b")
	now = now.Add(59 * time.Second)
	l.Warn("stream a RESOURCE_EXHAUSTED", "opening the work stream failed", "queue", "a")
	got := lines(t, &buf)
	if len(got) != 2 || got[0]["queue"] != "a" || got[1]["queue"] != "b" || got[0]["level"] != "WARN" {
		t.Fatalf("lines %v, want one of each cause", got)
	}
	now = now.Add(time.Second)
	l.Warn("stream a RESOURCE_EXHAUSTED", "opening the work stream failed", "queue", "a")
	got = lines(t, &buf)
	if len(got) != 3 || got[2]["lines_held_back"] != float64(1000) {
		t.Fatalf("after the interval: %v, want a line saying 1000 were held back", got)
	}
}

// TestCausesAreBounded: a flood of distinct causes is remembered up to
// MaxCauses; further ones are held back (and counted with the next line
// logged), until the remembered ones expire.
func TestCausesAreBounded(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	for i := range MaxCauses + 50 {
		l.Info(fmt.Sprint(i), "failed")
	}
	if n := len(lines(t, &buf)); n != MaxCauses {
		t.Fatalf("%d lines, want %d", n, MaxCauses)
	}
	now = now.Add(time.Minute)
	l.Info("new", "failed")
	got := lines(t, &buf)
	if len(got) != MaxCauses+1 || got[MaxCauses]["lines_held_back"] != float64(50) {
		t.Fatalf("after the interval: %d lines, last %v, want one more counting 50 held back", len(got), got[len(got)-1])
	}
	if len(l.causes) != 1 {
		t.Errorf("%d causes remembered, want the new one alone", len(l.causes))
	}
}

// TestConcurrentAndDisabled: safe for concurrent use; a level the logger
// does not log costs nothing and counts nothing.
func TestConcurrentAndDisabled(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelWarn})
	l := New(slog.New(h), 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Warn("same", "failed")
				l.Info("quiet", "not logged")
			}
		})
	}
	wg.Wait()
	if got := lines(t, &buf); len(got) != 1 {
		t.Errorf("%d lines, want 1", len(got))
	}
	if _, ok := l.causes["quiet"]; ok {
		t.Error("a disabled level was remembered as a cause")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
