package workqueue

import (
	"fmt"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// BenchmarkLeaseAck measures the state machine's Add → Lease → Ack of one
// key, bound to a holder as under mutual TLS, with the record encoding a
// durable queue pays for: the cost per key of the worker's hot path
// without the disk.
func BenchmarkLeaseAck(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/k%07d", i)
	}
	cfg := DefaultConfig()
	var buf []byte
	q := New("q", &cfg, &seqTokens{}, func(r *record.Record) { buf = record.Append(buf[:0], r, 1) })
	grants := make([]Grant, 0, 1)
	// One name for the connection's identity, as the server passes the
	// certificate's own CN to every call of that connection.
	holder := new(string)
	*holder = "worker-1"
	i, now := 0, int64(0)
	for b.Loop() {
		now++
		k := keys[i%len(keys)]
		i++
		q.Add(k, AddOptions{}, now)
		grants = q.Lease(grants[:0], LeaseRequest{Max: 1, Worker: "w", Holder: holder, Duration: 30e9}, now)
		if _, ok := q.Ack(k, grants[0].Token, holder, Outcome{}, now); !ok {
			b.Fatal("ack refused")
		}
	}
}
