package manager

// The runner: one controller's leased keys, each reconciled and its
// outcome turned into an ack, whether the keys come on the work stream
// (stream.go) or from unary calls (unary.go), and the heartbeat that
// keeps their leases.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/sdk/ratelog"
	"github.com/batonrun/baton/sdk/reconcile"
	"google.golang.org/grpc/status"
)

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
