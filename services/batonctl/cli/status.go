package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/runtime/flagenv"
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

func setupStatus(fs *flag.FlagSet, a *app) runFunc {
	// --queue-http-addr is a global flag (the alias make up-ha prints
	// carries every member's), which may still follow the command.
	observerHTTP := fs.String("observer-http-addr", withPort(a.observerAddr, observerHTTPPort), "the observer's HTTP address, for /readyz")
	workerHTTP := fs.String("worker-http-addr", defaultWorkerHTTP, "a worker's HTTP address, for /readyz (empty: skip; when not given, nothing listening there is no failure)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) > 0 {
			return usagef("usage: batonctl status [--queue-http-addr A[,A…]] [--observer-http-addr A] [--worker-http-addr A]")
		}
		return a.status(ctx, *observerHTTP, *workerHTTP, flagSet(fs, "worker-http-addr"))
	}
}

// status prints each service's health and fails when one is down.
func (a *app) status(ctx context.Context, observerHTTP, workerHTTP string, workerGiven bool) error {
	queueAddrs, err := a.queueAddrs()
	if err != nil {
		return err
	}
	queueHTTP, err := a.queueHTTPAddrs(queueAddrs)
	if err != nil {
		return err
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
		err := serve.Probe(octx, grpcAddr, httpAddr, serve.ProbeOptions{TLS: src})
		if err != nil && grpcAddr != "" {
			// Not a bare DOWN: why, as a probe of the address finds.
			what, flagName := "the queue", "--queue-addr"
			if service == "observer" {
				what, flagName = "the observer", "--observer-addr"
			}
			if derr, _ := diagnose(ctx, a.grpcProbes(what, flagName, grpcAddr)); derr != nil {
				return derr
			}
		}
		return err
	}
	endpoint := func(grpcAddr, httpAddr string) string {
		switch {
		case grpcAddr == "":
			return scheme + httpAddr
		case httpAddr == "":
			return grpcAddr
		}
		return grpcAddr + ", " + scheme + httpAddr
	}

	var queueErr error
	if len(queueAddrs) == 1 {
		queueErr = probe("queue", queueAddrs[0], queueHTTP[0])
		detail := "grpc health SERVING, /readyz ok"
		if queueErr == nil {
			// A member of a replicated queue given alone: its role.
			if ms, err := a.askMembers(ctx, queueAddrs); err == nil && ms[0].status.GetMemberCount() > 1 {
				detail += "; " + memberDetail(ms[0].status)
			}
		}
		report("queue", endpoint(queueAddrs[0], queueHTTP[0]), queueErr, detail)
	} else {
		rows, err := a.queueMembersStatus(ctx, queueAddrs, queueHTTP, probe, endpoint)
		if err != nil {
			return err
		}
		summary := rows[0]
		if summary.health != "OK" {
			queueErr = errors.New(summary.detail)
			failed = append(failed, "queue")
		}
		for _, r := range rows {
			tbl.Row(r.service, r.endpoint, r.health, r.detail)
		}
	}
	var workers []workerSeen
	if queueErr == nil {
		workers = a.workersSeen(ctx)
	}

	// The observer: health, then how far its cache trails etcd.
	var prefixes []*observerv1.PrefixStatus
	var outbox uint64
	if err := probe("observer", a.observerAddr, observerHTTP); err != nil {
		report("observer", endpoint(a.observerAddr, observerHTTP), err, "")
	} else {
		detail := "grpc health SERVING, /readyz ok"
		if obs, err := a.observer(); err == nil {
			octx, cancel := a.opCtx(ctx)
			st, err := obs.Status(octx)
			cancel()
			if err != nil {
				report("observer", endpoint(a.observerAddr, observerHTTP), fmt.Errorf("the Status call: %w", err), "")
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
			report("observer", endpoint(a.observerAddr, observerHTTP), nil, detail)
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
	if workerHTTP != "" {
		err := probe("worker", "", workerHTTP)
		if errors.Is(err, syscall.ECONNREFUSED) && !workerGiven {
			// Workers scale and publish no port (under compose, for one),
			// so an empty default address says nothing about their health:
			// the rows above, from the queue, do.
			if len(workers) == 0 {
				tbl.Row("worker", endpoint("", workerHTTP), "-", "not probed: nothing listens at the default address (pass --worker-http-addr), and the queue has seen no worker")
			}
		} else {
			report("worker", endpoint("", workerHTTP), err, "/readyz ok")
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

// queueHTTPAddrs returns each member's HTTP address, in addrs' order:
// --queue-http-addr's, or each member's host with the default port, ""
// for members that share a host (on one host they cannot all have it,
// and probing one member's port for all would report one member thrice).
func (a *app) queueHTTPAddrs(addrs []string) ([]string, error) {
	if given := flagenv.SplitList(a.queueHTTPAddr); len(given) > 0 {
		if len(given) != len(addrs) {
			return nil, usagef("--queue-http-addr has %d addresses and --queue-addr %d: give each member's HTTP address, in --queue-addr's order", len(given), len(addrs))
		}
		for _, h := range given {
			if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
				return nil, usagef("--queue-http-addr: %q is not host:port", h)
			}
		}
		return given, nil
	}
	out := make([]string, len(addrs))
	for i, addr := range addrs {
		host, _, _ := net.SplitHostPort(addr) // queueAddrs checked it
		if len(addrs) == 1 || sameHost(addrs, host) == 1 {
			out[i] = withPort(addr, queueHTTPPort)
		}
	}
	return out, nil
}

// statusRow is one row of status's table.
type statusRow struct{ service, endpoint, health, detail string }

// queueMembersStatus probes every member of a replicated queue given as a
// list: a row for the queue, then one per address. Each member says its
// role (ClusterService Status) and is probed as a service (grpc.health.v1,
// /readyz). The queue is OK when a member leads and a majority of the
// queue's members are ready (serving, and knowing the leader): a member
// down or cut off is reported, and is no failure while the others carry
// the queue.
func (a *app) queueMembersStatus(ctx context.Context, addrs, httpAddrs []string, probe func(service, grpcAddr, httpAddr string) error, endpoint func(grpcAddr, httpAddr string) string) ([]statusRow, error) {
	ms, err := a.askMembers(ctx, addrs)
	if err != nil {
		return nil, err
	}
	probes := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { probes[i] = probe("queue", m.addr, httpAddrs[i]) })
	}
	wg.Wait()

	var (
		rows   []statusRow
		ready  = map[string]bool{} // by name: an address given twice is one member
		size   uint32
		leader string
		term   uint64
	)
	for i, m := range ms {
		ep := endpoint(m.addr, httpAddrs[i])
		st := m.status
		if st == nil {
			err := m.err
			if status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded || probes[i] != nil {
				if probes[i] != nil {
					err = probes[i]
				}
				rows = append(rows, statusRow{"member", ep, "DOWN", "unreachable: " + reason(err)})
			} else {
				rows = append(rows, statusRow{"member", ep, "DOWN", "the ClusterService Status call: " + oneLine(err.Error())})
			}
			continue
		}
		size = max(size, st.GetMemberCount())
		detail := st.GetMember().GetName() + ": " + memberDetail(st)
		if probes[i] != nil {
			rows = append(rows, statusRow{"member", ep, "DOWN", detail + "; " + oneLine(probes[i].Error())})
			continue
		}
		ready[st.GetMember().GetName()] = true
		switch {
		case st.GetMember().GetLeader():
			leader, term = st.GetMember().GetName(), st.GetMember().GetTerm()
		case leader == "" && st.GetLeaderName() != "":
			leader, term = st.GetLeaderName(), st.GetMember().GetTerm()
		}
		if httpAddrs[i] == "" {
			detail += "; grpc health SERVING, /readyz not probed (give --queue-http-addr)"
		} else {
			detail += "; grpc health SERVING, /readyz ok"
		}
		rows = append(rows, statusRow{"member", ep, "OK", detail})
	}

	summary := statusRow{service: "queue", endpoint: strings.Join(addrs, ","), health: "DOWN"}
	majority := int(size)/2 + 1
	switch {
	case size == 0:
		summary.detail = "no member answers"
	case leader == "":
		summary.detail = fmt.Sprintf("no member that is ready knows a leader; %d of %d members ready", len(ready), size)
	case len(ready) < majority:
		summary.detail = fmt.Sprintf("%s leads, but %d of %d members are ready, and a majority is %d", leader, len(ready), size, majority)
	default:
		summary.health = "OK"
		summary.detail = fmt.Sprintf("%s leads, term %d; %d of %d members ready", leader, term, len(ready), size)
	}
	return append([]statusRow{summary}, rows...), nil
}

// memberDetail is what a member says of itself: its role, term and
// applied index.
func memberDetail(st *queuev1.StatusResponse) string {
	return fmt.Sprintf("%s, term %d, applied %d", role(st), st.GetMember().GetTerm(), st.GetMember().GetAppliedIndex())
}

// reason is why a member could not be reached, short enough for a table
// cell.
func reason(err error) string {
	s := err.Error()
	for _, short := range []string{"connection refused", "no such host", "deadline exceeded"} {
		if strings.Contains(s, short) {
			return short
		}
	}
	if st, ok := status.FromError(err); ok {
		return oneLine(st.Message())
	}
	return oneLine(s)
}
