package replica

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger is raft.Logger on slog. Raft's Info lines are its elections
// and term changes, rare and worth keeping; its Debug lines are per
// message. Fatal and Panic panic, as raft's own logger does: raft calls
// them on a broken invariant and does not expect them to return.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) log(level slog.Level, msg string) {
	r.l.Log(context.Background(), level, msg)
}

func (r raftLogger) Debug(v ...any)              { r.log(slog.LevelDebug, fmt.Sprint(v...)) }
func (r raftLogger) Debugf(f string, v ...any)   { r.log(slog.LevelDebug, fmt.Sprintf(f, v...)) }
func (r raftLogger) Info(v ...any)               { r.log(slog.LevelInfo, fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.log(slog.LevelInfo, fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.log(slog.LevelWarn, fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.log(slog.LevelWarn, fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.log(slog.LevelError, fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.log(slog.LevelError, fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { r.fatal(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any)   { r.fatal(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)              { r.fatal(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any)   { r.fatal(fmt.Sprintf(f, v...)) }

func (r raftLogger) fatal(msg string) {
	r.log(slog.LevelError, msg)
	panic(msg)
}
