package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/bench/internal/profile"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ColdConfig shapes the cold start.
type ColdConfig struct {
	Sets        int           // ReplicaSets of 3 replicas each
	Concurrency int           // baton-worker's --concurrency (per controller)
	Timeout     time.Duration // give up on convergence after this long
	// Profile takes CPU profiles of every process from the first create to
	// convergence: baton-queue, baton-observer and baton-worker through
	// their --enable-pprof, and the bench process (which runs etcd)
	// through runtime/pprof (ColdResult.Profiles).
	Profile bool
}

// ColdResult is one cold start and etcd alone doing its writes.
type ColdResult struct {
	Sets     int
	Converge time.Duration // from the first create to the last set reporting 3 ready pods
	// Requests is the etcd write requests (revisions) committed from the
	// first create up to the one that made the last set ready: the
	// ReplicaSet creates (in transactions of 100), the controllers'
	// writes, the observer's checkpoints. KeyWrites counts the puts and
	// deletes in them.
	Requests, KeyWrites int
	Reconciles          float64 // baton-worker's reconcile_total when the sets had converged
	// ReconcilesBy is Reconciles by controller, which is also its queue
	// (replicasets, pods); Failed counts those that ended in an error, a
	// terminal error or a panic.
	ReconcilesBy map[string]float64
	Failed       float64
	// ReconcileMean is the mean time of a reconcile, by controller
	// (baton_worker_reconcile_duration_seconds), and ReadWaitMean the mean
	// time a cache read waited for its min_revision in the observer
	// (baton_observer_read_wait_seconds), over ReadWaits reads: together
	// they say how much of a reconcile is spent waiting for the cache.
	ReconcileMean map[string]time.Duration
	ReadWaitMean  time.Duration
	ReadWaits     float64
	// Reads is the Range requests etcd served from the first create to
	// convergence, linearizable or not (EtcdRequests): the worker's reads
	// of etcd, and the observer's liveness probe (one count-only Range
	// every 500 ms). The bench reads nothing from etcd in that time (it
	// follows the sets through a watch). ReadsKnown is false when etcd's
	// metrics could not be read.
	Reads      float64
	ReadsKnown bool
	Writers    int // concurrent writers of the etcd-alone replay
	Alone      time.Duration
	// Profiles are the processes' CPU profiles, with ColdConfig.Profile;
	// ProfileErrs says why any is missing.
	Profiles    []profile.Result
	ProfileErrs []error
}

// Ratio is how many times longer the pipeline took than etcd alone.
func (r ColdResult) Ratio() float64 { return r.Converge.Seconds() / r.Alone.Seconds() }

// PerSet is n per ReplicaSet.
func (r ColdResult) PerSet(n float64) float64 { return n / float64(r.Sets) }

// ReadsPerReconcile is Reads over Reconciles.
func (r ColdResult) ReadsPerReconcile() float64 { return r.Reads / r.Reconciles }

// Failed results of baton_worker_reconcile_total (manager.Result*).
var failedResults = map[string]bool{"error": true, "terminal": true, "panic": true}

// countReconciles adds up baton_worker_reconcile_total's series of a
// scrape into r: in all, by controller, and those that failed.
func (r *ColdResult) countReconciles(m map[string]float64) {
	r.ReconcilesBy = map[string]float64{}
	for series, v := range m {
		if !strings.HasPrefix(series, "baton_worker_reconcile_total{") {
			continue
		}
		r.Reconciles += v
		r.ReconcilesBy[labelValue(series, "controller")] += v
		if failedResults[labelValue(series, "result")] {
			r.Failed += v
		}
	}
}

// labelValue is the value of label name in a scraped series
// (name{a="x",b="y"}), "" if it has none.
func labelValue(series, name string) string {
	i := strings.Index(series, "{")
	if i < 0 {
		return ""
	}
	for _, kv := range strings.Split(strings.TrimSuffix(series[i+1:], "}"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// EtcdRequests is how many requests of method (Range, Txn, Put, …, of
// etcdserverpb.KV) the etcd servers embedded in this process have handled,
// whatever their outcome, from etcd's gRPC server metrics
// (grpc_server_handled_total), which etcd registers with the default
// Prometheus registry once a server starts. Every client's requests count:
// etcd does not label them by client.
func EtcdRequests(method string) (float64, error) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, fmt.Errorf("etcd's metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		n := 0.0
		for _, m := range mf.GetMetric() {
			var service, meth string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "grpc_service":
					service = l.GetValue()
				case "grpc_method":
					meth = l.GetValue()
				}
			}
			if service == "etcdserverpb.KV" && meth == method {
				n += m.GetCounter().GetValue()
			}
		}
		return n, nil
	}
	return 0, errors.New("etcd's gRPC server metrics are not registered (no etcd started in this process?)")
}

// profiles profiles the cold start's processes (ColdConfig.Profile).
type profiles struct {
	http []*profile.Collector
	self *profile.Collector
	errs []error
}

func startProfiles(ctx context.Context, s *Stack, w *Proc) *profiles {
	p := &profiles{}
	for _, c := range []struct{ name, addr string }{
		{"baton-queue", s.Queue.HTTPAddr}, {"baton-observer", s.Observer.HTTPAddr}, {"baton-worker", w.HTTPAddr},
	} {
		p.http = append(p.http, profile.StartHTTP(ctx, c.name, c.addr, time.Second))
	}
	var err error
	if p.self, err = profile.StartSelf("batonbench"); err != nil {
		p.errs = append(p.errs, err)
	}
	return p
}

// stop ends the bench process's profile at once and the children's once
// their chunks in flight are in (at most a second), and returns them all.
func (p *profiles) stop() ([]profile.Result, []error) {
	var rs []profile.Result
	errs := p.errs
	keep := func(r profile.Result, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		rs = append(rs, r)
	}
	var self *profile.Result
	if p.self != nil {
		r, err := p.self.Stop()
		if err == nil {
			self = &r
		} else {
			errs = append(errs, err)
		}
	}
	results := make([]profile.Result, len(p.http))
	perr := make([]error, len(p.http))
	var wg sync.WaitGroup
	for i, c := range p.http {
		wg.Go(func() { results[i], perr[i] = c.Stop() })
	}
	wg.Wait()
	for i := range p.http {
		keep(results[i], perr[i])
	}
	if self != nil {
		rs = append(rs, *self)
	}
	return rs, errs
}

// ColdStart creates cfg.Sets ReplicaSets of 3 replicas at once in an empty
// stack running baton-worker with the ReplicaSet controller and the pod
// runtime (its built-in rules, --concurrency cfg.Concurrency), and times
// until every set reports 3 ready pods. Then it replays, against a fresh
// etcd with nothing else running, the very write requests the pipeline
// committed (read back from etcd's history: same keys, values and grouping
// into transactions, each a plain put or delete), from as many writers as
// the worker ran reconciles at once, and times that too.
func ColdStart(ctx context.Context, dir string, bins Bins, cfg ColdConfig, progress func(string)) (ColdResult, error) {
	res := ColdResult{Sets: cfg.Sets, Writers: 2 * cfg.Concurrency}
	s, err := StartStackWith(ctx, dir, bins, "", cfg.Profile)
	if err != nil {
		return res, err
	}
	defer s.Close()
	w, err := s.StartWorker(ctx, bins.Worker, "replicasets,pods", cfg.Concurrency)
	if err != nil {
		return res, err
	}
	defer w.Stop()

	head, err := s.Cli.Get(ctx, "health")
	if err != nil {
		return res, fmt.Errorf("etcd: %w", err)
	}
	startRev := head.Header.Revision
	conv, err := watchReady(ctx, s, startRev, cfg.Sets)
	if err != nil {
		return res, err
	}
	defer conv.stop()

	reads0, readsErr := EtcdRequests("Range")
	var prof *profiles
	if cfg.Profile {
		prof = startProfiles(ctx, s, w)
	}
	stopProfiles := func() {
		if prof != nil {
			res.Profiles, res.ProfileErrs = prof.stop()
			prof = nil
		}
	}
	defer stopProfiles()
	start := time.Now()
	if err := createSets(ctx, s.Cli, cfg.Sets); err != nil {
		return res, err
	}
	timeout := time.NewTimer(cfg.Timeout)
	defer timeout.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-conv.done:
			break wait
		case <-tick.C:
			for name, p := range map[string]*Proc{"baton-worker": w, "baton-observer": s.Observer} {
				if err := p.Exited(); err != nil {
					return res, fmt.Errorf("%s %w", name, err)
				}
			}
		case <-timeout.C:
			return res, fmt.Errorf("cold start of %d sets: %d ready after %v", cfg.Sets, conv.ready.Load(), cfg.Timeout)
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	if conv.err != nil {
		return res, conv.err
	}
	res.Converge = conv.at.Sub(start)
	if reads1, err := EtcdRequests("Range"); err == nil && readsErr == nil {
		res.Reads, res.ReadsKnown = reads1-reads0, true
	}
	if m, err := w.Metrics(ctx); err == nil {
		res.countReconciles(m)
		res.ReconcileMean = map[string]time.Duration{}
		for c := range res.ReconcilesBy {
			res.ReconcileMean[c] = HistogramMean(nil, m, "baton_worker_reconcile_duration_seconds", fmt.Sprintf(`{controller=%q}`, c))
		}
	}
	if m, err := s.Observer.Metrics(ctx); err == nil {
		res.ReadWaitMean = HistogramMean(nil, m, "baton_observer_read_wait_seconds", "")
		res.ReadWaits = m["baton_observer_read_wait_seconds_count"]
	}
	stopProfiles()
	w.Stop()
	s.StopServices()
	if progress != nil {
		progress(fmt.Sprintf("converged in %v; reading etcd's history", res.Converge.Round(time.Millisecond)))
	}

	reqs, err := history(ctx, s.Cli, startRev, conv.rev)
	if err != nil {
		return res, err
	}
	res.Requests = len(reqs)
	for _, r := range reqs {
		res.KeyWrites += len(r)
	}
	s.Close() // free its disk and memory before etcd runs alone
	if progress != nil {
		progress(fmt.Sprintf("replaying %d write requests (%d keys) against etcd alone", res.Requests, res.KeyWrites))
	}
	res.Alone, err = replay(ctx, filepath.Join(dir, "etcd-alone"), reqs, res.Writers)
	return res, err
}

// rsJSON is a ReplicaSet of 3 nginx pods, as `batonctl apply` would write
// it (uid and generation set).
func rsJSON(name string) string {
	return fmt.Sprintf(`{"kind":"ReplicaSet","metadata":{"name":%q,"namespace":"default","uid":"uid-%s","generation":1},`+
		`"spec":{"replicas":3,"template":{"metadata":{"labels":{"app":%q}},"spec":{"image":"nginx"}}}}`, name, name, name)
}

// createSets puts the ReplicaSets in transactions of 100 (etcd allows 128
// operations per transaction by default), from one writer, as a bulk apply
// would.
func createSets(ctx context.Context, cli *clientv3.Client, n int) error {
	ops := make([]clientv3.Op, 0, 100)
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("create sets: %w", err)
		}
		ops = ops[:0]
		return nil
	}
	for i := range n {
		name := fmt.Sprintf("rs%05d", i)
		ops = append(ops, clientv3.OpPut("/registry/replicasets/default/"+name, rsJSON(name)))
		if len(ops) == cap(ops) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// convergence follows the ReplicaSets through a watch of their prefix
// (cheaper than listing 10,000 sets again and again) until want of them
// report 3 ready pods for generation 1.
type convergence struct {
	ready atomic.Int64
	done  chan struct{} // closed when converged or failed
	at    time.Time     // when the last set became ready
	rev   int64         // the revision that made it ready
	err   error
	stop  func()
}

func watchReady(ctx context.Context, s *Stack, startRev int64, want int) (*convergence, error) {
	wcli, err := NewEtcdClient(s.Etcd)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	c := &convergence{done: make(chan struct{})}
	exited := make(chan struct{})
	c.stop = func() {
		cancel()
		<-exited
		wcli.Close()
	}
	wch := wcli.Watch(wctx, "/registry/replicasets/", clientv3.WithPrefix(), clientv3.WithRev(startRev+1))
	go func() {
		defer close(exited)
		ready := map[string]bool{}
		var closed bool
		finish := func(err error) {
			if !closed {
				c.err, closed = err, true
				close(c.done)
			}
		}
		defer func() { finish(fmt.Errorf("convergence watch ended: %w", wctx.Err())) }()
		for wr := range wch {
			now := time.Now()
			if err := wr.Err(); err != nil {
				finish(fmt.Errorf("convergence watch: %w", err))
				return
			}
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				var rs struct {
					Status struct {
						ReadyReplicas      int   `json:"readyReplicas"`
						ObservedGeneration int64 `json:"observedGeneration"`
					} `json:"status"`
				}
				ok := ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &rs) == nil &&
					rs.Status.ReadyReplicas == 3 && rs.Status.ObservedGeneration == 1
				if ok != ready[k] {
					ready[k] = ok
					if ok {
						c.ready.Add(1)
					} else {
						c.ready.Add(-1)
					}
				}
				if ok && !closed && int(c.ready.Load()) == want {
					c.at, c.rev = now, ev.Kv.ModRevision
					finish(nil)
				}
			}
		}
	}()
	return c, nil
}

// history returns the write requests etcd committed in (from, to], each as
// its puts and deletes, read back through a watch from revision from+1 (a
// transaction's writes share one revision). A marker put after to ends the
// read even if nothing else was written since.
func history(ctx context.Context, cli *clientv3.Client, from, to int64) ([][]clientv3.Op, error) {
	if _, err := cli.Put(ctx, "/bench/history-end", ""); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var (
		reqs [][]clientv3.Op
		rev  int64
	)
	for wr := range cli.Watch(hctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from+1)) {
		if err := wr.Err(); err != nil {
			return nil, fmt.Errorf("read history: %w", err)
		}
		for _, ev := range wr.Events {
			r := ev.Kv.ModRevision
			if r > to {
				return reqs, nil
			}
			if r != rev || len(reqs) == 0 {
				reqs, rev = append(reqs, nil), r
			}
			var op clientv3.Op
			if ev.Type == clientv3.EventTypeDelete {
				op = clientv3.OpDelete(string(ev.Kv.Key))
			} else {
				op = clientv3.OpPut(string(ev.Kv.Key), string(ev.Kv.Value))
			}
			reqs[len(reqs)-1] = append(reqs[len(reqs)-1], op)
		}
	}
	return nil, fmt.Errorf("read history: %w", hctx.Err())
}

// replay starts a fresh etcd in dir and sends reqs from writers goroutines
// (each takes the next request), a request of one write as a plain put or
// delete and larger ones as a transaction; it returns the time from the
// first request to the last answer.
func replay(ctx context.Context, dir string, reqs [][]clientv3.Op, writers int) (time.Duration, error) {
	srv, err := StartEtcd(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	defer srv.Close()
	cli, err := NewEtcdClient(srv)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	if _, err := cli.Get(ctx, "health"); err != nil { // the connection is up before the clock starts
		return 0, fmt.Errorf("etcd: %w", err)
	}
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range writers {
		wg.Go(func() {
			for rctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				var err error
				if ops := reqs[i]; len(ops) == 1 {
					_, err = cli.Do(rctx, ops[0])
				} else {
					_, err = cli.Txn(rctx).Then(ops...).Commit()
				}
				if err != nil {
					errOnce.Do(func() { first = fmt.Errorf("replay: %w", err); cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), first
}
