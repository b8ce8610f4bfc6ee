package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// logCapture is a slog handler that keeps every record, so a test can wait
// for the line an operator would see. Records are also written to the test
// log, which helps when a test fails.
type logCapture struct {
	t     testing.TB
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

// logRecord is one captured line: its level, message and attributes (the
// logger's own With attributes included), values as strings.
type logRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func (r logRecord) String() string { return fmt.Sprintf("%v %q %v", r.Level, r.Msg, r.Attrs) }

func newLogCapture(t testing.TB) *logCapture {
	return &logCapture{t: t, mu: &sync.Mutex{}, recs: &[]logRecord{}}
}

// logger returns a logger that writes to c, at every level.
func (c *logCapture) logger() *slog.Logger { return slog.New(c) }

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	*c.recs = append(*c.recs, rec)
	c.mu.Unlock()
	if r.Level >= slog.LevelInfo {
		c.t.Log("observer log: " + rec.String())
	}
	return nil
}

func (c *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	n := *c
	n.attrs = append(append([]slog.Attr(nil), c.attrs...), as...)
	return &n
}

// WithGroup is not used by the observer; groups are flattened.
func (c *logCapture) WithGroup(string) slog.Handler { return c }

// find returns the records at level whose message contains msg and that
// match every attribute in attrs (a value "*" matches any value).
func (c *logCapture) find(level slog.Level, msg string, attrs map[string]string) []logRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []logRecord
	for _, r := range *c.recs {
		if r.Level != level || !strings.Contains(r.Msg, msg) {
			continue
		}
		ok := true
		for k, v := range attrs {
			got, has := r.Attrs[k]
			if !has || (v != "*" && got != v) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, r)
		}
	}
	return out
}

// waitLog waits until a record as find describes it has been logged, and
// returns the first.
func (c *logCapture) waitLog(t testing.TB, timeout time.Duration, level slog.Level, msg string, attrs map[string]string) logRecord {
	t.Helper()
	var got []logRecord
	waitFor(t, timeout, fmt.Sprintf("a %v line %q with %v", level, msg, attrs), func() (bool, string) {
		got = c.find(level, msg, attrs)
		return len(got) > 0, "not logged"
	})
	return got[0]
}
