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
// and etcd's client with the SDK's package etcdconn
// (github.com/batonrun/baton/sdk/etcdconn): its Config registers
// etcdctl's flags (--etcd-cacert, --etcd-cert, --etcd-key, and a user and
// password file), and Apply sets a clientv3.Config's TLS and credentials
// from them:
//
//	var ec etcdconn.Config
//	ec.RegisterFlags(fs) // then, after parsing:
//	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second}
//	err := ec.Apply(&cfg, log)
//	etcd, err := clientv3.New(cfg)
//
// baton-worker and the greeter example take the queue's and observer's
// files from the flags of services/runtime/trust (--tls-cert-file,
// --tls-key-file, --tls-ca-file). The Source, and the one Apply loads for
// etcd, re-read the files when they change.
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
//
// # Logs
//
// A failure of a controller's loops that repeats while they retry (Lease,
// Ack or Extend failing, the work stream refused or broken: the queue
// unreachable, or at one of its limits) is logged once per cause, its call
// and gRPC code, per ratelog.DefaultInterval (package ratelog), the next
// line saying how many were held back: a refusal that lasts costs the log
// a line a minute, not one per retry.
//
// # Events
//
// With Options.Events, a Recorder of package events, Run runs it from
// before the first lease until the last reconcile has finished, then lets
// it write what is still buffered: what a reconcile records during the
// grace period is written too. The reconcilers record through it, or a
// view of it with their own component (WithComponent):
//
//	rec, err := events.NewRecorder(etcdClient, events.Options{Component: "greeter", Registerer: reg})
//	m := manager.New(queueClient, manager.Options{Etcd: etcdClient, Events: rec})
//	// and in Reconcile:
//	rec.Event(greeting, events.Normal, "Greeted", "Said hello to %s", name)
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
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/sdk/declare"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/ratelog"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
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
	// Events, if set, is the Recorder the reconcilers record their events
	// with; Run runs it (package doc, "Events"). Do not run it yourself.
	Events *events.Recorder
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
	// Schema, if set, is the structural schema of For's objects
	// (client/schema), published in the declaration: batonctl and the
	// SDK's objects.Client fill in its defaults and check every object of
	// For they write against it, and batonctl explain prints it. Schema
	// needs For.
	Schema *schema.Kind
	// PrinterColumns are the columns batonctl get prints for For's
	// objects, published in the declaration. They need For.
	PrinterColumns []schema.Column
	// Concurrency is the most keys reconciled at once; default 1.
	Concurrency int
	// LeaseDuration is the lease asked for and extended by; default
	// limits.DefaultLease (30 s), the queue's own default.
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
// Owns and IgnoreOwnStatus, and For's Schema and PrinterColumns. ok is
// false when c declares nothing (For is zero).
func (c Controller) Declaration() (d kinds.Declaration, ok bool) {
	if c.For.Kind == "" && c.For.Resource == "" {
		return kinds.Declaration{}, false
	}
	return kinds.Declaration{Queue: c.Name, For: c.For, Owns: slices.Clone(c.Owns), IgnoreOwnStatus: c.IgnoreOwnStatus,
		Schema: c.Schema, PrinterColumns: slices.Clone(c.PrinterColumns)}, true
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
		c.LeaseDuration = limits.DefaultLease
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
	started atomic.Bool

	mu    sync.Mutex
	ctrls []*entry
	// runCtx is Run's context, from the moment Run is called: a
	// controller added since publishes its own declaration.
	runCtx context.Context
	// running: Run has started the controllers; one added now starts at
	// once. stopped: Run's context is done (or its declarations failed);
	// Add fails.
	running, stopped bool
	// runners counts the controllers' runners, and Run's own hold while
	// it runs, so that a controller added while Run runs never starts on
	// a count that has reached zero.
	runners sync.WaitGroup
}

// entry is one added controller, and whether its runner was started.
type entry struct {
	c       Controller
	running bool
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

// Add registers a controller. Added before Run, it starts with the others.
// Added while Run runs, it publishes its declaration (if it makes one, and
// the Manager has Options.Etcd) and starts leasing at once: a program that
// learns of a kind at run time may add a controller for it then. Each
// controller holds a work stream of its own, which the queue counts
// against its limits of waiting Leases per connection and per identity
// (docs/design.md): a program that adds one per kind it learns lets
// whoever declares kinds exhaust them, so Baton's garbage collector runs one
// controller for every kind. After Run's context is done, Add fails.
func (m *Manager) Add(c Controller) error {
	if c.Name == "" || c.Reconciler == nil {
		return errors.New("manager: a controller needs a Name and a Reconciler")
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
	} else if c.Schema != nil || len(c.PrinterColumns) > 0 {
		return fmt.Errorf("manager: controller %q has a schema or printer columns but no For, the kind they describe", c.Name)
	}
	c.setDefaults()
	e := &entry{c: c}
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return fmt.Errorf("manager: controller %q added after Run ended", c.Name)
	}
	for _, o := range m.ctrls {
		if o.c.Name == c.Name {
			m.mu.Unlock()
			return fmt.Errorf("manager: controller %q added twice", c.Name)
		}
	}
	m.ctrls = append(m.ctrls, e)
	ctx := m.runCtx
	m.mu.Unlock()
	if ctx == nil {
		return nil // Run declares and starts it
	}
	if err := m.declare(ctx, []Controller{c}); err != nil {
		m.mu.Lock()
		m.ctrls = slices.DeleteFunc(m.ctrls, func(o *entry) bool { return o == e })
		m.mu.Unlock()
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.stopped:
		return fmt.Errorf("manager: controller %q added after Run ended", c.Name)
	case m.running && !e.running:
		m.start(ctx, e)
	}
	return nil
}

// Run runs every controller until ctx is cancelled, then shuts down as the
// package documentation describes. It returns nil after a clean shutdown.
func (m *Manager) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("manager: Run called twice")
	}
	m.mu.Lock()
	if len(m.ctrls) == 0 {
		m.stopped = true
		m.mu.Unlock()
		return errors.New("manager: no controllers")
	}
	m.runCtx = ctx
	ctrls := make([]Controller, len(m.ctrls))
	for i, e := range m.ctrls {
		ctrls[i] = e.c
	}
	m.mu.Unlock()
	if err := m.declare(ctx, ctrls); err != nil {
		m.mu.Lock()
		m.stopped = true
		m.mu.Unlock()
		return err
	}
	stopEvents := m.runEvents(ctx)
	m.mu.Lock()
	m.running = true
	m.runners.Add(1) // Run's hold, released once no controller can be added
	for _, e := range m.ctrls {
		m.start(ctx, e)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	m.runners.Done()
	m.runners.Wait()
	stopEvents()
	return nil
}

// runEvents runs Options.Events, if set, until the function it returns is
// called (once every reconcile has finished: not when ctx is done, for
// reconciles in their grace period still record); that function waits for
// the Recorder to write what it buffered, within its FlushTimeout.
func (m *Manager) runEvents(ctx context.Context) (stop func()) {
	if m.o.Events == nil {
		return func() {}
	}
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.o.Events.Run(ectx); err != nil {
			m.log.Error("events are not written", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// start starts e's runner, unless it runs already; m.mu is held.
func (m *Manager) start(ctx context.Context, e *entry) {
	if e.running {
		return
	}
	e.running = true
	c := e.c
	log := m.log.With("controller", c.Name)
	r := &runner{
		c:        c,
		q:        m.q,
		worker:   m.o.Worker,
		grace:    m.o.GracePeriod,
		log:      log,
		failures: ratelog.New(log, 0),
		metrics:  m.metrics,
		inflight: map[string]*job{},
		acks:     make(chan ack, c.Concurrency),
		stop:     make(chan struct{}),
		unary:    m.o.UnaryCalls,
	}
	m.metrics.init(c.Name)
	m.runners.Go(func() { r.run(ctx) })
}

// declare publishes the declarations of ctrls, if the Manager has etcd.
func (m *Manager) declare(ctx context.Context, ctrls []Controller) error {
	var decls []kinds.Declaration
	for _, c := range ctrls {
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

// cause names a failure of a runner's loop for its log (ratelog): what
// failed and the call's gRPC code.
func cause(what string, err error) string { return what + " " + status.Code(err).String() }

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
	c      Controller
	q      *queueclient.Client
	worker string
	grace  time.Duration
	log    *slog.Logger
	// failures logs the failures of its loops that repeat while they
	// retry (the queue unreachable, a call refused): a line per cause per
	// ratelog.DefaultInterval.
	failures *ratelog.Logger
	metrics  *metrics

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
	bg.Go(func() { r.heartbeat(stopBg, r.extendUnary) })
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
			r.failures.Warn(cause("lease", err), "lease failed", "err", err, "retry_in", backoff)
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
		for len(batch) < limits.MaxBatch {
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
		r.failures.Warn(cause("ack", err), "ack failed; leases will lapse", "keys", len(acks), "err", err)
	}
	for i, a := range batch {
		if i < len(results) && results[i].Status == queueclient.LeaseLost {
			r.log.Info("ack refused: lease lost", "key", a.job.lease.Key)
		}
		r.forget(a.job)
	}
}

// heartbeat calls extend every third of the lease duration, until stop is
// closed: the unary loop's leases and each work stream's are kept so.
func (r *runner) heartbeat(stop <-chan struct{}, extend func()) {
	t := time.NewTicker(r.c.LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			extend()
		}
	}
}

// extendUnary extends every held lease in one Extend call, and cancels the
// reconciles of those the queue says are lost.
func (r *runner) extendUnary() {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.inflight))
	for _, j := range r.inflight {
		jobs = append(jobs, j)
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	refs := make([]queueclient.LeaseRef, len(jobs))
	for i, j := range jobs {
		refs[i] = queueclient.LeaseRef{Key: j.lease.Key, Token: j.lease.Token}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.c.LeaseDuration/3)
	results, err := r.q.Extend(ctx, r.c.Name, refs, r.c.LeaseDuration)
	cancel()
	if err != nil {
		r.failures.Warn(cause("extend", err), "extend failed", "keys", len(refs), "err", err)
		return
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
