package informer

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/services/observer/internal/object"
)

// Malformed keys and values are counted every time one is seen (a list or
// a watch event), and logged at most once per key per MalformedLogInterval:
// a controller that keeps rewriting a bad object must not flood the log.
const (
	// MalformedLogInterval is how long a key's line silences the next ones
	// for the same key.
	MalformedLogInterval = 5 * time.Minute
	// MalformedLogKeys bounds the keys remembered per prefix. With that
	// many distinct bad keys logged within an interval, lines for further
	// keys are dropped (counted, and reported with the next line logged).
	MalformedLogKeys = 1000
)

// malformedLog counts malformed keys and values by reason and rate-limits
// their log lines.
type malformedLog struct {
	log    *slog.Logger
	counts [object.NumReasons]atomic.Uint64

	mu         sync.Mutex
	limit      keyLimiter
	suppressed int // lines not logged since the last one
}

// report counts err (a *object.MalformedError) against key and logs it
// unless the key was logged recently; effect says what the observer does
// with the key.
func (m *malformedLog) report(key string, modRev int64, err error, effect string) {
	r, ok := object.ReasonOf(err)
	if !ok {
		return
	}
	m.counts[r].Add(1)
	m.mu.Lock()
	allowed := m.limit.allow(key, time.Now())
	suppressed := m.suppressed
	if allowed {
		m.suppressed = 0
	} else {
		m.suppressed++
	}
	m.mu.Unlock()
	if !allowed {
		return
	}
	attrs := []any{"key", key, "reason", r.String(), "mod_revision", modRev, "error", err}
	if suppressed > 0 {
		attrs = append(attrs, "lines_suppressed", suppressed)
	}
	m.log.Warn("malformed object: "+effect, attrs...)
}

// count returns how many times each reason was seen, indexed by Reason.
func (m *malformedLog) count() [object.NumReasons]uint64 {
	var out [object.NumReasons]uint64
	for i := range m.counts {
		out[i] = m.counts[i].Load()
	}
	return out
}

// keyLimiter allows a key once per every, remembering at most max keys.
// The zero value is not usable; see newKeyLimiter.
type keyLimiter struct {
	every time.Duration
	max   int
	last  map[string]time.Time
	swept time.Time // last sweep of expired keys
}

func newKeyLimiter(every time.Duration, max int) keyLimiter {
	return keyLimiter{every: every, max: max, last: map[string]time.Time{}}
}

// allow reports whether key may be logged at now, and if so remembers it.
// When max keys are remembered, expired ones are forgotten first (a sweep
// at most once a second, so a flood of distinct keys does not make every
// call scan the map); a key that still finds no room is refused.
func (l *keyLimiter) allow(key string, now time.Time) bool {
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every {
		return false
	}
	if _, ok := l.last[key]; !ok && len(l.last) >= l.max {
		if now.Sub(l.swept) >= time.Second {
			l.swept = now
			for k, t := range l.last {
				if now.Sub(t) >= l.every {
					delete(l.last, k)
				}
			}
		}
		if len(l.last) >= l.max {
			return false
		}
	}
	l.last[key] = now
	return true
}
