// Package reconcile defines what a Baton controller implements: one
// level-based Reconcile function that brings one key's invariant back to true.
// It is the small equivalent of controller-runtime's pkg/reconcile.
//
// A Request carries only the queue, the key, the attempt and the revision
// to read at: reconciliation reads current state every time instead of
// trusting the event that caused it, so three changes announced before a
// worker is free are one reconcile.
//
// # Outcomes
//
// Reconcile's return value becomes the queue Ack:
//
//   - nil error, zero Result: success. The queue forgets the key (unless it
//     was announced again meanwhile).
//   - nil error, Result.RequeueAfter > 0: the key is offered again after that
//     long with its attempts reset (polling, timers).
//   - an error: failure. The queue records the error as the key's last_error
//     and retries it with exponential backoff. A recovered panic is a failure
//     too.
//   - a Terminal error: the error is permanent (a malformed object, say), so
//     retrying cannot help. See Terminal for how it is reported.
package reconcile

import (
	"context"
	"errors"
	"time"
)

// Request names one unit of work leased from a queue.
type Request struct {
	// Queue is the queue the key was leased from (the controller's name).
	Queue string
	// Key is the opaque key, usually "namespace/name".
	Key string
	// Attempt counts the failures (and lease expiries) of this key so far;
	// 0 on a first try.
	Attempt int
	// MinRevision is the etcd revision the observer's cache must reflect
	// for a read to see the change that announced the key (the lease's
	// min_revision); 0 when the queue knows none. objects.AtLeast puts it
	// on a context for the Store's reads.
	MinRevision int64
	// PendingSince is when the key last became ready in the queue, by the
	// queue's clock (the lease's pending_since): the key waited from then
	// until its reconcile started.
	PendingSince time.Time
}

// Result qualifies a successful reconcile.
type Result struct {
	// RequeueAfter, if positive, offers the key again after this long.
	RequeueAfter time.Duration
}

// Reconciler converges the invariant of one key.
type Reconciler interface {
	Reconcile(ctx context.Context, req Request) (Result, error)
}

// Func adapts a function to Reconciler.
type Func func(ctx context.Context, req Request) (Result, error)

// Reconcile calls f.
func (f Func) Reconcile(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }

// terminalError marks an error that retrying cannot fix.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return "terminal: " + e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Terminal marks err as permanent: the key is not retried.
//
// The SDK acks it with the queue's terminal outcome: the key is parked with
// the error as its last_error (visible in Inspect, batonctl describe and the
// dashboard) and comes back only when it is announced again, that is when
// the object changes (controller-runtime's TerminalError behaves the same).
// The error is also logged at error level and counted in reconcile_total
// with result="terminal".
//
// Terminal(nil) returns nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err: err}
}

// IsTerminal reports whether err, or an error it wraps, was made by Terminal.
func IsTerminal(err error) bool {
	var t *terminalError
	return errors.As(err, &t)
}
