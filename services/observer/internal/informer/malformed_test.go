package informer

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/observer/internal/object"
)

func TestKeyLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newKeyLimiter(time.Minute, 3)
	steps := []struct {
		key  string
		at   time.Duration
		want bool
	}{
		{"a", 0, true},
		{"a", time.Second, false}, // once per interval
		{"b", time.Second, true},
		{"c", 2 * time.Second, true},
		{"d", 3 * time.Second, false}, // three keys remembered: no room
		{"a", 59 * time.Second, false},
		{"a", 61 * time.Second, true},  // a's interval is over
		{"d", 62 * time.Second, true},  // b and c expired and were swept
		{"b", 63 * time.Second, true},  // room again
		{"e", 64 * time.Second, false}, // a, d, b are fresh
	}
	for i, s := range steps {
		if got := l.allow(s.key, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d: allow(%s at +%v) = %v, want %v", i, s.key, s.at, got, s.want)
		}
		if len(l.last) > 3 {
			t.Fatalf("step %d: %d keys remembered, bound 3", i, len(l.last))
		}
	}
}

func TestMalformedLogOncePerKey(t *testing.T) {
	var buf bytes.Buffer
	m := malformedLog{log: slog.New(slog.NewTextHandler(&buf, nil)), limit: newKeyLimiter(time.Hour, 2)}
	_, err := object.Decode(nil)
	for i := range 5 {
		m.report("/registry/pods/a/p", int64(i), err, "announced")
	}
	for i := range 3 {
		m.report(fmt.Sprintf("/registry/pods/a/q%d", i), 9, err, "announced")
	}
	if got := m.count()[object.Empty]; got != 8 {
		t.Errorf("counted %d empty values, want 8 (every report)", got)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "key=/registry/pods/a/p") || !strings.Contains(lines[0], "reason=empty") {
		t.Errorf("logged %d lines, want one for p and one for q0 (then the bound):\n%s", len(lines), buf.String())
	}
	if len(lines) == 2 && !strings.Contains(lines[1], "lines_suppressed=4") {
		t.Errorf("second line does not report the 4 lines suppressed before it: %s", lines[1])
	}
}
