package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// countReconciles counts every reconcile of a worker.
func countReconciles(n *atomic.Int64) func(string, manager.Controller) manager.Controller {
	return func(_ string, mc manager.Controller) manager.Controller {
		inner := mc.Reconciler
		mc.Reconciler = reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			n.Add(1)
			return inner.Reconcile(ctx, req)
		})
		return mc
	}
}

// putAll writes objects in transactions of 100 puts (etcd's default limit is
// 128 operations per transaction) and returns the revision after the last.
func putAll(tb testing.TB, cli *clientv3.Client, kvs map[string]string) int64 {
	tb.Helper()
	var ops []clientv3.Op
	var rev int64
	flush := func() {
		resp, err := cli.Txn(context.Background()).Then(ops...).Commit()
		if err != nil {
			tb.Fatal(err)
		}
		rev, ops = resp.Header.Revision, ops[:0]
	}
	for k, v := range kvs {
		ops = append(ops, clientv3.OpPut(k, v))
		if len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	return rev
}

func rsJSON(name string, replicas int, label string) string {
	return fmt.Sprintf(`{"kind":"ReplicaSet","metadata":{"name":%q,"namespace":"default","uid":"uid-%s","generation":1,"labels":{"burst":%q}},`+
		`"spec":{"replicas":%d,"template":{"metadata":{"labels":{"app":%q}},"spec":{"image":"nginx"}}}}`, name, name, label, replicas, name)
}

// readySets counts the ReplicaSets whose status reports want ready pods.
func readySets(tb testing.TB, cli *clientv3.Client, want int) int {
	tb.Helper()
	resp, err := cli.Get(context.Background(), "/registry/replicasets/", clientv3.WithPrefix())
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		var rs objects.ReplicaSet
		if json.Unmarshal(kv.Value, &rs) == nil && rs.Status.ReadyReplicas == want && rs.Status.ObservedGeneration == 1 {
			n++
		}
	}
	return n
}

// idle reports whether the observer has seen rev and handed everything to
// the queues, and the queues hold nothing.
func (s *stack) idle(tb testing.TB, rev int64) bool {
	st, err := s.observer.Status(context.Background(), &observerv1.StatusRequest{})
	if err != nil || st.GetOutboxSize() != 0 {
		return false
	}
	for _, p := range st.GetPrefixes() {
		if p.GetObservedRevision() < rev {
			return false
		}
	}
	qs, err := s.queue.Stats(context.Background(), "")
	if err != nil {
		return false
	}
	for _, q := range qs {
		if q.GetPending()+q.GetDelayed()+q.GetLeased() != 0 {
			return false
		}
	}
	return true
}

// BenchmarkColdStart: N ReplicaSets × 3 pods written at once into an empty
// stack (real etcd, queue and observer, one worker with replicasets and pods
// at concurrency 64), until every set reports 3 ready pods. Reports the
// convergence time, etcd writes (revisions) per ReplicaSet, and reconciles
// per ReplicaSet. Run with -benchtime 1x:
//
//	go test -run '^$' -bench ColdStart -benchtime 1x ./services/worker/service
func BenchmarkColdStart(b *testing.B) {
	sizes := []int{1000, 10000}
	if v, err := strconv.Atoi(os.Getenv("BATON_BENCH_SETS")); err == nil && v > 0 {
		sizes = []int{v} // an ad hoc size
	}
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				s := startStack(b)
				var reconciles atomic.Int64
				cfg := s.workerConfig()
				cfg.Controllers, cfg.Concurrency = "replicasets,pods", 64
				cfg.LeaseDuration = 30 * time.Second
				if os.Getenv("BATON_BENCH_DIRECT") != "" {
					cfg.ObserverAddr = "" // read etcd directly, for comparison
				}
				cfg.Wrap = countReconciles(&reconciles)
				w := s.startWorker(cfg)

				kvs := map[string]string{}
				for i := range n {
					name := fmt.Sprintf("rs%05d", i)
					kvs[objects.Key("replicasets", "default", name)] = rsJSON(name, 3, "0")
				}
				b.ResetTimer()
				start := time.Now()
				written := putAll(b, s.cli, kvs)
				for readySets(b, s.cli, 3) < n {
					if time.Since(start) > 10*time.Minute {
						b.Fatal("no convergence in 10 minutes")
					}
					time.Sleep(200 * time.Millisecond)
				}
				took := time.Since(start)
				b.StopTimer()
				head, _ := s.cli.Get(context.Background(), "health")
				b.ReportMetric(took.Seconds(), "s/converge")
				b.ReportMetric(float64(head.Header.Revision-written)/float64(n), "etcd-writes/rs")
				b.ReportMetric(float64(reconciles.Load())/float64(n), "reconciles/rs")
				for _, c := range []string{"replicasets", "pods"} {
					sum := w.metric(b, `baton_worker_reconcile_duration_seconds_sum{controller="`+c+`"}`)
					count := w.metric(b, `baton_worker_reconcile_duration_seconds_count{controller="`+c+`"}`)
					b.Logf("%s: %s reconciles took %s s in all", c, count, sum)
				}
			}
		})
	}
}

// BenchmarkBurst: 100 ReplicaSets, each changed 100 times as fast as etcd
// takes it (a metadata change: nothing for the controller to do) while one
// worker (concurrency 4) runs. Reports reconciles per ReplicaSet: the queue
// collapses announcements of a key already pending, so it is far below 100.
func BenchmarkBurst(b *testing.B) {
	const sets, changes = 100, 100
	for range b.N {
		s := startStack(b)
		var reconciles atomic.Int64
		cfg := s.workerConfig()
		cfg.Controllers = "replicasets,pods"
		cfg.Wrap = countReconciles(&reconciles)
		s.startWorker(cfg)
		kvs := map[string]string{}
		for i := range sets {
			name := fmt.Sprintf("rs%03d", i)
			kvs[objects.Key("replicasets", "default", name)] = rsJSON(name, 1, "0")
		}
		putAll(b, s.cli, kvs)
		waitFor(b, time.Minute, "the sets to converge", func() bool { return readySets(b, s.cli, 1) == sets })
		var rev int64
		waitFor(b, time.Minute, "quiet", func() bool {
			h, _ := s.cli.Get(context.Background(), "health")
			rev = h.Header.Revision
			return s.idle(b, rev)
		})

		before := reconciles.Load()
		b.ResetTimer()
		for c := 1; c <= changes; c++ {
			for i := range sets {
				// Only the labels change; the status is the one the
				// controller wrote, so there is nothing to do.
				name := fmt.Sprintf("rs%03d", i)
				kvs[objects.Key("replicasets", "default", name)] = strings.TrimSuffix(rsJSON(name, 1, fmt.Sprint(c)), "}") +
					`,"status":{"replicas":1,"readyReplicas":1,"observedGeneration":1}}`
			}
			rev = putAll(b, s.cli, kvs)
		}
		waitFor(b, time.Minute, "the burst drained", func() bool { return s.idle(b, rev) })
		b.StopTimer()
		b.ReportMetric(float64(reconciles.Load()-before)/sets, "reconciles/rs")
		b.ReportMetric(changes, "changes/rs")
	}
}
