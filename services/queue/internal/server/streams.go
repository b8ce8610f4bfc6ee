package server

import (
	"cmp"
	"slices"
	"sync"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
)

// Streams are the work streams a server serves now: the workers connected
// to the queue, which the dashboard shows. A worker's Stats entry lapses
// two minutes after it last asked for keys (broker.SeenFor), while a work
// stream waiting on a quiet queue asked once, when it opened, and is still
// there; only the stream itself knows. A replicated queue's streams all end
// on the leader (a follower hands each on to it), so the leader's Streams
// are every stream of the queue.
type Streams struct {
	mu   sync.Mutex
	open map[*workStream]time.Time // → when it opened
}

// NewStreams returns an empty set, for NewWithStreams.
func NewStreams() *Streams { return &Streams{open: map[*workStream]time.Time{}} }

// StreamInfo is one open work stream.
type StreamInfo struct {
	Queue, Worker string
	// Identity is the CN of the caller's verified certificate (the
	// holder its leases are bound to), "" without one.
	Identity string
	Opened   time.Time
	// MaxInFlight is the open's max_in_flight; InFlight the leases it was
	// pushed and has not answered.
	MaxInFlight, InFlight int
	// Draining: the worker drained it (or the queue is stopping) and it
	// ends once it holds nothing.
	Draining bool
}

// List returns the open streams by queue, worker and opening.
func (s *Streams) List() []StreamInfo {
	s.mu.Lock()
	out := make([]StreamInfo, 0, len(s.open))
	for w, at := range s.open {
		out = append(out, w.info(at))
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b StreamInfo) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Worker, b.Worker), a.Opened.Compare(b.Opened))
	})
	return out
}

func (s *Streams) add(w *workStream) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.open[w] = time.Now()
	s.mu.Unlock()
}

func (s *Streams) remove(w *workStream) {
	if s == nil {
		return
	}
	s.mu.Lock()
	delete(s.open, w)
	s.mu.Unlock()
}

// info describes w, opened at.
func (w *workStream) info(at time.Time) StreamInfo {
	i := StreamInfo{Queue: w.queue, Worker: w.worker, Opened: at, MaxInFlight: w.max}
	if w.holder != nil && *w.holder != noCN {
		i.Identity = *w.holder
	}
	w.mu.Lock()
	i.InFlight, i.Draining = len(w.held), w.drain
	w.mu.Unlock()
	return i
}

// NewWithStreams is New, recording in streams the work streams it serves.
func NewWithStreams(b *broker.Broker, streams *Streams) queuev1.QueueServiceServer {
	return &server{b: b, streams: streams}
}
