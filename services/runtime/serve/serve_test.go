package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLogWritten checks that a finished call is logged exactly when its
// level is enabled, that the handler runs once either way, and that a
// replayed call's line carries the call's own duration.
func TestLogWritten(t *testing.T) {
	const slow = 20 * time.Millisecond
	cases := []struct {
		name  string
		level slog.Level
		err   error
		lines int
	}{
		{"ok at info is not logged", slog.LevelInfo, nil, 0},
		{"not found at info is not logged", slog.LevelInfo, status.Error(codes.NotFound, "nope"), 0},
		{"invalid argument at info is logged", slog.LevelInfo, status.Error(codes.InvalidArgument, "bad key"), 1},
		{"internal at warn is logged", slog.LevelWarn, status.Error(codes.Internal, "boom"), 1},
		{"invalid argument at error is not logged", slog.LevelError, status.Error(codes.InvalidArgument, "bad key"), 0},
		{"ok at debug is logged", slog.LevelDebug, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
				log.Log(ctx, slog.Level(lvl), msg, fields...)
			})
			ic := logWritten(log, logging.UnaryServerInterceptor(logger, logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(callLevel)))
			calls := 0
			resp, err := ic(t.Context(), "req", &grpc.UnaryServerInfo{FullMethod: "/baton.queue.v1.QueueService/Add"}, func(context.Context, any) (any, error) {
				calls++
				time.Sleep(slow) // a call that takes time, to see its duration logged
				return "resp", tc.err
			})
			if calls != 1 {
				t.Fatalf("handler ran %d times, want 1", calls)
			}
			if err != tc.err || resp != "resp" {
				t.Fatalf("got (%v, %v), want the handler's (resp, %v)", resp, err, tc.err)
			}
			out := strings.TrimSpace(buf.String())
			var lines []string
			if out != "" {
				lines = strings.Split(out, "\n")
			}
			if len(lines) != tc.lines {
				t.Fatalf("%d log lines, want %d:\n%s", len(lines), tc.lines, out)
			}
			if tc.lines == 0 {
				return
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatal(err)
			}
			if got, want := line["grpc.code"], status.Code(tc.err).String(); got != want {
				t.Errorf("grpc.code = %v, want %v", got, want)
			}
			if line["grpc.method"] != "Add" {
				t.Errorf("grpc.method = %v, want Add", line["grpc.method"])
			}
			ms, err := strconv.ParseFloat(line["grpc.time_ms"].(string), 64)
			if err != nil || ms < float64(slow.Milliseconds()) {
				t.Errorf("grpc.time_ms = %v, want at least the call's %v", line["grpc.time_ms"], slow)
			}
		})
	}
}
