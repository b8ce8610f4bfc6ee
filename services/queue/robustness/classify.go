package robustness

import (
	"context"
	"errors"
	"fmt"

	queueclient "github.com/batonrun/baton/client/queue"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Classify says what an error tells about the call's effect. It is the one
// place the suite decides it:
//
//   - nil: OK, applied.
//   - INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED,
//     and UNAVAILABLE carrying the reason NOT_LEADER: refused, nothing
//     changed (docs/design.md, "Refusals").
//   - everything else (DEADLINE_EXCEEDED, CANCELED, a broken connection,
//     UNAVAILABLE without a reason or with LEADERSHIP_LOST or STORE_STOPPED,
//     and codes the contract never answers, such as INTERNAL): ambiguous,
//     the change may or may not have happened.
//
// The second result names the error for the history: code, reason and
// message.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return OK, ""
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return Ambiguous, err.Error()
		}
		return Ambiguous, "non-status error: " + err.Error()
	}
	reason := Reason(err)
	desc := st.Code().String()
	if reason != "" {
		desc += " " + reason
	}
	desc += ": " + st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.ResourceExhausted:
		return Refused, desc
	case codes.Unavailable:
		if reason == queueclient.ReasonNotLeader {
			return Refused, desc
		}
	}
	return Ambiguous, desc
}

// Reason returns the queue's ErrorInfo reason carried by err, or "".
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == queueclient.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// outsideContract reports whether an error's code is one the queue's
// contract never answers (docs/design.md: errors are precise): INTERNAL,
// UNKNOWN, DATA_LOSS, UNIMPLEMENTED. Such an answer is a finding of its
// own, whatever the call did.
func outsideContract(desc string) bool {
	for _, c := range []codes.Code{codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented} {
		if len(desc) >= len(c.String()) && desc[:len(c.String())] == c.String() {
			return true
		}
	}
	return false
}

// errString is a compact rendering of an error for logs.
func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	_, d := Classify(err)
	return fmt.Sprint(d)
}
