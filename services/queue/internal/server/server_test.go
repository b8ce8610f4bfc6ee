package server

import (
	"testing"
	"time"

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
