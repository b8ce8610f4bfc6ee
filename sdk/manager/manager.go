package manager

// The Manager: its Options, the Controllers added to it, and Run, which
// publishes their declarations and starts a runner for each.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
