package service

import (
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The disk's metrics, which the alerts of a slow or filling disk stand on
// (deploy/monitoring): how long each group commit's fdatasync takes, and
// the data directory's file system, read at each scrape.
const (
	fsyncMetric     = "baton_queue_store_fsync_duration_seconds"
	diskAvailMetric = "baton_queue_store_disk_available_bytes"
	diskSizeMetric  = "baton_queue_store_disk_size_bytes"
)

// registerDiskMetrics registers them on reg, for the data directory dir,
// and returns what the log's ObserveSync calls.
func registerDiskMetrics(reg prometheus.Registerer, dir string) (func(time.Duration), error) {
	fsync := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: fsyncMetric,
		Help: "How long each fdatasync of the queue's log took: a single member's group commit, or a replicated member's Raft log save.",
		// From a fast NVMe's tens of microseconds to a disk in trouble.
		Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 12),
	})
	statfs := func(size bool) func() float64 {
		return func() float64 {
			var st syscall.Statfs_t
			if err := syscall.Statfs(dir, &st); err != nil {
				// No number rather than zero: zero bytes free would
				// page someone for a disk that is not full.
				return math.NaN()
			}
			if size {
				return float64(st.Blocks) * float64(st.Bsize)
			}
			return float64(st.Bavail) * float64(st.Bsize)
		}
	}
	avail := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: diskAvailMetric,
		Help: "Bytes free to the queue on the file system of its --data-dir, read at each scrape.",
	}, statfs(false))
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: diskSizeMetric,
		Help: "The size in bytes of the file system of the queue's --data-dir.",
	}, statfs(true))
	for _, c := range []prometheus.Collector{fsync, avail, size} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register disk metrics: %w", err)
		}
	}
	return func(d time.Duration) { fsync.Observe(d.Seconds()) }, nil
}
