// Package dashboard serves the queue's live dashboard at / on its HTTP
// address, the page a person on call opens: every queue's depth by state,
// add, collapse and ack rates, the oldest pending age and longest lease, a
// depth sparkline of the last ten minutes; the workers, their work streams
// and the keys each holds; the parked keys with their errors; the
// observer's health, its lag behind etcd and its outboxes, and the
// controllers' declarations it read; and a key inspector. It is plain
// HTML, CSS, JS and SVG embedded in the binary (no npm, no CDN), fed by
// JSON endpoints:
//
//	GET /api/queues                 every queue's stats and recent samples
//	GET /api/inspect?queue=Q&key=K  one key's item
//	GET /api/members                the members of a replicated queue
//	GET /api/workers                the workers, their streams, the leased keys
//	GET /api/parked                 the parked keys with their last errors
//	GET /api/observer               the observer's last answer (ObserverWatch)
//
// /api/workers and /api/parked list at most MaxListedKeys keys each and
// say how many more there are. A worker is listed from the queue's Stats
// (who asked for keys in the last two minutes, or holds a lease) and from
// the work streams this member serves (server.Streams: who is connected,
// asking or not); a replicated queue's streams all end on the leader, so a
// follower's page leaves them to the leader's.
//
// The queue never asks etcd. With --observer-addr it asks the observer
// (grpc.health.v1 and ObserverService Status) in the background and the
// page shows the last answer, so a down observer never slows or breaks the
// page or the queue: it shows as unreachable, with what it said last.
//
// Every member of a replicated queue shows the queues: the leader from its
// memory, another member through the leader (its Source asks the leader's
// QueueService), so any member's page works; only a member that knows no
// leader answers /api/queues 503. The members table shows every member,
// the leader, and, on the leader, how many entries each member's log is
// behind its own and which members it no longer hears from. The totals
// are the leading member's memory and start again at 0 when another
// member begins to lead (counting_since_ms says since when); rates read a
// restart as a counter that started again, never as a negative rate.
//
// A sampler records each queue's counts once a second, so the history is on
// the server and a reload keeps it.
//
// The JSON endpoints answer as QueueService does: /api/inspect checks its
// queue and key with the gRPC server's checks (client/queue's CheckQueueName
// and CheckKey) and refuses with its message, and an error of a read is
// answered with the HTTP status of the gRPC code the API gives it
// (INVALID_ARGUMENT 400, NOT_FOUND 404, UNAVAILABLE 503 …). Every response
// carries a Content-Security-Policy that lets the page load and run only
// its own files and be framed by no one, X-Frame-Options DENY,
// X-Content-Type-Options nosniff and Referrer-Policy no-referrer.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"io/fs"
	"net/http"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// History is how many one-second samples each queue keeps.
const History = 600

// Source is what the dashboard reads.
// Its reads are linearizable (broker.ReadOptions' default): a member of a
// replicated queue that cannot confirm it leads shows nothing rather than
// old state.
type Source interface {
	Stats(ctx context.Context, queue string, opts broker.ReadOptions) ([]broker.QueueStats, error)
	Inspect(ctx context.Context, queue, key string, opts broker.ReadOptions) (workqueue.View, error)
	List(ctx context.Context, queue string, state workqueue.State, after string, limit int, opts broker.ReadOptions) ([]workqueue.View, bool, error)
}

// Options are what the page shows beside the queues.
type Options struct {
	// Members, if set, says who the members of a replicated queue are.
	Members func() Members
	// Streams, if set, lists the work streams this member serves; ok is
	// false where another member serves them (a follower).
	Streams func() (streams []server.StreamInfo, ok bool)
	// Observer, if set, is the observer the page shows (--observer-addr);
	// its Run polls it.
	Observer *ObserverWatch
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
	// Unreachable: the leader has not heard from it for an election
	// timeout (known on the leader alone).
	Unreachable bool `json:"unreachable"`
}

// Dashboard samples the queues and serves the page.
type Dashboard struct {
	src  Source
	opts Options
	mu   sync.Mutex
	hist map[string]*series
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
	since     int64 // when the counters began (broker.QueueStats.Since)
}

// New returns a dashboard over src; call Run to sample.
func New(src Source, o Options) *Dashboard {
	return &Dashboard{src: src, opts: o, hist: map[string]*series{}}
}

// Run samples once a second, and polls the observer, until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	if d.opts.Observer != nil {
		go d.opts.Observer.Run(ctx)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stats, err := d.src.Stats(ctx, "", broker.ReadOptions{})
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
			adds: s.Adds, collapsed: s.Collapsed, acks: s.Acks, since: s.Since}
		if n := len(h.samples); n > 0 {
			prev := h.samples[n-1]
			if dt := float64(smp.Time-prev.Time) / 1000; dt > 0 {
				smp.AddRate = rate(prev, smp, prev.adds, smp.adds, dt)
				smp.Collapse = rate(prev, smp, prev.collapsed, smp.collapsed, dt)
				smp.AckRate = rate(prev, smp, prev.acks, smp.acks, dt)
			}
		}
		if len(h.samples) == History {
			copy(h.samples, h.samples[1:])
			h.samples = h.samples[:History-1]
		}
		h.samples = append(h.samples, smp)
	}
}

// rate is a counter's rate between two samples dt seconds apart. The
// counters are the leading member's memory and start again at 0 when a
// member restarts or another begins to lead (since moves): then, as
// Prometheus reads a counter that went down, the count since the restart
// is what happened, not the difference, which would be negative (and, in
// unsigned numbers, enormous).
func rate(prev, cur Sample, was, is uint64, dt float64) float64 {
	if cur.since != prev.since || is < was {
		return float64(is) / dt
	}
	return float64(is-was) / dt
}

// queueJSON is one queue in /api/queues.
type queueJSON struct {
	Name             string  `json:"name"`
	Pending          int     `json:"pending"`
	Delayed          int     `json:"delayed"`
	Leased           int     `json:"leased"`
	Dirty            int     `json:"dirty"`
	Parked           int     `json:"parked"`
	AddsTotal        uint64  `json:"adds_total"`
	CollapsedTotal   uint64  `json:"collapsed_total"`
	AcksTotal        uint64  `json:"acks_total"`
	FailuresTotal    uint64  `json:"failures_total"`
	ExpirationsTotal uint64  `json:"lease_expirations_total"`
	OldestPendingSec float64 `json:"oldest_pending_seconds"`
	// CountingSinceMs is when the *_total counters began (Unix ms): the
	// leading member's start, or its leadership's.
	CountingSinceMs int64    `json:"counting_since_ms"`
	LongestLeaseSec float64  `json:"longest_lease_seconds"`
	AddRate         float64  `json:"add_rate"`
	CollapseRate    float64  `json:"collapse_rate"`
	AckRate         float64  `json:"ack_rate"`
	History         []Sample `json:"history"`
}

// Handle registers the page and its API on mux.
func (d *Dashboard) Handle(mux *http.ServeMux) {
	sub, _ := fs.Sub(static, "static")
	mux.Handle("/", withHeaders(http.FileServerFS(sub)))
	mux.Handle("/api/queues", withHeaders(http.HandlerFunc(d.queues)))
	mux.Handle("/api/inspect", withHeaders(http.HandlerFunc(d.inspect)))
	mux.Handle("/api/members", withHeaders(http.HandlerFunc(d.membersJSON)))
	mux.Handle("/api/workers", withHeaders(http.HandlerFunc(d.workers)))
	mux.Handle("/api/parked", withHeaders(http.HandlerFunc(d.parked)))
	mux.Handle("/api/observer", withHeaders(http.HandlerFunc(d.observer)))
}

// contentSecurityPolicy lets the page load scripts, styles, images and
// data from its own origin only (index.html has no inline script or style,
// and dashboard.js sets no style attribute), and no one frame it.
const contentSecurityPolicy = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

// withHeaders sets the headers every response of the dashboard carries,
// its errors included.
func withHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// httpStatus is the HTTP status of a gRPC code, as gRPC's HTTP gateways
// map them.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return 499 // the client closed the request: no one reads the answer
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// readError answers a read's error with the status of its gRPC code.
func readError(w http.ResponseWriter, err error) {
	msg := err.Error()
	if errors.Is(err, broker.ErrNotLeader) {
		msg = "this member does not lead the queue: the leader's dashboard shows the queues and their keys"
	}
	http.Error(w, msg, httpStatus(status.Code(server.ToStatus(err))))
}

// membersJSON answers /api/members: null for a single member.
func (d *Dashboard) membersJSON(w http.ResponseWriter, _ *http.Request) {
	if d.opts.Members == nil {
		writeJSON(w, nil)
		return
	}
	writeJSON(w, d.opts.Members())
}

func (d *Dashboard) queues(w http.ResponseWriter, r *http.Request) {
	stats, err := d.src.Stats(r.Context(), "", broker.ReadOptions{})
	if err != nil {
		readError(w, err)
		return
	}
	out := make([]queueJSON, 0, len(stats))
	d.mu.Lock()
	for _, s := range stats {
		q := queueJSON{Name: s.Name, Pending: s.Pending, Delayed: s.Delayed, Leased: s.Leased, Dirty: s.Dirty, Parked: s.Parked,
			AddsTotal: s.Adds, CollapsedTotal: s.Collapsed, AcksTotal: s.Acks, FailuresTotal: s.Failures, ExpirationsTotal: s.Expirations,
			OldestPendingSec: time.Duration(s.OldestPending).Seconds(), LongestLeaseSec: time.Duration(s.LongestLease).Seconds(),
			CountingSinceMs: s.Since / int64(time.Millisecond)}
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
	// The checks and messages of QueueService Inspect's INVALID_ARGUMENT.
	if err := limits.CheckQueueName(q); err != nil {
		http.Error(w, err.Error(), httpStatus(codes.InvalidArgument))
		return
	}
	if err := limits.CheckKey("key", k); err != nil {
		http.Error(w, err.Error(), httpStatus(codes.InvalidArgument))
		return
	}
	v, err := d.src.Inspect(r.Context(), q, k, broker.ReadOptions{})
	if err != nil {
		readError(w, err)
		return
	}
	writeJSON(w, map[string]any{
		"queue": q, "key": v.Key, "state": v.State.String(), "dirty": v.Dirty, "attempts": v.Attempts,
		"last_error": v.LastError, "announcements": v.Announcements, "worker": v.Worker,
		"pending_since_ms": ms(v.PendingSince), "not_before_ms": ms(v.NotBefore), "leased_since_ms": ms(v.LeasedAt), "lease_expires_at_ms": ms(v.LeaseExpiresAt),
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
