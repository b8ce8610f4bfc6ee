package dashboard

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// MaxListedKeys is the most keys /api/workers lists as leases, and
// /api/parked as parked, over every queue: the queues in name order, each
// queue's keys in key order, until the bound; the answer says how many
// more there are. Each listed key costs a List of its queue, and a parked
// key's error may be 4 KiB.
const MaxListedKeys = 100

// workerJSON is one worker on one queue: what the queue's Stats says of it
// (the workers that asked for keys in the last two minutes or hold a
// lease) and the work streams it has open here.
type workerJSON struct {
	Worker string `json:"worker"`
	Queue  string `json:"queue"`
	// Leased is how many keys of the queue it holds.
	Leased int `json:"leased"`
	// LastLeaseMs is when it last asked the queue for keys (Unix ms); 0
	// when that was over two minutes ago.
	LastLeaseMs int64 `json:"last_lease_ms"`
	// Streams is how many work streams it has open on the queue, InFlight
	// and MaxInFlight their leases pushed and unanswered and their bound,
	// ConnectedSinceMs when the oldest opened, Identities the certificate
	// names they came with, Draining how many drain.
	Streams          int      `json:"streams"`
	InFlight         int      `json:"in_flight"`
	MaxInFlight      int      `json:"max_in_flight"`
	ConnectedSinceMs int64    `json:"connected_since_ms"`
	Identities       []string `json:"identities"`
	Draining         int      `json:"draining"`
}

// leaseJSON is one leased key.
type leaseJSON struct {
	Queue  string `json:"queue"`
	Key    string `json:"key"`
	Worker string `json:"worker"`
	// LeasedSinceMs is when the lease began (Unix ms); 0 where the page
	// reads the leader's QueueService, whose items do not carry it.
	LeasedSinceMs int64  `json:"leased_since_ms"`
	ExpiresMs     int64  `json:"expires_ms"`
	Attempts      uint32 `json:"attempts"`
	Dirty         bool   `json:"dirty"`
	LastError     string `json:"last_error"`
}

// workersJSON is /api/workers.
type workersJSON struct {
	// StreamsKnown: this member serves the work streams and lists them (a
	// single member, or the leader, where a follower hands every stream);
	// a follower's page says the leader's lists them.
	StreamsKnown bool         `json:"streams_known"`
	Workers      []workerJSON `json:"workers"`
	Leases       []leaseJSON  `json:"leases"`
	// LeasesTotal is every queue's leased keys, LeasesMore those not
	// listed.
	LeasesTotal int `json:"leases_total"`
	LeasesMore  int `json:"leases_more"`
	Limit       int `json:"limit"`
}

// parkedKeyJSON is one parked key.
type parkedKeyJSON struct {
	Queue     string `json:"queue"`
	Key       string `json:"key"`
	Attempts  uint32 `json:"attempts"`
	LastError string `json:"last_error"`
}

// parkedJSON is /api/parked.
type parkedJSON struct {
	Parked []parkedKeyJSON `json:"parked"`
	Total  int             `json:"total"`
	More   int             `json:"more"`
	Limit  int             `json:"limit"`
}

func ms(ns int64) int64 {
	if ns == 0 {
		return 0
	}
	return ns / int64(time.Millisecond)
}

// listState lists up to MaxListedKeys keys in state over the queues of
// stats, whose count of that state count gives; each item is handed to
// add. It returns the total the counts say and how many of them were not
// listed.
func (d *Dashboard) listState(ctx context.Context, stats []broker.QueueStats, state workqueue.State, count func(broker.QueueStats) int, add func(queue string, v workqueue.View)) (total, more int, err error) {
	shown := 0
	for _, s := range stats {
		n := count(s)
		total += n
		if n == 0 || shown >= MaxListedKeys {
			continue
		}
		views, _, err := d.src.List(ctx, s.Name, state, "", MaxListedKeys-shown, broker.ReadOptions{})
		if errors.Is(err, broker.ErrQueueNotFound) {
			continue // forgotten since the Stats
		}
		if err != nil {
			return 0, 0, err
		}
		for _, v := range views {
			add(s.Name, v)
		}
		shown += len(views)
	}
	return total, max(0, total-shown), nil
}

// workers answers /api/workers: every queue's workers and their streams,
// and the leased keys.
func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) {
	stats, err := d.src.Stats(r.Context(), "", broker.ReadOptions{})
	if err != nil {
		readError(w, err)
		return
	}
	out := workersJSON{Workers: []workerJSON{}, Leases: []leaseJSON{}, Limit: MaxListedKeys}
	type at struct{ worker, queue string }
	byName := map[at]*workerJSON{}
	get := func(worker, queue string) *workerJSON {
		k := at{worker, queue}
		if byName[k] == nil {
			byName[k] = &workerJSON{Worker: worker, Queue: queue, Identities: []string{}}
		}
		return byName[k]
	}
	for _, s := range stats {
		for _, ws := range s.Workers {
			wj := get(ws.Name, s.Name)
			wj.Leased, wj.LastLeaseMs = ws.Leased, ms(ws.LastLease)
		}
	}
	if d.opts.Streams != nil {
		var streams []server.StreamInfo
		streams, out.StreamsKnown = d.opts.Streams()
		for _, st := range streams {
			wj := get(st.Worker, st.Queue)
			wj.Streams++
			wj.InFlight += st.InFlight
			wj.MaxInFlight += st.MaxInFlight
			if at := st.Opened.UnixMilli(); wj.ConnectedSinceMs == 0 || at < wj.ConnectedSinceMs {
				wj.ConnectedSinceMs = at
			}
			if st.Identity != "" && !slices.Contains(wj.Identities, st.Identity) {
				wj.Identities = append(wj.Identities, st.Identity)
			}
			if st.Draining {
				wj.Draining++
			}
		}
	}
	for _, wj := range byName {
		out.Workers = append(out.Workers, *wj)
	}
	slices.SortFunc(out.Workers, func(a, b workerJSON) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Queue, b.Queue))
	})
	out.LeasesTotal, out.LeasesMore, err = d.listState(r.Context(), stats, workqueue.Leased,
		func(s broker.QueueStats) int { return s.Leased },
		func(q string, v workqueue.View) {
			out.Leases = append(out.Leases, leaseJSON{Queue: q, Key: v.Key, Worker: v.Worker, LeasedSinceMs: ms(v.LeasedAt),
				ExpiresMs: ms(v.LeaseExpiresAt), Attempts: v.Attempts, Dirty: v.Dirty, LastError: v.LastError})
		})
	if err != nil {
		readError(w, err)
		return
	}
	writeJSON(w, out)
}

// parked answers /api/parked: the parked keys with their errors.
func (d *Dashboard) parked(w http.ResponseWriter, r *http.Request) {
	stats, err := d.src.Stats(r.Context(), "", broker.ReadOptions{})
	if err != nil {
		readError(w, err)
		return
	}
	out := parkedJSON{Parked: []parkedKeyJSON{}, Limit: MaxListedKeys}
	out.Total, out.More, err = d.listState(r.Context(), stats, workqueue.Parked,
		func(s broker.QueueStats) int { return s.Parked },
		func(q string, v workqueue.View) {
			out.Parked = append(out.Parked, parkedKeyJSON{Queue: q, Key: v.Key, Attempts: v.Attempts, LastError: v.LastError})
		})
	if err != nil {
		readError(w, err)
		return
	}
	writeJSON(w, out)
}

// observer answers /api/observer: the observer's last answer, or that
// none is configured.
func (d *Dashboard) observer(w http.ResponseWriter, _ *http.Request) {
	if d.opts.Observer == nil {
		writeJSON(w, observerJSON{})
		return
	}
	writeJSON(w, d.opts.Observer.snapshot())
}
