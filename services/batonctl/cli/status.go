package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/runtime/serve"
)

// Default HTTP ports of the services (docs/design.md, "Binaries and flags").
const (
	queueHTTPPort    = "9090"
	observerHTTPPort = "9091"
)

// defaultWorkerHTTP is the worker address status probes unless told
// otherwise (a variable for the tests: something may listen on 9092 here).
var defaultWorkerHTTP = "127.0.0.1:9092"

// withPort returns addr's host with port.
func withPort(addr, port string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func cmdStatus(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	queueHTTP := fs.String("queue-http-addr", withPort(a.queueAddr, queueHTTPPort), "the queue's HTTP address, for /readyz")
	observerHTTP := fs.String("observer-http-addr", withPort(a.observerAddr, observerHTTPPort), "the observer's HTTP address, for /readyz")
	workerHTTP := fs.String("worker-http-addr", defaultWorkerHTTP, "a worker's HTTP address, for /readyz (empty: skip; when not given, nothing listening there is no failure)")
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("usage: batonctl status [--queue-http-addr A] [--observer-http-addr A] [--worker-http-addr A]")
	}
	var failed []string
	tbl := printer.NewTable(a.Stdout, "SERVICE", "ENDPOINT", "HEALTH", "DETAIL")
	report := func(service, endpoint string, err error, detail string) {
		if err != nil {
			failed = append(failed, service)
			tbl.Row(service, endpoint, "DOWN", oneLine(err.Error()))
			return
		}
		tbl.Row(service, endpoint, "OK", detail)
	}

	// etcd: its own status, whose revision is the head the observer chases.
	var head int64
	if cli, err := a.etcd(ctx); err != nil {
		report("etcd", a.etcdEndpoints, err, "")
	} else {
		for _, ep := range a.endpoints() {
			octx, cancel := a.opCtx(ctx)
			st, err := cli.Status(octx, ep)
			cancel()
			if err != nil {
				report("etcd", ep, a.unreachable("etcd", ep, "--etcd-endpoints", err), "")
				continue
			}
			head = max(head, st.Header.Revision)
			report("etcd", ep, nil, fmt.Sprintf("v%s, revision %d, db %s", st.Version, st.Header.Revision, bytesString(st.DbSize)))
		}
	}

	// With --cacert (or --cert) the services are probed over TLS, HTTPS
	// for /readyz, each checked against the host it is reached at.
	src, err := a.tls()
	if err != nil {
		return err
	}
	scheme := "http://"
	if src != nil {
		scheme = "https://"
	}
	probe := func(service, grpcAddr, httpAddr string) error {
		octx, cancel := a.opCtx(ctx)
		defer cancel()
		return serve.Probe(octx, grpcAddr, httpAddr, serve.ProbeOptions{TLS: src})
	}
	endpoint := func(grpcAddr, httpAddr string) string {
		if grpcAddr == "" {
			return scheme + httpAddr
		}
		return grpcAddr + ", " + scheme + httpAddr
	}

	queueErr := probe("queue", a.queueAddr, *queueHTTP)
	report("queue", endpoint(a.queueAddr, *queueHTTP), queueErr, "grpc health SERVING, /readyz ok")
	var workers []workerSeen
	if queueErr == nil {
		workers = a.workersSeen(ctx)
	}

	// The observer: health, then how far its cache trails etcd.
	var prefixes []*observerv1.PrefixStatus
	var outbox uint64
	if err := probe("observer", a.observerAddr, *observerHTTP); err != nil {
		report("observer", endpoint(a.observerAddr, *observerHTTP), err, "")
	} else {
		detail := "grpc health SERVING, /readyz ok"
		if obs, err := a.observer(); err == nil {
			octx, cancel := a.opCtx(ctx)
			st, err := obs.Status(octx)
			cancel()
			if err != nil {
				report("observer", endpoint(a.observerAddr, *observerHTTP), fmt.Errorf("Status: %w", err), "")
				detail = ""
			} else {
				prefixes, outbox = st.GetPrefixes(), st.GetOutboxSize()
				var rev, lag int64
				for i, p := range prefixes {
					if i == 0 || p.GetObservedRevision() < rev {
						rev = p.GetObservedRevision()
					}
					lag = max(lag, lagOf(p, head))
				}
				detail += fmt.Sprintf(", revision %d, lag %d, outbox %d", rev, lag, outbox)
			}
		}
		if detail != "" {
			report("observer", endpoint(a.observerAddr, *observerHTTP), nil, detail)
		}
	}
	// The workers as the queue sees them: every one that asked for keys in
	// the last two minutes or holds a lease, wherever it runs (compose's
	// workers publish no port).
	for _, w := range workers {
		detail := fmt.Sprintf("%d leased; leases from %s", w.leased, strings.Join(w.queues, ", "))
		if !w.last.IsZero() {
			detail += fmt.Sprintf("; last Lease %s ago", a.now().Sub(w.last).Round(time.Second))
		}
		health := "OK"
		if w.leased == 0 && a.now().Sub(w.last) > time.Minute {
			health = "STALE" // no Lease for a minute: a live worker long-polls every few seconds
		}
		tbl.Row("worker", "seen by the queue as "+w.name, health, detail)
	}
	if *workerHTTP != "" {
		err := probe("worker", "", *workerHTTP)
		if errors.Is(err, syscall.ECONNREFUSED) && !flagSet(fs, "worker-http-addr") {
			// Workers scale and publish no port (under compose, for one),
			// so an empty default address says nothing about their health:
			// the rows above, from the queue, do.
			if len(workers) == 0 {
				tbl.Row("worker", endpoint("", *workerHTTP), "-", "not probed: nothing listens at the default address (pass --worker-http-addr), and the queue has seen no worker")
			}
		} else {
			report("worker", endpoint("", *workerHTTP), err, "/readyz ok")
		}
	}
	if err := tbl.Flush(); err != nil {
		return err
	}

	if len(prefixes) > 0 {
		fmt.Fprintln(a.Stdout)
		pt := printer.NewTable(a.Stdout, "PREFIX", "OBSERVED", "HEAD", "LAG", "EVENTS", "RELISTS", "WATCH-RESTARTS")
		for _, p := range prefixes {
			h := max(head, p.GetHeadRevision())
			pt.Row(p.GetPrefix(), fmt.Sprint(p.GetObservedRevision()), fmt.Sprint(h), fmt.Sprint(lagOf(p, head)),
				fmt.Sprint(p.GetEventsTotal()), fmt.Sprint(p.GetRelistsTotal()), fmt.Sprint(p.GetWatchRestartsTotal()))
		}
		if err := pt.Flush(); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("not healthy: %s", strings.Join(failed, ", "))
	}
	return nil
}

// flagSet reports whether name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// lagOf is how many etcd revisions a prefix's cache trails the head (the
// newer of etcd's own answer and the observer's last sight of it). A
// revision that changed another prefix also counts: the observer cannot
// know it is irrelevant until it has seen it.
func lagOf(p *observerv1.PrefixStatus, head int64) int64 {
	h := max(head, p.GetHeadRevision())
	return max(0, h-p.GetObservedRevision())
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// workerSeen is one worker across the queues that saw it.
type workerSeen struct {
	name   string
	queues []string
	leased uint64
	last   time.Time
}

// workersSeen asks the queue which workers it has seen, merged across
// queues by name; nil if the queue does not answer.
func (a *app) workersSeen(ctx context.Context) []workerSeen {
	q, err := a.queue()
	if err != nil {
		return nil
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	stats, err := q.Stats(octx, "")
	if err != nil {
		return nil
	}
	byName := map[string]*workerSeen{}
	for _, st := range stats {
		for _, w := range st.GetWorkers() {
			ws := byName[w.GetWorker()]
			if ws == nil {
				ws = &workerSeen{name: w.GetWorker()}
				byName[w.GetWorker()] = ws
			}
			ws.queues = append(ws.queues, st.GetQueue())
			ws.leased += w.GetLeased()
			if t := w.GetLastLease(); t != nil && t.AsTime().After(ws.last) {
				ws.last = t.AsTime()
			}
		}
	}
	out := make([]workerSeen, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		out = append(out, *byName[name])
	}
	return out
}
