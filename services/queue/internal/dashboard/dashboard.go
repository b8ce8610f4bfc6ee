// Package dashboard serves the queue's live dashboard at / on its HTTP
// address: every queue's depth by state, add, collapse and ack rates, the
// oldest pending age and longest lease, a depth sparkline of the last ten
// minutes, and a key inspector. It is plain HTML, CSS, JS and SVG embedded
// in the binary (no npm, no CDN), fed by two JSON endpoints:
//
//	GET /api/queues                 every queue's stats and recent samples
//	GET /api/inspect?queue=Q&key=K  one key's item
//	GET /api/members                the members of a replicated queue
//
// On a member of a replicated queue that does not lead, /api/queues answers
// 503 (the leader holds the queues' state) and the page says which member
// to open instead; the members table shows every member, the leader, and,
// on the leader, how many entries each member's log is behind its own.
//
// A sampler records each queue's counts once a second, so the history is on
// the server and a reload keeps it.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"sync"
	"time"

	limits "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

//go:embed static
var static embed.FS

// History is how many one-second samples each queue keeps.
const History = 600

// Source is what the dashboard reads.
type Source interface {
	Stats(queue string) ([]broker.QueueStats, error)
	Inspect(queue, key string) (workqueue.View, error)
}

// Members is a replicated queue's members as one of them sees them.
type Members struct {
	// Self is the name of the member serving the page.
	Self    string   `json:"self"`
	Members []Member `json:"members"`
}

// Member is one member: ClientAddr is where clients reach it, empty until
// it has published it; Lag is how many entries its log is behind the
// leader's, known only on the leader (Known false elsewhere).
type Member struct {
	Name       string `json:"name"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
	Leader     bool   `json:"leader"`
	Known      bool   `json:"lag_known"`
	Lag        uint64 `json:"lag"`
}

// Dashboard samples the queues and serves the page.
type Dashboard struct {
	src     Source
	members func() Members // nil for a single member
	mu      sync.Mutex
	hist    map[string]*series
}

type series struct {
	samples []Sample // oldest first, at most History
}

// Sample is one queue's state at one second.
type Sample struct {
	Time      int64   `json:"t"` // Unix milliseconds
	Pending   int     `json:"pending"`
	Delayed   int     `json:"delayed"`
	Leased    int     `json:"leased"`
	Parked    int     `json:"parked"`
	AddRate   float64 `json:"add_rate"`      // keys announced per second
	Collapse  float64 `json:"collapse_rate"` // announcements collapsed per second
	AckRate   float64 `json:"ack_rate"`
	adds      uint64
	collapsed uint64
	acks      uint64
}

// New returns a dashboard over src; call Run to sample.
// members, if not nil, says who the members of a replicated queue are.
func New(src Source, members func() Members) *Dashboard {
	return &Dashboard{src: src, members: members, hist: map[string]*series{}}
}

// Run samples once a second until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	d.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.sample(now)
		}
	}
}

func (d *Dashboard) sample(now time.Time) {
	stats, err := d.src.Stats("")
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range stats {
		h := d.hist[s.Name]
		if h == nil {
			h = &series{}
			d.hist[s.Name] = h
		}
		smp := Sample{Time: now.UnixMilli(), Pending: s.Pending, Delayed: s.Delayed, Leased: s.Leased, Parked: s.Parked,
			adds: s.Adds, collapsed: s.Collapsed, acks: s.Acks}
		if n := len(h.samples); n > 0 {
			prev := h.samples[n-1]
			if dt := float64(smp.Time-prev.Time) / 1000; dt > 0 {
				smp.AddRate = float64(smp.adds-prev.adds) / dt
				smp.Collapse = float64(smp.collapsed-prev.collapsed) / dt
				smp.AckRate = float64(smp.acks-prev.acks) / dt
			}
		}
		if len(h.samples) == History {
			copy(h.samples, h.samples[1:])
			h.samples = h.samples[:History-1]
		}
		h.samples = append(h.samples, smp)
	}
}

// queueJSON is one queue in /api/queues.
type queueJSON struct {
	Name             string   `json:"name"`
	Pending          int      `json:"pending"`
	Delayed          int      `json:"delayed"`
	Leased           int      `json:"leased"`
	Dirty            int      `json:"dirty"`
	Parked           int      `json:"parked"`
	AddsTotal        uint64   `json:"adds_total"`
	CollapsedTotal   uint64   `json:"collapsed_total"`
	AcksTotal        uint64   `json:"acks_total"`
	FailuresTotal    uint64   `json:"failures_total"`
	ExpirationsTotal uint64   `json:"lease_expirations_total"`
	OldestPendingSec float64  `json:"oldest_pending_seconds"`
	LongestLeaseSec  float64  `json:"longest_lease_seconds"`
	AddRate          float64  `json:"add_rate"`
	CollapseRate     float64  `json:"collapse_rate"`
	AckRate          float64  `json:"ack_rate"`
	History          []Sample `json:"history"`
}

// Handle registers the page and its API on mux.
func (d *Dashboard) Handle(mux *http.ServeMux) {
	sub, _ := fs.Sub(static, "static")
	mux.Handle("/", http.FileServerFS(sub))
	mux.HandleFunc("/api/queues", d.queues)
	mux.HandleFunc("/api/inspect", d.inspect)
	mux.HandleFunc("/api/members", d.membersJSON)
}

// membersJSON answers /api/members: null for a single member.
func (d *Dashboard) membersJSON(w http.ResponseWriter, _ *http.Request) {
	if d.members == nil {
		writeJSON(w, nil)
		return
	}
	writeJSON(w, d.members())
}

func (d *Dashboard) queues(w http.ResponseWriter, r *http.Request) {
	stats, err := d.src.Stats("")
	if errors.Is(err, broker.ErrNotLeader) {
		http.Error(w, "this member does not lead the queue: the leader's dashboard shows the queues", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := make([]queueJSON, 0, len(stats))
	d.mu.Lock()
	for _, s := range stats {
		q := queueJSON{Name: s.Name, Pending: s.Pending, Delayed: s.Delayed, Leased: s.Leased, Dirty: s.Dirty, Parked: s.Parked,
			AddsTotal: s.Adds, CollapsedTotal: s.Collapsed, AcksTotal: s.Acks, FailuresTotal: s.Failures, ExpirationsTotal: s.Expirations,
			OldestPendingSec: time.Duration(s.OldestPending).Seconds(), LongestLeaseSec: time.Duration(s.LongestLease).Seconds()}
		if h := d.hist[s.Name]; h != nil && len(h.samples) > 0 {
			q.History = append([]Sample(nil), h.samples...)
			last := h.samples[len(h.samples)-1]
			q.AddRate, q.CollapseRate, q.AckRate = last.AddRate, last.Collapse, last.AckRate
		}
		out = append(out, q)
	}
	d.mu.Unlock()
	writeJSON(w, out)
}

func (d *Dashboard) inspect(w http.ResponseWriter, r *http.Request) {
	q, k := r.URL.Query().Get("queue"), r.URL.Query().Get("key")
	if q == "" || !limits.ValidKey(k) {
		http.Error(w, "queue and key are required", http.StatusBadRequest)
		return
	}
	v, err := d.src.Inspect(q, k)
	if err != nil {
		// A member of a replicated queue that does not lead: the leader's
		// dashboard shows the keys.
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	ms := func(ns int64) int64 {
		if ns == 0 {
			return 0
		}
		return ns / int64(time.Millisecond)
	}
	writeJSON(w, map[string]any{
		"queue": q, "key": v.Key, "state": v.State.String(), "dirty": v.Dirty, "attempts": v.Attempts,
		"last_error": v.LastError, "announcements": v.Announcements, "worker": v.Worker,
		"pending_since_ms": ms(v.PendingSince), "not_before_ms": ms(v.NotBefore), "lease_expires_at_ms": ms(v.LeaseExpiresAt),
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
