package server

import (
	"regexp"
	"strings"
	"testing"
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
