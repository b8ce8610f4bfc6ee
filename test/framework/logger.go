package framework

import (
	"log/slog"
	"testing"
)

// Logger returns a debug-level JSON logger for a service the test runs in
// its own process (a worker whose reconcilers it wraps, say). Like a child
// process's output, what it logged (the newest 8 MiB) is printed only if
// the test fails, under name: it is what tells why a condition was not
// reached in time.
func Logger(t testing.TB, name string) *slog.Logger {
	t.Helper()
	out := &output{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("framework: output of %s:\n%s", name, out.String())
		}
	})
	return slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
