package events

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonrun/baton/sdk/objects"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of Options.
const (
	// DefaultTTL is how long an Event lives after its last write.
	DefaultTTL = time.Hour
	// DefaultLeaseBucket is how long one etcd lease serves new writes.
	DefaultLeaseBucket = time.Minute
	// DefaultBuffer is how many events wait for Run at most: client-go's
	// broadcaster queues as many.
	DefaultBuffer = 1000
	// DefaultBurst and DefaultRefill are each object's token bucket:
	// client-go's spam filter's (25 events, then one per five minutes).
	DefaultBurst  = 25
	DefaultRefill = 5 * time.Minute
	// DefaultWriters is how many events Run writes at once.
	DefaultWriters = 4
	// DefaultFlushTimeout bounds how long Run writes what is buffered once
	// its context is cancelled.
	DefaultFlushTimeout = 5 * time.Second
)

// Options configures a Recorder. The zero value of a field means its
// default.
type Options struct {
	// Component is source.component (and reportingController) of the
	// events: who recorded them. Default: the program's name.
	// WithComponent gives each controller its own.
	Component string
	// Host is source.host; default empty, as Kubernetes' controllers
	// leave it.
	Host string
	// TTL is how long an event lives after its last write (default
	// DefaultTTL); at least a second, etcd's unit for leases.
	TTL time.Duration
	// LeaseBucket is how long one lease serves new writes (default
	// DefaultLeaseBucket): one lease is granted per bucket.
	LeaseBucket time.Duration
	// Buffer bounds the events waiting to be written (default
	// DefaultBuffer); beyond it Event drops them.
	Buffer int
	// Burst and Refill are each object's token bucket (defaults
	// DefaultBurst, DefaultRefill).
	Burst  int
	Refill time.Duration
	// Writers is how many events Run writes at once (default
	// DefaultWriters).
	Writers int
	// OpTimeout bounds each etcd call (default objects.DefaultOpTimeout).
	OpTimeout time.Duration
	// FlushTimeout bounds the writing of what is buffered after Run's
	// context is cancelled (default DefaultFlushTimeout).
	FlushTimeout time.Duration
	// Logger receives what went wrong; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics (package doc); nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
	// Now is the clock of timestamps and token buckets; nil is time.Now.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.Component == "" {
		o.Component = filepath.Base(os.Args[0])
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.TTL, DefaultTTL)
	def(&o.LeaseBucket, DefaultLeaseBucket)
	def(&o.Refill, DefaultRefill)
	def(&o.OpTimeout, objects.DefaultOpTimeout)
	def(&o.FlushTimeout, DefaultFlushTimeout)
	if o.Buffer == 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.Writers == 0 {
		o.Writers = DefaultWriters
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate names the first bad field, after defaults.
func (o Options) Validate() error {
	switch {
	case o.TTL < time.Second:
		return fmt.Errorf("events: TTL %v is under a second, etcd's unit for leases", o.TTL)
	case o.LeaseBucket < 0:
		return fmt.Errorf("events: negative LeaseBucket %v", o.LeaseBucket)
	case o.Buffer < 0:
		return fmt.Errorf("events: negative Buffer %d", o.Buffer)
	case o.Burst < 0:
		return fmt.Errorf("events: negative Burst %d", o.Burst)
	case o.Refill < 0:
		return fmt.Errorf("events: negative Refill %v", o.Refill)
	case o.Writers < 0:
		return fmt.Errorf("events: negative Writers %d", o.Writers)
	case o.OpTimeout < 0 || o.FlushTimeout < 0:
		return fmt.Errorf("events: negative OpTimeout %v or FlushTimeout %v", o.OpTimeout, o.FlushTimeout)
	}
	return nil
}

// Recorder records events. It is safe for concurrent use; a nil
// *Recorder records nothing, so a controller may be built without one.
type Recorder struct {
	*core
	component string
}

// core is what every view of a Recorder (WithComponent) shares: one
// buffer, one writer, the token buckets and the leases.
type core struct {
	etcd    *clientv3.Client
	o       Options
	log     *slog.Logger
	buf     chan record
	running atomic.Bool

	limitMu sync.Mutex
	limits  *lru[*bucket] // by component and object

	similarMu sync.Mutex
	similar   *lru[*similar] // by component, object, type and reason

	seenMu sync.Mutex
	seen   *lru[stored] // by etcd key: the event as last written or read

	leaseMu sync.Mutex
	lease   clientv3.LeaseID // 0: none
	leaseAt time.Time

	stats counters
}

// counters are Stats, kept as they happen.
type counters struct {
	recorded, created, updated               atomic.Uint64
	bufferFull, rateLimited, invalid, failed atomic.Uint64
	leases                                   atomic.Uint64
}

// Stats counts what a Recorder did with the events it was given.
type Stats struct {
	// Recorded counts the events Event accepted into the buffer.
	Recorded uint64
	// Created counts the Events written anew; Updated those written over
	// a stored one, a repeat counted in (its count raised).
	Created, Updated uint64
	// BufferFull, RateLimited and Invalid count the events Event
	// dropped: the buffer was full, the object's token bucket empty, or
	// the event malformed (no such type, no reason, no object).
	BufferFull, RateLimited, Invalid uint64
	// Failed counts the events Run could not write (etcd refused or did
	// not answer; each failed write of a group of repeats counts once).
	Failed uint64
	// Leases counts the etcd leases granted.
	Leases uint64
}

// NewRecorder returns a Recorder that writes to etcd once Run runs.
func NewRecorder(etcd *clientv3.Client, o Options) (*Recorder, error) {
	if etcd == nil {
		return nil, errors.New("events: no etcd client")
	}
	o.setDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := &core{
		etcd: etcd, o: o, log: o.Logger,
		buf:     make(chan record, o.Buffer),
		limits:  newLRU[*bucket](maxTracked),
		similar: newLRU[*similar](maxTracked),
		seen:    newLRU[stored](maxTracked),
	}
	if o.Registerer != nil {
		if err := c.register(o.Registerer); err != nil {
			return nil, err
		}
	}
	return &Recorder{core: c, component: o.Component}, nil
}

// WithComponent returns a Recorder that records as component (Source's
// Component) and shares r's buffer, token buckets, leases and Run: one
// Recorder per controller of a process.
func (r *Recorder) WithComponent(component string) *Recorder {
	if r == nil {
		return nil
	}
	return &Recorder{core: r.core, component: component}
}

// Event records that eventtype (Normal or Warning) happened to obj, for
// reason, with the message messageFmt formats with args (kubectl's
// EventRecorder.Eventf; a message with a % and no args writes %%, as go
// vet says). It never blocks and never fails: an event that
// is malformed, or that the object's token bucket or the full buffer
// refuses, is dropped and counted (Stats). obj must not be nil.
func (r *Recorder) Event(obj Object, eventtype, reason, messageFmt string, args ...any) {
	if r == nil {
		return
	}
	rec := record{ref: obj.Reference(), typ: eventtype, reason: reason, message: truncate(fmt.Sprintf(messageFmt, args...)),
		component: r.component, host: r.o.Host, at: r.o.Now().UTC()}
	if err := rec.check(); err != nil {
		r.stats.invalid.Add(1)
		r.log.Warn("event not recorded", "err", err)
		return
	}
	r.aggregate(&rec)
	if !r.allow(&rec) {
		r.stats.rateLimited.Add(1)
		r.log.Debug("event dropped: its object's events are rate-limited", "object", rec.ref, "reason", rec.reason)
		return
	}
	select {
	case r.buf <- rec:
		r.stats.recorded.Add(1)
	default:
		r.stats.bufferFull.Add(1)
		r.log.Debug("event dropped: the buffer is full", "object", rec.ref, "reason", rec.reason)
	}
}

// allow takes a token of rec's object's bucket.
func (c *core) allow(rec *record) bool {
	key := rec.component + "\x00" + rec.ref.Kind + "\x00" + rec.ref.Namespace + "\x00" + rec.ref.Name + "\x00" + rec.ref.UID
	c.limitMu.Lock()
	defer c.limitMu.Unlock()
	b, ok := c.limits.get(key)
	if !ok {
		b = &bucket{tokens: float64(c.o.Burst), last: rec.at}
		c.limits.put(key, b)
	}
	return b.take(rec.at, c.o.Burst, c.o.Refill)
}

// Stats returns what the Recorder (every view of it) has done so far.
func (r *Recorder) Stats() Stats {
	if r == nil {
		return Stats{}
	}
	s := &r.stats
	return Stats{
		Recorded: s.recorded.Load(), Created: s.created.Load(), Updated: s.updated.Load(),
		BufferFull: s.bufferFull.Load(), RateLimited: s.rateLimited.Load(), Invalid: s.invalid.Load(),
		Failed: s.failed.Load(), Leases: s.leases.Load(),
	}
}

// Metric names (package doc).
const (
	WrittenMetric = "baton_worker_events_written_total"
	DroppedMetric = "baton_worker_events_dropped_total"
)

func (c *core) register(reg prometheus.Registerer) error {
	counter := func(name, help, label, value string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{label: value},
		}, func() float64 { return float64(v.Load()) })
	}
	const written = "Events written to etcd: created, or updated when a repeat raised a stored event's count."
	const dropped = "Events not written: the buffer was full, the object's events were rate-limited, the event was malformed, or etcd refused the write."
	for _, col := range []prometheus.Collector{
		counter(WrittenMetric, written, "op", "create", &c.stats.created),
		counter(WrittenMetric, written, "op", "update", &c.stats.updated),
		counter(DroppedMetric, dropped, "reason", "buffer_full", &c.stats.bufferFull),
		counter(DroppedMetric, dropped, "reason", "rate_limited", &c.stats.rateLimited),
		counter(DroppedMetric, dropped, "reason", "invalid", &c.stats.invalid),
		counter(DroppedMetric, dropped, "reason", "write_failed", &c.stats.failed),
	} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("events: register metrics: %w", err)
		}
	}
	return nil
}
