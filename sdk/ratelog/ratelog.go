// Package ratelog keeps a failure that repeats from flooding a log: a line
// per cause per interval, and the next line logged for a cause says how
// many of its lines were held back since. A worker whose calls are refused
// over and over (a queue that refuses its stream, an observer that cannot
// be reached) logs a few lines a minute, not one per retry, while a new
// cause is logged at once.
//
// It is the observer's idea for malformed objects and refused
// declarations (a line per key per interval), for callers outside the
// observer: the worker SDK's manager logs its loops' failures through it,
// and so does baton-worker's garbage collector.
//
//	l := ratelog.New(log, ratelog.DefaultInterval)
//	l.Warn("stream "+queue+" "+status.Code(err).String(), "opening the work stream failed", "err", err)
//
// A cause is a short string the caller builds from what makes two
// failures the same one (what was attempted, on which queue, with which
// gRPC code); the error text itself is usually too varied to be one.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how long a line of a cause holds back the next lines
// of that cause, unless a Logger is made with another.
const DefaultInterval = time.Minute

// MaxCauses bounds the causes a Logger remembers. With that many held
// back within one interval, a line of a new cause is held back too (and
// counted, with the next line logged of any cause).
const MaxCauses = 1000

// Logger logs through a *slog.Logger, at most a line per cause per
// interval. It is safe for concurrent use.
type Logger struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	causes map[string]*cause
	swept  time.Time // the last sweep of expired causes
	lost   int       // lines held back because MaxCauses were remembered
}

// cause is what a Logger remembers of one cause.
type cause struct {
	logged time.Time // when its last line was logged
	held   int       // its lines held back since
}

// New returns a Logger that logs through log (nil discards) at most a line
// per cause per every (0 means DefaultInterval).
func New(log *slog.Logger, every time.Duration) *Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		every = DefaultInterval
	}
	return &Logger{log: log, every: every, now: time.Now, causes: map[string]*cause{}}
}

// Info logs msg with args at INFO unless a line of cause was logged less
// than an interval ago.
func (l *Logger) Info(cause, msg string, args ...any) { l.Log(slog.LevelInfo, cause, msg, args...) }

// Warn logs msg with args at WARN unless a line of cause was logged less
// than an interval ago.
func (l *Logger) Warn(cause, msg string, args ...any) { l.Log(slog.LevelWarn, cause, msg, args...) }

// Log logs msg with args at level unless a line of cause was logged less
// than an interval ago. A line logged after some were held back carries
// lines_held_back, their number.
func (l *Logger) Log(level slog.Level, cause, msg string, args ...any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	held, ok := l.allow(cause)
	if !ok {
		return
	}
	if held > 0 {
		args = append(args, "lines_held_back", held)
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// allow reports whether a line of key may be logged now, and how many of
// its lines (and of causes it could not remember) were held back since.
func (l *Logger) allow(key string) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	c := l.causes[key]
	if c != nil && now.Sub(c.logged) < l.every {
		c.held++
		return 0, false
	}
	if c == nil {
		if len(l.causes) >= MaxCauses {
			l.sweep(now)
		}
		if len(l.causes) >= MaxCauses {
			l.lost++
			return 0, false
		}
		c = &cause{}
		l.causes[key] = c
	}
	held = c.held + l.lost
	c.logged, c.held, l.lost = now, 0, 0
	return held, true
}

// sweep forgets the causes whose interval has passed, at most once a
// second, so that a flood of distinct causes does not make every line scan
// them all. A cause forgotten with lines held back loses their count.
func (l *Logger) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Second {
		return
	}
	l.swept = now
	for k, c := range l.causes {
		if now.Sub(c.logged) >= l.every {
			delete(l.causes, k)
		}
	}
}
