package workqueue

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/record"
)

// BenchmarkHeapPerPendingKey reports the heap bytes one pending key costs,
// key string included (11-byte keys, as client-go's figure in
// docs/benchmarks.md).
func BenchmarkHeapPerPendingKey(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/k%07d", i) // 11 bytes
	}
	cfg := DefaultConfig()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		q := New("q", &cfg, &seqTokens{}, nil)
		for i, k := range keys {
			// The key's bytes are counted too: copy it as a server decoding
			// a request would own it.
			q.Add(string([]byte(k)), AddOptions{}, int64(i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
		runtime.KeepAlive(q)
	}
}

// BenchmarkAdd measures the state machine alone: distinct-key Adds with the
// record encoding a durable queue pays for.
func BenchmarkAdd(b *testing.B) {
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/k%07d", i)
	}
	cfg := DefaultConfig()
	var buf []byte
	q := New("q", &cfg, &seqTokens{}, func(r *record.Record) { buf = record.Append(buf[:0], r, 1) })
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			q = New("q", &cfg, &seqTokens{}, func(r *record.Record) { buf = record.Append(buf[:0], r, 1) })
			i = 0
			b.StartTimer()
		}
		q.Add(keys[i], AddOptions{}, int64(i))
		i++
	}
}
