package server

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// labelRE is DESIGN.md's queue-name rule as written there.
var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// FuzzQueueName holds dnsLabel to the regular expression it replaces.
func FuzzQueueName(f *testing.F) {
	for _, s := range []string{
		"", "a", "0", "-", "a-", "-a", "a-b", "pods", "replica-sets", "Pods", "a_b", "a.b", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b",
		"a\n", "a\x00", "a b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if got, want := dnsLabel(q), labelRE.MatchString(q); got != want {
			t.Fatalf("dnsLabel(%q) = %v, want %v", q, got, want)
		}
	})
}

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
