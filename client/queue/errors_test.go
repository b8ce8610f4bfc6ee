package queue

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTypedErrors: a refusal the server marks with a reason comes back from
// the client as the package's error, and still carries its gRPC status.
func TestTypedErrors(t *testing.T) {
	for reason, want := range reasons {
		err := typed(Refusal(codes.ResourceExhausted, reason, "refused"))
		if !errors.Is(err, want) || status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s: %v (code %v), want %v with RESOURCE_EXHAUSTED", reason, err, status.Code(err), want)
		}
	}
	plain := typed(status.Error(codes.ResourceExhausted, "grpc: received message larger than max"))
	for _, e := range []error{ErrNoSpace, ErrTooManyQueues, ErrStopped} {
		if errors.Is(plain, e) {
			t.Errorf("a status without a reason is %v", e)
		}
	}
	other := typed(Refusal(codes.ResourceExhausted, "SOMETHING_ELSE", "refused"))
	if errors.Is(other, ErrNoSpace) || status.Code(other) != codes.ResourceExhausted {
		t.Errorf("an unknown reason: %v", other)
	}
	if !IsNotFound(status.Error(codes.NotFound, "x")) || IsNotFound(nil) || !IsUnavailable(status.Error(codes.Unavailable, "x")) ||
		!IsInvalidArgument(status.Error(codes.InvalidArgument, "x")) {
		t.Error("the Is helpers disagree with the codes")
	}
}
