package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ProbePrefix is where the latency workload writes; ProbeRules sends every
// change under it to the queue "probe" (key "namespace/name").
const (
	ProbePrefix = "/registry/probes/"
	ProbeQueue  = "probe"
	ProbeRules  = "rules:\n  - queue: " + ProbeQueue + "\n    prefix: " + ProbePrefix + "\n"
)

// LatencyConfig shapes the latency workload.
type LatencyConfig struct {
	Rate        int           // puts per second, paced
	Duration    time.Duration // how long puts are issued
	Concurrency int           // reconciles at once in the probe worker
}

// LatencyResult holds, for every put of the run, sorted: the time from just
// before the put call to the start of the reconcile of its key (Reconcile),
// to its event on a plain etcd watch of another connection (Watch), and to
// the put call's return (Put).
type LatencyResult struct {
	Puts                  int
	Issuing               time.Duration // from the first put to the last issued
	Reconcile, Watch, Put []time.Duration
	// Ready splits Reconcile at the moment the key became ready in the
	// queue (the lease's pending_since, on the same machine's clock):
	// Ready is from before the put to then (etcd, the watch, the observer,
	// the Add reaching the queue's memory), Handoff from then to the
	// reconcile's start (the lease, the push on the work stream, the
	// worker's dispatch). Both sorted.
	Ready, Handoff []time.Duration
	// Where the time goes, means over the measured puts from the services'
	// own histograms (0 if a histogram could not be read): the observer's
	// time from observing a change to the queue accepting its Add, and the
	// queue's time from a key becoming ready to its lease.
	ObserverAdd, QueueWait time.Duration
}

// PutRate is the rate the puts were actually issued at.
func (r LatencyResult) PutRate() float64 {
	if r.Issuing <= 0 || r.Puts < 2 {
		return 0
	}
	return float64(r.Puts-1) / r.Issuing.Seconds()
}

// firstSeen records the first time each key was seen.
type firstSeen struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (f *firstSeen) see(key string, at time.Time) {
	f.mu.Lock()
	if _, ok := f.at[key]; !ok {
		f.at[key] = at
	}
	f.mu.Unlock()
}

func (f *firstSeen) has(keys []string) (missing int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if _, ok := f.at[k]; !ok {
			missing++
		}
	}
	return missing
}

// Latency runs the latency workload on a stack started with ProbeRules:
// distinct objects put under ProbePrefix at cfg.Rate a second for
// cfg.Duration, each put in its own goroutine at its slot of the schedule
// (open loop: a slow put does not delay the next), while
//
//   - a probe controller, the worker SDK's manager leasing from the queue
//     "probe" in this process, notes when each key's reconcile starts, and
//   - a plain clientv3 watch of ProbePrefix on a connection of its own notes
//     when each put's event arrives: etcd's own put → watch latency, on the
//     same puts at the same moments, so both figures see the same etcd, disk
//     and load.
//
// Each key is new, so the queue never collapses two announcements into one
// reconcile and every put has its own reconcile.
func Latency(ctx context.Context, s *Stack, cfg LatencyConfig) (LatencyResult, error) {
	reconciled := &firstSeen{at: map[string]time.Time{}}
	ready := &firstSeen{at: map[string]time.Time{}} // by the queue's pending_since
	watched := &firstSeen{at: map[string]time.Time{}}

	// The probe worker: its reconcile only notes the time, so what is
	// measured is the path up to the start of a reconcile, not its work.
	mctx, stopManager := context.WithCancel(ctx)
	m := manager.New(queueclient.New(s.Queue.Conn), manager.Options{Worker: "probe", GracePeriod: 2 * time.Second})
	if err := m.Add(manager.Controller{Name: ProbeQueue, Concurrency: cfg.Concurrency,
		Reconciler: reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			reconciled.see(req.Key, time.Now())
			ready.see(req.Key, req.PendingSince)
			return reconcile.Result{}, nil
		})}); err != nil {
		stopManager()
		return LatencyResult{}, err
	}
	managerDone := make(chan error, 1)
	go func() { managerDone <- m.Run(mctx) }()
	defer func() {
		stopManager()
		<-managerDone
	}()

	// The reference watch, on a connection of its own (the writers' one
	// would share its HTTP/2 stream scheduling with the puts).
	wcli, err := NewEtcdClient(s.Etcd)
	if err != nil {
		return LatencyResult{}, err
	}
	defer wcli.Close()
	wctx, stopWatch := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stopWatch()
	wch := wcli.Watch(wctx, ProbePrefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case wr, ok := <-wch:
		if !ok || !wr.Created {
			return LatencyResult{}, fmt.Errorf("watch %s: not created (%v)", ProbePrefix, wr.Err())
		}
	case <-time.After(30 * time.Second):
		return LatencyResult{}, fmt.Errorf("watch %s: not created in 30 s", ProbePrefix)
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for wr := range wch {
			now := time.Now()
			for _, ev := range wr.Events {
				watched.see(queueKey(string(ev.Kv.Key)), now)
			}
		}
	}()
	defer func() {
		stopWatch()
		<-watchDone
	}()

	// Warm-up: a fifth of a second of the same puts, until every one is
	// reconciled and watched, so that connections, caches and the worker's
	// long poll are in their steady state before the measured puts.
	warm := cfg.Rate / 5
	if _, _, _, err := paced(ctx, s.Cli, "warm", warm, cfg.Rate); err != nil {
		return LatencyResult{}, fmt.Errorf("warm-up: %w", err)
	}
	if err := waitAll(ctx, keys("warm", warm), reconciled, watched, s); err != nil {
		return LatencyResult{}, fmt.Errorf("warm-up: %w", err)
	}

	n := max(1, int(float64(cfg.Rate)*cfg.Duration.Seconds()))
	before := s.histograms(ctx)
	sent, putLat, issuing, err := paced(ctx, s.Cli, "lat", n, cfg.Rate)
	if err != nil {
		return LatencyResult{}, err
	}
	ks := keys("lat", n)
	if err := waitAll(ctx, ks, reconciled, watched, s); err != nil {
		return LatencyResult{}, err
	}
	after := s.histograms(ctx)
	res := LatencyResult{Puts: n, Issuing: issuing,
		ObserverAdd: HistogramMean(before, after, `baton_observer_add_latency_seconds`, `{queue="`+ProbeQueue+`"}`),
		QueueWait:   HistogramMean(before, after, `baton_queue_queue_duration_seconds`, `{queue="`+ProbeQueue+`"}`)}
	var missing int
	reconciled.mu.Lock()
	res.Reconcile, missing = Latencies(sent, reconciled.at, ks)
	if missing == 0 {
		ready.mu.Lock()
		res.Ready, _ = Latencies(sent, ready.at, ks)
		// Every reconciled key was seen ready too (both in one reconcile).
		readyAt := make([]time.Time, len(ks))
		for i, k := range ks {
			readyAt[i] = ready.at[k]
		}
		ready.mu.Unlock()
		res.Handoff, _ = Latencies(readyAt, reconciled.at, ks)
	}
	reconciled.mu.Unlock()
	if missing > 0 {
		return res, fmt.Errorf("%d of %d puts never reconciled", missing, n)
	}
	watched.mu.Lock()
	res.Watch, missing = Latencies(sent, watched.at, ks)
	watched.mu.Unlock()
	if missing > 0 {
		return res, fmt.Errorf("%d of %d puts never watched", missing, n)
	}
	res.Put = slices.Sorted(slices.Values(putLat))
	return res, nil
}

// histograms scrapes the observer's and the queue's metrics into one map
// (their names do not overlap); a failed scrape leaves its part out.
func (s *Stack) histograms(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	if m, err := s.Observer.Metrics(ctx); err == nil {
		maps.Copy(out, m)
	}
	if m, err := s.Queue.Metrics(ctx); err == nil {
		maps.Copy(out, m)
	}
	return out
}

// HistogramMean is the mean of the observations a Prometheus histogram
// (name, with labels) took between two scrapes, or 0 if it has none.
func HistogramMean(before, after map[string]float64, name, labels string) time.Duration {
	sum, okS := after[name+"_sum"+labels]
	count, okC := after[name+"_count"+labels]
	if !okS || !okC {
		return 0
	}
	sum -= before[name+"_sum"+labels]
	count -= before[name+"_count"+labels]
	if count <= 0 {
		return 0
	}
	return time.Duration(sum / count * float64(time.Second))
}

// paced puts n distinct objects in namespace ns at rate a second, each in
// its own goroutine at its slot, and returns when each put was issued and
// how long each call took.
func paced(ctx context.Context, cli *clientv3.Client, ns string, n, rate int) (sent []time.Time, calls []time.Duration, issuing time.Duration, err error) {
	sent = make([]time.Time, n)
	calls = make([]time.Duration, n)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		name := fmt.Sprintf("p%07d", i)
		value := fmt.Sprintf(`{"kind":"Probe","metadata":{"name":%q,"namespace":%q,"uid":"uid-%s-%s"}}`, name, ns, ns, name)
		sent[i] = time.Now()
		wg.Go(func() {
			if _, err := cli.Put(ctx, ProbePrefix+ns+"/"+name, value); err != nil {
				select {
				case errs <- fmt.Errorf("put: %w", err):
				default:
				}
			}
			calls[i] = time.Since(sent[i])
		})
	}
	issuing = time.Since(start)
	wg.Wait()
	select {
	case err = <-errs:
	default:
		err = ctx.Err()
	}
	return sent, calls, issuing, err
}

// waitAll polls until every key was reconciled and watched, for at most a
// minute after the last put (the observer, queue or worker has lost a key
// if it takes longer).
func waitAll(ctx context.Context, ks []string, reconciled, watched *firstSeen, s *Stack) error {
	deadline := time.Now().Add(time.Minute)
	for {
		r, w := reconciled.has(ks), watched.has(ks)
		if r == 0 && w == 0 {
			return nil
		}
		if err := s.Observer.Exited(); err != nil {
			return fmt.Errorf("baton-observer %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d puts not reconciled, %d not watched a minute after the last", r, len(ks), w)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// keys are the queue keys of paced's n objects in ns.
func keys(ns string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/p%07d", ns, i)
	}
	return out
}

// queueKey maps an etcd key under ProbePrefix to the queue key the observer
// announces for it ("namespace/name").
func queueKey(etcdKey string) string { return etcdKey[len(ProbePrefix):] }

// Latencies pairs put i's send time with when ks[i] was first seen and
// returns the latencies sorted, and how many keys were never seen.
func Latencies(sent []time.Time, seen map[string]time.Time, ks []string) (sorted []time.Duration, missing int) {
	sorted = make([]time.Duration, 0, len(ks))
	for i, k := range ks {
		at, ok := seen[k]
		if !ok {
			missing++
			continue
		}
		sorted = append(sorted, at.Sub(sent[i]))
	}
	slices.Sort(sorted)
	return sorted, missing
}
