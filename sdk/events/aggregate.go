package events

import "time"

// Similar events are combined, as client-go's EventAggregator combines
// them: events that differ in their message alone (one object, type,
// reason and component: "Created pod: web-x7k2p", "Created pod:
// web-9fz2q"…) are each an Event of their own up to AggregateMax
// different messages within AggregateWindow; from then on they are
// recorded as one Event, whose message is CombinedPrefix and the latest
// message and whose count rises with each. A ReplicaSet scaled from 0 to
// 100 leaves 9 Events of one pod each and one of the rest, not 100.
const (
	// AggregateMax is how many different messages of similar events are
	// kept apart (client-go's defaultAggregateMaxEvents).
	AggregateMax = 10
	// AggregateWindow is how long similar events are remembered after
	// the last of them (client-go's defaultAggregateIntervalInSeconds).
	AggregateWindow = 10 * time.Minute
	// CombinedPrefix begins the message of combined events.
	CombinedPrefix = "(combined from similar events): "
)

// similar is what a Recorder remembers of one set of similar events.
type similar struct {
	messages map[string]struct{}
	last     time.Time
}

// aggregate marks rec combined when it is similar to AggregateMax-1 other
// recent ones with other messages, and gives it the combined message.
func (c *core) aggregate(rec *record) {
	key := rec.component + "\x00" + rec.ref.Kind + "\x00" + rec.ref.Namespace + "\x00" + rec.ref.Name + "\x00" +
		rec.ref.UID + "\x00" + rec.typ + "\x00" + rec.reason
	c.similarMu.Lock()
	defer c.similarMu.Unlock()
	s, ok := c.similar.get(key)
	if !ok || rec.at.Sub(s.last) > AggregateWindow {
		s = &similar{messages: map[string]struct{}{}}
		c.similar.put(key, s)
	}
	s.last = rec.at
	s.messages[rec.message] = struct{}{}
	if len(s.messages) < AggregateMax {
		return
	}
	// Keep the set bounded; which message goes does not matter, as
	// client-go's PopAny.
	for m := range s.messages {
		delete(s.messages, m)
		break
	}
	rec.combined = true
	rec.message = truncate(CombinedPrefix + rec.message)
}
