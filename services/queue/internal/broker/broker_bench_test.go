package broker

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAddBatch measures durable Adds of distinct keys in batches of
// 1000 from 8 callers, without gRPC: the broker and the log alone.
func BenchmarkAddBatch(b *testing.B) {
	br := open(b, b.TempDir(), 0)
	defer br.Close()
	var n atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := make([]string, 1000)
		for pb.Next() {
			base := n.Add(1)
			for i := range keys {
				keys[i] = fmt.Sprintf("ns/%d-%d", base, i)
			}
			if _, _, err := br.Add(b.Context(), "q", keys, AddOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkCycle measures Add → Lease → Ack of 1000-key batches, the leases
// bound to a holder as under mutual TLS.
func BenchmarkCycle(b *testing.B) {
	br := open(b, b.TempDir(), 0)
	defer br.Close()
	var n atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		holder := "w" // a connection's certificate name, as the server passes it
		keys := make([]string, 1000)
		acks := make([]AckItem, 0, 1000)
		for pb.Next() {
			base := n.Add(1)
			for i := range keys {
				keys[i] = fmt.Sprintf("ns/%d-%d", base, i)
			}
			if _, _, err := br.Add(b.Context(), "q", keys, AddOptions{}); err != nil {
				b.Fatal(err)
			}
			g, err := br.Lease(b.Context(), "q", LeaseOptions{Worker: "w", Holder: &holder, Max: 1000, Duration: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			acks = acks[:0]
			for _, x := range g {
				acks = append(acks, AckItem{Key: x.Key, Token: x.Token})
			}
			if _, err := br.Ack(b.Context(), "q", &holder, acks); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkRestart1M measures recovery of a million unfinished keys from the
// log (no snapshot yet: the slowest case, every record replayed).
func BenchmarkRestart1M(b *testing.B) {
	dir := b.TempDir()
	br := open(b, dir, 1<<40)
	keys := make([]string, 10000)
	for round := range 100 {
		for i := range keys {
			keys[i] = fmt.Sprintf("ns/%02d-%05d", round, i)
		}
		if _, _, err := br.Add(b.Context(), "q", keys, AddOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		br := open(b, dir, 1<<40)
		if st, _ := br.Stats(b.Context(), "q", ReadOptions{}); st[0].Pending != 1_000_000 {
			b.Fatalf("recovered %d keys", st[0].Pending)
		}
		br.Close()
	}
}

// BenchmarkAddOne measures one caller's durable Adds of single keys: the
// latency of one group commit, without gRPC.
func BenchmarkAddOne(b *testing.B) {
	br := open(b, b.TempDir(), 0)
	defer br.Close()
	lat := make([]time.Duration, 0, b.N)
	keys := []string{""}
	b.ResetTimer()
	for i := range b.N {
		keys[0] = fmt.Sprintf("ns/%d", i)
		t := time.Now()
		if _, _, err := br.Add(b.Context(), "q", keys, AddOptions{}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}

// BenchmarkWaitersSingleKeys measures keys added one per Add by as many
// adders as there are Leases waiting on the queue (1 or 64), each Lease
// taking one key and acking it, as 64 workers' long polls (or work
// streams) do, and reports the process's CPU time per key: when many
// waiters sleep on one queue, only a key's taker should wake for it.
func BenchmarkWaitersSingleKeys(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprint(n, "-waiters"), func(b *testing.B) { benchWaiters(b, n) })
	}
}

func benchWaiters(b *testing.B, n int) {
	br := open(b, b.TempDir(), 0)
	defer br.Close()
	var taken, next atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			name := fmt.Sprint("w", w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				g, err := br.Lease(b.Context(), "q", LeaseOptions{Worker: name, Max: 1, Duration: time.Minute, Wait: 100 * time.Millisecond})
				if err != nil {
					return
				}
				for _, x := range g {
					br.Ack(b.Context(), "q", nil, []AckItem{{Key: x.Key, Token: x.Token}})
					taken.Add(1)
				}
			}
		})
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	var adders sync.WaitGroup
	for range n {
		adders.Go(func() {
			keys := []string{""}
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				keys[0] = fmt.Sprintf("ns/%d", i)
				if _, _, err := br.Add(b.Context(), "q", keys, AddOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	adders.Wait()
	for taken.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/key")
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
