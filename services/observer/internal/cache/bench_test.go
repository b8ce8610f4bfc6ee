package cache

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/batonrun/baton/services/observer/internal/object"
)

// BenchmarkMemoryPerObject reports the heap the cache holds per object:
// B/object in total and overhead-B/object beyond the value bytes, for pods
// of about 500 bytes of JSON owned by a ReplicaSet.
func BenchmarkMemoryPerObject(b *testing.B) {
	const n = 100000
	for range b.N {
		values := make([][]byte, n)
		valueBytes := 0
		for i := range n {
			values[i] = []byte(fmt.Sprintf(`{"kind":"Pod","metadata":{"name":"web-%06d","namespace":"default","uid":"uid-%06d","labels":{"app":"web","pod-template-hash":"5d8f9c7b6"},"ownerReferences":[{"kind":"ReplicaSet","name":"web-5d8f9c7b6","uid":"rs-uid-0001"}]},"spec":{"image":"nginx:1.27","durationSeconds":0,"exitCode":0},"status":{"phase":"Running","startTime":"2026-11-29T10:00:00Z"}}`, i, i))
			valueBytes += len(values[i])
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c := New([]string{"/registry/pods/"})
		for i, v := range values {
			key := fmt.Sprintf("/registry/pods/default/web-%06d", i)
			m, _ := object.Decode(v)
			c.Put(&Object{Key: key, Value: v, ModRevision: int64(i + 1), Meta: m, Namespace: m.Namespace})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObject := float64(after.HeapAlloc-before.HeapAlloc) / n
		b.ReportMetric(perObject+float64(valueBytes)/n, "B/object")
		b.ReportMetric(perObject, "overhead-B/object")
		runtime.KeepAlive(c)
		runtime.KeepAlive(values)
	}
}
