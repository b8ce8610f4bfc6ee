package queue

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The queue says why it refused a call in a google.rpc.ErrorInfo detail of
// its gRPC status (AIP-193), so that a client in any language can tell the
// reasons that share a code apart without reading the message.
const (
	// ErrorDomain is the ErrorInfo domain of the queue's reasons.
	ErrorDomain = "queue.baton.run"
	// ReasonNoSpace (RESOURCE_EXHAUSTED): the queue's disk is full; nothing
	// was stored, retry when space is back.
	ReasonNoSpace = "NO_SPACE"
	// ReasonTooManyQueues (RESOURCE_EXHAUSTED): the Add would make more
	// queues than --max-queues allows; nothing was stored.
	ReasonTooManyQueues = "TOO_MANY_QUEUES"
	// ReasonStopped (UNAVAILABLE): the queue's store stopped after an I/O
	// error; a change in flight may or may not be stored, and the queue
	// restarts to recover.
	ReasonStopped = "STORE_STOPPED"
	// ReasonNotReplicated (FAILED_PRECONDITION): a membership change asked
	// of a queue of one member (baton-queue without --initial-cluster),
	// which has no peers to replicate to; nothing changed.
	ReasonNotReplicated = "NOT_REPLICATED"
	// ReasonNotLeader (UNAVAILABLE): the member of a replicated queue that
	// was called does not lead it now and could not hand the call to the
	// leader (there is none yet, or it has just changed); nothing changed,
	// retry on any member.
	ReasonNotLeader = "NOT_LEADER"
	// ReasonLeadershipLost (UNAVAILABLE): the leader lost its leadership
	// with the call's change in flight; the change may or may not be
	// stored, as after a deadline. Retrying an Add is safe (it collapses);
	// a retried Ack meets the new leader, for which the lease is gone.
	ReasonLeadershipLost = "LEADERSHIP_LOST"
)

// Errors the client's calls wrap, with the gRPC status error, so callers
// use errors.Is instead of decoding codes and messages.
var (
	// ErrNoSpace is returned when the queue's disk is full: nothing of the
	// call was stored.
	ErrNoSpace = errors.New("queue: the queue's disk is full")
	// ErrTooManyQueues is returned when an Add would make a queue beyond the
	// server's --max-queues: nothing was stored.
	ErrTooManyQueues = errors.New("queue: too many queues")
	// ErrStopped is returned when the queue's store stopped: the outcome of
	// the call is unknown.
	ErrStopped = errors.New("queue: the queue's store stopped")
	// ErrNotReplicated is returned by MemberAdd and MemberRemove on a queue
	// of one member: nothing changed.
	ErrNotReplicated = errors.New("queue: the queue is one member, not replicated")
	// ErrNotLeader is returned when the member called does not lead the
	// replicated queue and could not hand the call on: nothing changed.
	ErrNotLeader = errors.New("queue: the member does not lead the queue")
	// ErrLeadershipLost is returned when leadership moved with the call's
	// change in flight: the outcome is unknown.
	ErrLeadershipLost = errors.New("queue: leadership moved with the change in flight")
)

var reasons = map[string]error{
	ReasonNoSpace:        ErrNoSpace,
	ReasonTooManyQueues:  ErrTooManyQueues,
	ReasonStopped:        ErrStopped,
	ReasonNotReplicated:  ErrNotReplicated,
	ReasonNotLeader:      ErrNotLeader,
	ReasonLeadershipLost: ErrLeadershipLost,
}

// Refusal returns the gRPC status error for a refusal of reason, with its
// ErrorInfo: what the server answers.
func Refusal(code codes.Code, reason, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// typed wraps a gRPC status error with the package's error for its reason,
// if it has one; status.Code and status.FromError still see the status.
func typed(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			if e := reasons[info.GetReason()]; e != nil {
				return fmt.Errorf("%w: %w", e, err)
			}
		}
	}
	return err
}

// IsNotFound reports whether err is the queue's NOT_FOUND: Stats of a queue
// that does not exist.
func IsNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// IsInvalidArgument reports whether the queue refused the call's input
// (nothing changed); the message names the field and the limit.
func IsInvalidArgument(err error) bool { return status.Code(err) == codes.InvalidArgument }

// IsUnavailable reports whether the queue could not be reached, or is
// starting or stopping: the call may be tried again.
func IsUnavailable(err error) bool { return status.Code(err) == codes.Unavailable }
