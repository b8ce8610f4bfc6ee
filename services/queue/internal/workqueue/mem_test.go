package workqueue

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkHeapPerPendingKey reports the heap bytes one pending key costs,
// key string included (11-byte keys, as MEASURED.md's client-go figure).
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
			q.Add(string([]byte(k)), 0, Normal, int64(i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
		runtime.KeepAlive(q)
	}
}
