package queue

import (
	"strings"
	"testing"

	"github.com/batonrun/baton/client/queue/limits"
)

// TestBatchesFitTheServer: every call the client makes holds at most
// limits.MaxBatch items and fits the server's default request limit, and together
// the calls cover every item once, in order.
func TestBatchesFitTheServer(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		size int
	}{
		{"none", 0, 10},
		{"small keys", 25000, 20},
		{"keys of 1 KiB", 10000, limits.MaxKeyBytes},
		{"acks with errors", 3000, limits.MaxKeyBytes + limits.MaxErrorBytes},
	} {
		t.Run(c.name, func(t *testing.T) {
			next := 0
			err := batches(c.n, func(int) int { return c.size }, func(start, end int) error {
				if start != next || end <= start {
					t.Fatalf("batch [%d, %d) after %d", start, end, next)
				}
				if end-start > limits.MaxBatch {
					t.Fatalf("batch of %d items", end-start)
				}
				if bytes := (end - start) * (c.size + 16); bytes > limits.DefaultMaxRequestBytes {
					t.Fatalf("batch of %d bytes, over %d", bytes, limits.DefaultMaxRequestBytes)
				}
				next = end
				return nil
			})
			if err != nil || next != c.n {
				t.Fatalf("covered %d of %d items: %v", next, c.n, err)
			}
		})
	}
}

// TestOutcomesCutErrors: the client cuts an error text as the server would
// store it, so an ack of a long stack trace stays within the request limit.
func TestOutcomesCutErrors(t *testing.T) {
	long := strings.Repeat("x", 3<<20)
	for _, o := range []Outcome{Failure(long), Terminal(long)} {
		if len(o.err) > limits.MaxErrorBytes {
			t.Errorf("outcome kept %d bytes of error", len(o.err))
		}
	}
}
