package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestSetTS holds setTS to timestamppb.New, before and after 1970.
func TestSetTS(t *testing.T) {
	for _, n := range []int64{0, 1, -1, 999_999_999, 1_000_000_000, -1_000_000_000, -1_500_000_000, 1_795_990_300_439_961_630, -1 << 62} {
		var got timestamppb.Timestamp
		setTS(&got, n)
		want := timestamppb.New(time.Unix(0, n))
		if got.Seconds != want.Seconds || got.Nanos != want.Nanos {
			t.Errorf("setTS(%d) = %d s %d ns, want %d s %d ns", n, got.Seconds, got.Nanos, want.Seconds, want.Nanos)
		}
	}
}

// TestToStatus holds the translation of the broker's and store's errors to
// gRPC codes, done once, here.
func TestToStatus(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   codes.Code
		msg    string
		reason string
	}{
		// A member of a replicated queue, as its broker answers: every
		// refusal that changed nothing is UNAVAILABLE with a reason a
		// client retries on, whichever layer refused.
		{fmt.Errorf("%w: %w", broker.ErrNotLeader, &replica.NotLeaderError{Leader: 2}), codes.Unavailable, "nothing changed", queueclient.ReasonNotLeader},
		{fmt.Errorf("%w: %w", broker.ErrNotLeader, replica.ErrDropped), codes.Unavailable, "nothing changed", queueclient.ReasonNotLeader},
		{fmt.Errorf("%w: %w", broker.ErrNotLeader, replica.ErrLeadershipLost), codes.Unavailable, "nothing changed", queueclient.ReasonNotLeader},
		{replica.ErrLeadershipLost, codes.Unavailable, "may or may not be stored", queueclient.ReasonLeadershipLost},
		{fmt.Errorf("%w: closed", replica.ErrStopped), codes.Unavailable, "may or may not be stored", queueclient.ReasonStopped},
		{store.ErrNoSpace, codes.ResourceExhausted, "nothing was stored", queueclient.ReasonNoSpace},
		{fmt.Errorf("%w: 1000 queues exist, the most allowed", broker.ErrTooManyQueues), codes.ResourceExhausted, "--max-queues", ""},
		{fmt.Errorf("%w: boom", store.ErrStopped), codes.Unavailable, "may or may not be stored", ""},
		{store.ErrClosed, codes.Unavailable, "shutting down", ""},
		{fmt.Errorf("%w: q", broker.ErrQueueNotFound), codes.NotFound, "q", ""},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "may or may not be stored", ""},
		{context.Canceled, codes.Canceled, "", ""},
		{errors.New("other"), codes.Internal, "other", ""},
	} {
		st := status.Convert(ToStatus(c.err))
		if st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("ToStatus(%v) = %v %q, want %v containing %q", c.err, st.Code(), st.Message(), c.code, c.msg)
		}
		reason := ""
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == queueclient.ErrorDomain {
				reason = info.GetReason()
			}
		}
		if c.reason != "" && reason != c.reason {
			t.Errorf("ToStatus(%v) has reason %q, want %q", c.err, reason, c.reason)
		}
	}
	if ToStatus(nil) != nil {
		t.Error("ToStatus(nil) is not nil")
	}
}
