// Package heap measures the heap that client-go's in-memory workqueue needs
// per queued key, in this process: the ceiling Baton's memory target is a
// ratio of.
package heap

import (
	"fmt"
	"runtime"

	"k8s.io/client-go/util/workqueue"
)

// ClientGoPerKey adds n distinct 11-byte keys to a typed rate-limiting
// workqueue (what a controller uses) and returns the live heap they added,
// per key, key strings included.
func ClientGoPerKey(n int) (float64, error) {
	before := liveHeap()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	for i := range n {
		q.Add(fmt.Sprintf("cgo/%07d", i))
	}
	after := liveHeap()
	if got := q.Len(); got != n {
		return 0, fmt.Errorf("client-go queue holds %d keys, want %d", got, n)
	}
	runtime.KeepAlive(q)
	return (float64(after) - float64(before)) / float64(n), nil
}

// liveHeap returns the heap in use after two full collections (the second
// frees what the first one's finalizers released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
