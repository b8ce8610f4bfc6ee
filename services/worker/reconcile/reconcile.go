// Package reconcile defines what a Baton controller implements: one
// level-based Reconcile function that brings one key's invariant back to true.
// It is the small equivalent of controller-runtime's pkg/reconcile.
//
// A Request carries only the queue, the key and the attempt: reconciliation
// reads current state every time instead of trusting the event that caused
// it, so three changes announced before a worker is free are one reconcile.
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
// The queue contract (baton.queue.v1) has no terminal outcome: a failure ack
// is always retried with backoff (or parked only if the operator set
// --max-attempts, which the worker cannot see), and a requeue or success ack
// drops last_error. So the SDK acks a terminal error as a success — the key
// leaves the queue and comes back only when the object changes again, which
// is what a permanent error needs (controller-runtime's TerminalError behaves
// the same) — and records the error where an operator looks: an error log
// line with the queue, key and error, and the reconcile_total metric with
// result="terminal". The error is therefore not visible in the queue's
// Inspect; an explicit terminal outcome in the queue API would let it be.
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
