package stack

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// etcdLog filters what the embedded etcd logs through etcdembed: etcd logs
// a "request stats" line for every request at warning level, and a burst of
// errors about its listeners closing when it is stopped on purpose. Neither
// tells a developer anything; everything else passes.
type etcdLog struct {
	next     slog.Handler
	stopping *atomic.Bool
}

func newEtcdLog(log *slog.Logger, stopping *atomic.Bool) *slog.Logger {
	return slog.New(&etcdLog{next: log.Handler(), stopping: stopping}).With("part", "etcd")
}

func (h *etcdLog) Enabled(ctx context.Context, l slog.Level) bool {
	return !h.stopping.Load() && h.next.Enabled(ctx, l)
}

func (h *etcdLog) Handle(ctx context.Context, r slog.Record) error {
	if h.stopping.Load() || r.Message == "request stats" {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *etcdLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &etcdLog{next: h.next.WithAttrs(as), stopping: h.stopping}
}

func (h *etcdLog) WithGroup(name string) slog.Handler {
	return &etcdLog{next: h.next.WithGroup(name), stopping: h.stopping}
}
