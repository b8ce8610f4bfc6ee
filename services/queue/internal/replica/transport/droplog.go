package transport

import (
	"context"
	"sync"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
)

// dropLogInterval is how often, at most, what one peer sent is logged as
// dropped for one reason: a member that sends what does not fit sends it
// again at every heartbeat, and a line per message would bury the log.
const dropLogInterval = time.Minute

// dropLog rate-limits the WARN lines of inbound drops, by peer label and
// reason (both bounded: a peer's label is its id or unknownLabel).
type dropLog struct {
	mu   sync.Mutex
	now  func() time.Time
	last map[dropKey]*dropCount
}

type dropKey struct{ peer, reason string }

// dropCount is when a key was last logged and how many messages were
// dropped under it since, that line's included.
type dropCount struct {
	at      time.Time
	dropped int
}

// note records n more messages dropped under key and returns how many to
// report, and whether to log now: the first drop of a key, and the first
// one past dropLogInterval since its last line, which then reports the
// drops in between too.
func (l *dropLog) note(key dropKey, n int) (dropped int, log bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	c := l.last[key]
	if c == nil {
		if l.last == nil {
			l.last = map[dropKey]*dropCount{}
		}
		l.last[key] = &dropCount{at: now}
		return n, true
	}
	c.dropped += n
	if now.Sub(c.at) < dropLogInterval {
		return 0, false
	}
	dropped = c.dropped
	c.at, c.dropped = now, 0
	return dropped, true
}

// dropIn counts n messages received from peer (its label) and dropped for
// reason, and logs them at WARN at most once per dropLogInterval for each
// peer and reason, with the drops since the last such line, the
// certificate's name of the connection they came on (bounded and escaped:
// tlsfiles.Shown), why, and attrs.
func (t *Transport) dropIn(ctx context.Context, peer, reason string, n int, err error, attrs ...any) {
	t.m.dropped(peer, inbound, reason, n)
	dropped, ok := t.drops.note(dropKey{peer, reason}, n)
	if !ok {
		return
	}
	args := append([]any{"peer", peer, "reason", reason, "dropped", dropped}, attrs...)
	if id, ok := tlsfiles.IdentityFromPeer(ctx); ok {
		args = append(args, "identity", id.ShownName())
	}
	args = append(args, "err", err)
	t.log.Warn("raft messages from a peer dropped", args...)
}
