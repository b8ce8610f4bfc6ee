// Package manager runs reconcile.Reconcilers against Baton's queue: the small
// equivalent of controller-runtime's manager and controller, with the
// workqueue replaced by leases from baton.queue.v1.
//
// Each registered Controller gets one leasing loop that long-polls Lease for
// as many keys as it has free workers (one RPC feeds up to Concurrency
// goroutines), one heartbeat loop that extends every lease still held in one
// Extend call every third of the lease duration, and one ack loop that
// coalesces the outcomes finishing within a few milliseconds into one Ack.
//
//	m := manager.New(queueClient, manager.Options{Logger: log})
//	err := m.Add(manager.Controller{Name: "replicasets", Reconciler: r, Concurrency: 4})
//	err = m.Run(ctx) // blocks until ctx is cancelled and in-flight work is done
//
// # Declaring what a controller watches
//
// A Controller that sets For (and Owns, the kinds of the children it
// creates) declares what it watches, as controller-runtime's builder does:
//
//	m := manager.New(queueClient, manager.Options{Logger: log, Etcd: etcdClient})
//	err := m.Add(manager.Controller{Name: "greetings", Reconciler: g,
//		For: greetingKind, Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}})
//
// Before any controller leases, Run publishes each declaration in etcd at
// /baton/rules/<Name> (package declare: a write only when the stored value
// differs, a bounded retry, and the record stays after the worker stops);
// the observer then announces the controller's keys, and batonctl knows its
// kind. A Controller without For declares nothing: its queue is fed some
// other way, such as an observer rules file.
//
// # Mutual TLS
//
// A Manager dials nothing, so Options has no TLS: it uses the queue
// client it is given, and the reconcilers the observer and etcd clients
// they are given. Dial them with the worker's certificate, which needs the
// worker role to Lease, Ack and Extend and to read through the observer
// (docs/security.md):
//
//	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: crt, KeyFile: key, CAFile: ca})
//	q, err := queueclient.Dial(addr, queueclient.WithTLS(src))
//	o, err := observerclient.Dial(oaddr, observerclient.WithTLS(src))
//
// and etcd's client with etcdconn.Config.Apply. A binary takes the files
// from the flags of services/runtime/trust (--tls-cert-file,
// --tls-key-file, --tls-ca-file), as baton-worker and the greeter example
// do. The Source re-reads the files when they change.
//
// # Leases and fencing
//
// A key is reconciled only while this worker holds its lease. When an Extend
// answers LEASE_LOST (the lease expired, or an admin forgot the key), the
// reconcile's context is cancelled and its outcome is not acked: another
// worker may already hold the key, and the queue would refuse the stale
// token anyway.
//
// # Shutdown
//
// Cancelling Run's context stops leasing at once. Reconciles in flight get
// GracePeriod to finish and have their outcomes acked; after that their
// contexts are cancelled and their leases are left to lapse, so the queue
// offers the keys to another worker when they expire.
//
// # Outcomes
//
// See package reconcile: success → Ack success; RequeueAfter → Ack
// requeue_after; error or panic → Ack failure (retried with backoff by the
// queue); reconcile.Terminal → Ack terminal (parked with the error as its
// last_error until the key is announced again), logged at error level and
// counted as result="terminal".
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/client/kinds"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/worker/declare"
	"github.com/batonrun/baton/services/worker/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Results, the values of the result label of reconcile_total.
const (
	ResultSuccess      = "success"
	ResultRequeueAfter = "requeue_after"
	ResultError        = "error"
	ResultTerminal     = "terminal"
	ResultPanic        = "panic"
)

// Options configures a Manager.
type Options struct {
	// Worker names this process to the queue (shown by Inspect as the lease
	// holder); default "<hostname>-<pid>".
	Worker string
	// GracePeriod bounds how long Run waits for in-flight reconciles after
	// its context is cancelled; default 10 s.
	GracePeriod time.Duration
	// Logger receives the reconcile log; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Etcd, if set, is where Run publishes the declarations of the
	// controllers that make one (see Controller.For) before any of them
	// leases. nil publishes nothing.
	Etcd clientv3.KV
	// UnaryCalls makes every controller lease, ack and extend with unary
	// calls even where the queue serves the work stream (for comparison;
	// the stream is the default).
	UnaryCalls bool
}

// Controller is one reconciler bound to one queue.
type Controller struct {
	// Name is the queue to lease from, and the controller label of metrics.
	Name string
	// Reconciler converges one key.
	Reconciler reconcile.Reconciler
	// For is the kind this controller reconciles: each object's
	// namespace/name is a key of its queue. Setting it declares what the
	// controller watches (Declaration), which Run publishes when the
	// Manager has Options.Etcd. Left zero, the controller declares nothing
	// and its queue is fed some other way (an observer rules file, Adds of
	// another program).
	For kinds.Kind
	// Owns are the kinds of the objects the controller creates, naming its
	// object in metadata.ownerReferences: a change of one announces its
	// owner's key. Owns needs For.
	Owns []kinds.Kind
	// IgnoreOwnStatus declares that a change of a For object that touches
	// nothing but its status (the controller's own status write) need not
	// announce its key again (kinds.Declaration.IgnoreOwnStatus). Set it
	// when Reconcile computes that status itself and reads nothing from it
	// that it did not write; changes of owned objects still announce.
	IgnoreOwnStatus bool
	// Concurrency is the most keys reconciled at once; default 1.
	Concurrency int
	// LeaseDuration is the lease asked for and extended by; default
	// queueclient.DefaultLease (30 s), the queue's own default.
	LeaseDuration time.Duration
	// ReconcileTimeout bounds one Reconcile call; default
	// DefaultReconcileTimeout.
	ReconcileTimeout time.Duration
	// PollWait is how long one Lease call long-polls; default 10 s.
	PollWait time.Duration
	// AckDelay is how long an outcome waits for others to share its Ack
	// call; default 2 ms.
	AckDelay time.Duration
}

// Declaration returns what c declares it watches: its queue (Name), For,
// Owns and IgnoreOwnStatus. ok is false when c declares nothing (For is
// zero).
func (c Controller) Declaration() (d kinds.Declaration, ok bool) {
	if c.For.Kind == "" && c.For.Resource == "" {
		return kinds.Declaration{}, false
	}
	return kinds.Declaration{Queue: c.Name, For: c.For, Owns: slices.Clone(c.Owns), IgnoreOwnStatus: c.IgnoreOwnStatus}, true
}

// DefaultReconcileTimeout bounds one Reconcile call when a Controller sets
// no ReconcileTimeout. It is longer than the default lease, which the
// heartbeats extend while a reconcile runs.
const DefaultReconcileTimeout = time.Minute

func (c *Controller) setDefaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = queueclient.DefaultLease
	}
	if c.ReconcileTimeout <= 0 {
		c.ReconcileTimeout = DefaultReconcileTimeout
	}
	if c.PollWait <= 0 {
		c.PollWait = 10 * time.Second
	}
	if c.AckDelay <= 0 {
		c.AckDelay = 2 * time.Millisecond
	}
}

// Manager runs controllers. Add them, then Run once.
type Manager struct {
	q       *queueclient.Client
	o       Options
	log     *slog.Logger
	metrics *metrics
	ctrls   []Controller
	started atomic.Bool
}

// New returns a Manager that leases from q.
func New(q *queueclient.Client, o Options) *Manager {
	if o.Worker == "" {
		host, _ := os.Hostname()
		o.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.GracePeriod <= 0 {
		o.GracePeriod = 10 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{q: q, o: o, log: log, metrics: newMetrics(o.Registerer)}
}

// Add registers a controller; it must be called before Run.
func (m *Manager) Add(c Controller) error {
	if m.started.Load() {
		return errors.New("manager: Add after Run")
	}
	if c.Name == "" || c.Reconciler == nil {
		return errors.New("manager: a controller needs a Name and a Reconciler")
	}
	for _, o := range m.ctrls {
		if o.Name == c.Name {
			return fmt.Errorf("manager: controller %q added twice", c.Name)
		}
	}
	if d, ok := c.Declaration(); ok {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("manager: controller %q: %w", c.Name, err)
		}
	} else if len(c.Owns) > 0 {
		return fmt.Errorf("manager: controller %q owns kinds but has no For", c.Name)
	} else if c.IgnoreOwnStatus {
		// Without a declaration nothing would carry it to the observer.
		return fmt.Errorf("manager: controller %q ignores its own status changes but has no For", c.Name)
	}
	c.setDefaults()
	m.ctrls = append(m.ctrls, c)
	return nil
}

// Run runs every controller until ctx is cancelled, then shuts down as the
// package documentation describes. It returns nil after a clean shutdown.
func (m *Manager) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("manager: Run called twice")
	}
	if len(m.ctrls) == 0 {
		return errors.New("manager: no controllers")
	}
	if err := m.declare(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, c := range m.ctrls {
		r := &runner{
			c:        c,
			q:        m.q,
			worker:   m.o.Worker,
			grace:    m.o.GracePeriod,
			log:      m.log.With("controller", c.Name),
			metrics:  m.metrics,
			inflight: map[string]*job{},
			acks:     make(chan ack, c.Concurrency),
			stop:     make(chan struct{}),
			unary:    m.o.UnaryCalls,
		}
		m.metrics.init(c.Name)
		wg.Go(func() { r.run(ctx) })
	}
	wg.Wait()
	return nil
}

// declare publishes the controllers' declarations, if the Manager has etcd.
func (m *Manager) declare(ctx context.Context) error {
	var decls []kinds.Declaration
	for _, c := range m.ctrls {
		if d, ok := c.Declaration(); ok {
			decls = append(decls, d)
		}
	}
	if len(decls) == 0 {
		return nil
	}
	if m.o.Etcd == nil {
		m.log.Debug("controllers declare what they watch, but the manager has no etcd to publish it in", "declarations", len(decls))
		return nil
	}
	if err := declare.Publish(ctx, m.o.Etcd, decls, m.log); err != nil {
		if ctx.Err() != nil {
			return nil // cancelled before it started: a clean stop
		}
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// job is one leased key being reconciled or waiting for its ack.
type job struct {
	lease  queueclient.Lease
	cancel context.CancelFunc
	lost   atomic.Bool // an Extend answered LEASE_LOST
}

// ack is one outcome waiting for the ack loop.
type ack struct {
	job     *job
	outcome queueclient.Outcome
}

// runner runs one controller.
type runner struct {
	c       Controller
	q       *queueclient.Client
	worker  string
	grace   time.Duration
	log     *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	inflight map[string]*job // by key: leased and not yet acked
	acks     chan ack
	stop     chan struct{} // closed when the ack and heartbeat loops end
	// abandoned is set once the grace period is over: outcomes arriving later
	// are not acked, their leases lapse.
	abandoned atomic.Bool
	// unary: lease, ack and extend with unary calls (Options.UnaryCalls).
	unary bool
}

// run runs the controller on the work stream, or with unary calls when
// the manager is told to or the queue does not serve the stream.
func (r *runner) run(ctx context.Context) {
	if !r.unary {
		err := r.runStream(ctx)
		if !errors.Is(err, queueclient.ErrWorkUnsupported) {
			return
		}
		r.log.Info("the queue does not serve the work stream: leasing with unary calls", "err", err)
	}
	r.runUnary(ctx)
}

// runUnary runs the controller with Lease, Ack and Extend calls.
func (r *runner) runUnary(ctx context.Context) {
	// Reconciles outlive ctx by up to the grace period, so their contexts
	// derive from one that only the end of the grace period cancels.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	stopBg := r.stop
	var bg sync.WaitGroup
	bg.Go(func() { r.heartbeat(stopBg) })
	ackDone := make(chan struct{})
	go func() { defer close(ackDone); r.ackLoop(stopBg) }()

	var work sync.WaitGroup
	workers := newPool(r.c.Concurrency, &work)
	r.lease(ctx, workCtx, workers)
	workers.close()

	// Shutdown: wait for in-flight reconciles within the grace period.
	done := make(chan struct{})
	go func() { work.Wait(); close(done) }()
	t := time.NewTimer(r.grace)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		r.abandoned.Store(true)
		r.mu.Lock()
		n := len(r.inflight)
		r.mu.Unlock()
		r.log.Warn("grace period over, leaving leases to lapse", "in_flight", n)
		cancelWork()
	}
	close(stopBg) // the ack loop flushes what it holds, then returns
	<-ackDone
	bg.Wait()
}

// lease is the leasing loop: it holds one slot per worker goroutine and asks
// the queue for as many keys as it has free slots.
func (r *runner) lease(ctx, workCtx context.Context, workers *pool) {
	slots := make(chan struct{}, r.c.Concurrency)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		n := 1
	more:
		for n < r.c.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		leases, err := r.q.Lease(ctx, r.c.Name, queueclient.LeaseOptions{
			Worker: r.worker, MaxItems: n, Duration: r.c.LeaseDuration, Wait: r.c.PollWait,
		})
		for range n - len(leases) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("lease failed", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, l := range leases {
			jctx, cancel := context.WithTimeout(workCtx, r.c.ReconcileTimeout)
			j := &job{lease: l, cancel: cancel}
			r.mu.Lock()
			r.inflight[l.Key] = j
			r.mu.Unlock()
			workers.run(func() {
				defer func() { <-slots }()
				r.process(jctx, j)
			})
		}
	}
}

// process reconciles one leased key and hands its outcome to the ack loop.
func (r *runner) process(ctx context.Context, j *job) {
	out, ok := r.reconcile(ctx, j)
	if !ok {
		r.forget(j)
		return
	}
	select {
	case r.acks <- ack{job: j, outcome: out}:
	case <-r.stop:
		// The ack loop has finished (grace period over): let it lapse.
		r.forget(j)
	}
}

// reconcile runs the reconciler on j's key and returns the outcome to ack,
// or false when it must not be acked: the lease was lost meanwhile, or
// the grace period is over.
func (r *runner) reconcile(ctx context.Context, j *job) (queueclient.Outcome, bool) {
	defer j.cancel()
	req := reconcile.Request{Queue: r.c.Name, Key: j.lease.Key, Attempt: j.lease.Attempt, MinRevision: j.lease.MinRevision,
		PendingSince: j.lease.PendingSince}
	log := r.log.With("key", req.Key, "attempt", req.Attempt)

	r.metrics.active.WithLabelValues(r.c.Name).Inc()
	start := time.Now()
	res, err, panicked := call(ctx, r.c.Reconciler, req)
	r.metrics.duration.WithLabelValues(r.c.Name).Observe(time.Since(start).Seconds())
	r.metrics.active.WithLabelValues(r.c.Name).Dec()

	var out queueclient.Outcome
	var result string
	switch {
	case panicked:
		result, out = ResultPanic, queueclient.Failure(err.Error())
		log.Error("reconcile panicked", "err", err)
	case err != nil && reconcile.IsTerminal(err):
		result, out = ResultTerminal, queueclient.Terminal(err.Error())
		log.Error("reconcile failed terminally, not retrying", "err", err)
	case err != nil:
		result, out = ResultError, queueclient.Failure(err.Error())
		log.Info("reconcile failed, will retry", "err", err)
	case res.RequeueAfter > 0:
		result, out = ResultRequeueAfter, queueclient.RequeueAfter(res.RequeueAfter)
	default:
		result, out = ResultSuccess, queueclient.Success()
	}
	r.metrics.total.WithLabelValues(r.c.Name, result).Inc()

	if j.lost.Load() || r.abandoned.Load() {
		log.Info("not acking: lease lost or abandoned")
		return queueclient.Outcome{}, false
	}
	return out, true
}

// call runs the reconciler, turning a panic into an error.
func call(ctx context.Context, rec reconcile.Reconciler, req reconcile.Request) (res reconcile.Result, err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			panicked = true
		}
	}()
	res, err = rec.Reconcile(ctx, req)
	return res, err, false
}

// forget drops j from the in-flight set (if it is still the entry there).
func (r *runner) forget(j *job) {
	r.mu.Lock()
	if r.inflight[j.lease.Key] == j {
		delete(r.inflight, j.lease.Key)
	}
	r.mu.Unlock()
}

// ackLoop coalesces outcomes into Ack calls until stop is closed, then acks
// what remains queued and returns.
func (r *runner) ackLoop(stop <-chan struct{}) {
	var batch []ack
	for {
		select {
		case a := <-r.acks:
			batch = append(batch[:0], a)
		case <-stop:
			// Everything that will ever send has finished (or been
			// abandoned and does not send).
			var rest []ack
			for {
				select {
				case a := <-r.acks:
					rest = append(rest, a)
				default:
					if len(rest) > 0 {
						r.send(rest)
					}
					return
				}
			}
		}
		t := time.NewTimer(r.c.AckDelay)
	collect:
		for len(batch) < queueclient.MaxBatch {
			select {
			case a := <-r.acks:
				batch = append(batch, a)
			case <-t.C:
				break collect
			}
		}
		t.Stop()
		r.send(batch)
	}
}

// send acks one batch. An Ack that fails after the client's retries is
// logged; the leases then lapse and the keys are offered again, which is
// safe because reconciles are level-based.
func (r *runner) send(batch []ack) {
	acks := make([]queueclient.Ack, len(batch))
	for i, a := range batch {
		acks[i] = queueclient.Ack{Key: a.job.lease.Key, Token: a.job.lease.Token, Outcome: a.outcome}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	results, err := r.q.Ack(ctx, r.c.Name, acks)
	cancel()
	if err != nil {
		r.log.Warn("ack failed; leases will lapse", "keys", len(acks), "err", err)
	}
	for i, a := range batch {
		if i < len(results) && results[i].Status == queueclient.LeaseLost {
			r.log.Info("ack refused: lease lost", "key", a.job.lease.Key)
		}
		r.forget(a.job)
	}
}

// heartbeat extends every held lease in one call every third of the lease
// duration, until stop is closed.
func (r *runner) heartbeat(stop <-chan struct{}) {
	t := time.NewTicker(r.c.LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		jobs := make([]*job, 0, len(r.inflight))
		for _, j := range r.inflight {
			jobs = append(jobs, j)
		}
		r.mu.Unlock()
		if len(jobs) == 0 {
			continue
		}
		refs := make([]queueclient.LeaseRef, len(jobs))
		for i, j := range jobs {
			refs[i] = queueclient.LeaseRef{Key: j.lease.Key, Token: j.lease.Token}
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.c.LeaseDuration/3)
		results, err := r.q.Extend(ctx, r.c.Name, refs, r.c.LeaseDuration)
		cancel()
		if err != nil {
			r.log.Warn("extend failed", "keys", len(refs), "err", err)
			continue
		}
		for i, res := range results {
			if i < len(jobs) && res.Status == queueclient.LeaseLost {
				j := jobs[i]
				j.lost.Store(true)
				j.cancel()
				r.log.Warn("lease lost while reconciling; cancelled", "key", j.lease.Key)
			}
		}
	}
}

// metrics are the worker's Prometheus metrics.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	active   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_worker_reconcile_total",
			Help: "Reconciles finished, by controller and result (success, requeue_after, error, terminal, panic).",
		}, []string{"controller", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_worker_reconcile_duration_seconds",
			Help:    "Time spent in Reconcile, by controller.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"controller"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_worker_active_workers",
			Help: "Reconciles running now, by controller.",
		}, []string{"controller"}),
	}
	if reg != nil {
		reg.MustRegister(m.total, m.duration, m.active)
	}
	return m
}

// init makes every series of a controller exist from the start, at zero.
func (m *metrics) init(controller string) {
	for _, r := range []string{ResultSuccess, ResultRequeueAfter, ResultError, ResultTerminal, ResultPanic} {
		m.total.WithLabelValues(controller, r)
	}
	m.duration.WithLabelValues(controller)
	m.active.WithLabelValues(controller)
}
