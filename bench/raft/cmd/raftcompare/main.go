// Command raftcompare measures the two Raft libraries under the queue's
// write workload and prints markdown tables (docs/queue.md, "Replication:
// the Raft library"). Contenders run interleaved, a fresh cluster each
// round, with the order rotated every round, so background load on a shared
// machine falls on all of them alike; each figure is the median of the
// rounds.
//
//	cd bench/raft && GOWORK=off go run ./cmd/raftcompare -rounds 3 -dur 3s -failovers 10
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	raftbench "github.com/batonrun/baton/bench/raft"
	"github.com/batonrun/baton/bench/raft/etcdraft"
	"github.com/batonrun/baton/bench/raft/hashiraft"
)

type contender struct {
	name  string
	start func(raftbench.Options) (raftbench.Cluster, error)
	opts  raftbench.Options
}

func etcd(o raftbench.Options) (raftbench.Cluster, error)  { return etcdraft.Start(o) }
func hashi(o raftbench.Options) (raftbench.Cluster, error) { return hashiraft.Start(o) }

var contenders = []contender{
	{"etcd raft, coalesced", etcd, raftbench.Options{Coalesce: true}},
	{"etcd raft, entry per record", etcd, raftbench.Options{}},
	{"hashicorp, Apply per record (MaxAppendEntries 64)", hashi, raftbench.Options{}},
	{"hashicorp, Apply per record (MaxAppendEntries 1024)", hashi, raftbench.Options{MaxAppendEntries: 1024}},
	{"hashicorp, coalesced (MaxAppendEntries 64)", hashi, raftbench.Options{Coalesce: true}},
}

type sample struct{ many, one raftbench.ThroughputResult }

func main() {
	rounds := flag.Int("rounds", 3, "rounds per contender")
	dur := flag.Duration("dur", 3*time.Second, "measured time per load")
	callers := flag.Int("callers", 64, "concurrent callers of the many-caller load")
	failovers := flag.Int("failovers", 10, "leader kills per library")
	dir := flag.String("dir", "", "data directories (default: a temporary directory on the same disk as os.TempDir)")
	flag.Parse()
	log.SetFlags(0)
	base := *dir
	if base == "" {
		var err error
		if base, err = os.MkdirTemp("", "raftcompare-"); err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(base)
	}
	loadBefore := loadavg()
	started := time.Now()
	syncP50, err := diskSync(base)
	if err != nil {
		log.Fatal(err)
	}

	results := make([][]sample, len(contenders))
	run := 0
	for r := range *rounds {
		for k := range contenders {
			i := (k + r) % len(contenders)
			ct := contenders[i]
			o := ct.opts
			o.Dir = fmt.Sprintf("%s/run-%d", base, run)
			run++
			c, err := ct.start(o)
			if err != nil {
				log.Fatalf("%s: %v", ct.name, err)
			}
			many, err := raftbench.Throughput(c, *callers, 500*time.Millisecond, *dur)
			if err != nil {
				log.Fatalf("%s: %v", ct.name, err)
			}
			one, err := raftbench.Throughput(c, 1, 300*time.Millisecond, *dur)
			if err != nil {
				log.Fatalf("%s: %v", ct.name, err)
			}
			c.Close()
			os.RemoveAll(o.Dir)
			results[i] = append(results[i], sample{many, one})
			log.Printf("round %d %-52s %8.0f rec/s (64)  %6.0f rec/s (1)", r+1, ct.name, many.PerSecond(), one.PerSecond())
		}
	}

	// Failover: the default configuration of each library, kills interleaved.
	fo := []contender{contenders[0], contenders[2]}
	clusters := make([]raftbench.Cluster, len(fo))
	for i, ct := range fo {
		o := ct.opts
		o.Dir = fmt.Sprintf("%s/failover-%d", base, i)
		c, err := ct.start(o)
		if err != nil {
			log.Fatalf("%s: %v", ct.name, err)
		}
		defer c.Close()
		clusters[i] = c
	}
	took := make([][]time.Duration, len(fo))
	for rep := range *failovers {
		for i := range fo {
			d, err := raftbench.FailoverOnce(clusters[i], rep)
			if err != nil {
				log.Fatalf("%s failover %d: %v", fo[i].name, rep, err)
			}
			took[i] = append(took[i], d)
			log.Printf("failover %d %-52s %v", rep+1, fo[i].name, d.Round(time.Millisecond))
		}
	}

	fmt.Printf("\n%d rounds of %v per load, %d callers, %d-byte records; load average before %s, after %s; %v in all\n\n",
		*rounds, *dur, *callers, raftbench.RecordSize, loadBefore, loadavg(), time.Since(started).Round(time.Second))
	fmt.Printf("The disk itself: one 4 KiB append + fdatasync takes %s (p50 of 1 s of them, before the runs).\n\n", ms(float64(syncP50)))
	fmt.Printf("| contender | %d callers: records/s | p50 | p99 | leader log syncs/s | records per sync | 1 caller: records/s | p50 |\n", *callers)
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for i, ct := range contenders {
		s := results[i]
		m := func(f func(sample) float64) float64 { return median(s, f) }
		fmt.Printf("| %s | %.0f | %s | %s | %.0f | %.1f | %.0f | %s |\n", ct.name,
			m(func(x sample) float64 { return x.many.PerSecond() }),
			ms(m(func(x sample) float64 { return float64(x.many.P50) })),
			ms(m(func(x sample) float64 { return float64(x.many.P99) })),
			m(func(x sample) float64 { return x.many.SyncsPerSecond() }),
			m(func(x sample) float64 { return float64(x.many.Records) / max(1, float64(x.many.Syncs)) }),
			m(func(x sample) float64 { return x.one.PerSecond() }),
			ms(m(func(x sample) float64 { return float64(x.one.P50) })))
	}
	fmt.Printf("\n| failover (%d kills of the leader, ~1 s election timeout) | p50 | p99 | min | max |\n", *failovers)
	fmt.Println("|---|---:|---:|---:|---:|")
	for i, ct := range fo {
		d := took[i]
		fmt.Printf("| %s | %s | %s | %s | %s |\n", strings.SplitN(ct.name, ",", 2)[0],
			ms(float64(raftbench.Percentile(d, 0.5))), ms(float64(raftbench.Percentile(d, 0.99))),
			ms(float64(slices.Min(d))), ms(float64(slices.Max(d))))
	}
}

func median(s []sample, f func(sample) float64) float64 {
	v := make([]float64, len(s))
	for i, x := range s {
		v[i] = f(x)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func ms(ns float64) string { return fmt.Sprintf("%.1f ms", ns/1e6) }

// diskSync is the physical reference every figure above rests on: the
// latency of appending 4 KiB to a file and fdatasyncing it, on the disk the
// members' data directories are on.
func diskSync(dir string) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "sync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var ds []time.Duration
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t0))
	}
	return raftbench.Percentile(ds, 0.5), nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
