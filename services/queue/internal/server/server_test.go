package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/store"
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
		err  error
		code codes.Code
		msg  string
	}{
		{store.ErrNoSpace, codes.ResourceExhausted, "nothing was stored"},
		{fmt.Errorf("%w: 1000 queues exist, the most allowed", broker.ErrTooManyQueues), codes.ResourceExhausted, "--max-queues"},
		{fmt.Errorf("%w: boom", store.ErrStopped), codes.Unavailable, "may or may not be stored"},
		{store.ErrClosed, codes.Unavailable, "shutting down"},
		{fmt.Errorf("%w: q", broker.ErrQueueNotFound), codes.NotFound, "q"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "may or may not be stored"},
		{context.Canceled, codes.Canceled, ""},
		{errors.New("other"), codes.Internal, "other"},
	} {
		st := status.Convert(toStatus(c.err))
		if st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("toStatus(%v) = %v %q, want %v containing %q", c.err, st.Code(), st.Message(), c.code, c.msg)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) is not nil")
	}
}
