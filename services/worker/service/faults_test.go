package service_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/services/runtime/flagenv"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/worker/service"
	"github.com/batonrun/baton/test/framework"
)

// TestMain lets this test binary double as a worker process for the SIGKILL
// test: with BATON_WORKER_TEST_CHILD set it runs a real worker (service.Run,
// configured from the environment) that hangs inside the reconcile of
// default/victim after touching a marker file. Otherwise it runs the tests,
// and framework.RunTests removes the binaries the stack was built from.
func TestMain(m *testing.M) {
	if os.Getenv("BATON_WORKER_TEST_CHILD") != "" {
		os.Exit(runChild())
	}
	os.Exit(framework.RunTests(m))
}

func runChild() int {
	cfg := service.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.QueueAddr = os.Getenv("BATON_WORKER_TEST_QUEUE")
	cfg.ObserverAddr = os.Getenv("BATON_WORKER_TEST_OBSERVER")
	cfg.EtcdEndpoints = flagenv.SplitList(os.Getenv("BATON_WORKER_TEST_ETCD"))
	cfg.Controllers, cfg.Worker = "replicasets", "child"
	cfg.LeaseDuration = time.Second
	marker := os.Getenv("BATON_WORKER_TEST_MARKER")
	cfg.Wrap = func(_ string, mc manager.Controller) manager.Controller {
		inner := mc.Reconciler
		mc.Reconciler = reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			switch req.Key {
			case "default/victim":
				os.WriteFile(marker, []byte("inside"), 0o644)
				select {} // mid-reconcile, heartbeats keep the lease, until SIGKILL
			case "default/slow":
				os.WriteFile(marker, []byte("inside"), 0o644)
				time.Sleep(time.Second) // SIGTERM arrives meanwhile; the grace period lets this finish
			}
			return inner.Reconcile(ctx, req)
		})
		return mc
	}
	if err := service.Run(serve.SignalContext(), cfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func rsObj(n int) map[string]any {
	return map[string]any{"kind": "ReplicaSet", "spec": map[string]any{"replicas": n, "template": tpl("nginx", 0, 0)}}
}

func settledRS(s *stack, name string, n int) func() bool {
	return func() bool {
		r := get[objects.ReplicaSet](s, "replicasets", name)
		pods := s.pods("ReplicaSet", name)
		return r != nil && len(pods) == n && running(pods) == n && r.Status.ReadyReplicas == n &&
			r.Status.ObservedGeneration == r.Metadata.Generation
	}
}

func TestWorkerKilledMidReconcile(t *testing.T) {
	s := startStack(t)
	marker := filepath.Join(t.TempDir(), "inside")
	cmd := startChild(t, s, marker)
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
		}
		cmd.Wait()
	})

	s.apply("replicasets", "victim", rsObj(3))
	waitFor(t, converge, "the child inside the reconcile", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	// Held by the child across several lease durations: heartbeats work.
	time.Sleep(1500 * time.Millisecond)
	if it := s.inspect("replicasets", "default/victim"); it.GetState() != queuev1.ItemState_ITEM_STATE_LEASED || it.GetWorker() != "child" {
		t.Fatalf("before the kill: item %v, want leased by child", it)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no ack
		t.Fatal(err)
	}
	killed = true
	cmd.Wait()
	// The worker held the lease on its work stream, which the kill broke:
	// the queue hands the key back at once rather than at the lease's
	// expiry.
	waitFor(t, converge, "the lease handed back", func() bool {
		it := s.inspect("replicasets", "default/victim")
		return it.GetState() != queuev1.ItemState_ITEM_STATE_LEASED && it.GetLastError() == "work stream ended"
	})
	s.startWorker(s.workerConfig())
	waitFor(t, converge, "another worker converging victim", settledRS(s, "victim", 3))
}

// startChild starts this test binary as a worker process (see TestMain).
func startChild(t *testing.T, s *stack, marker string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		"BATON_WORKER_TEST_CHILD=1",
		"BATON_WORKER_TEST_QUEUE="+s.queueAddr,
		"BATON_WORKER_TEST_OBSERVER="+s.observerAddr,
		"BATON_WORKER_TEST_ETCD="+strings.Join(s.etcd.Endpoints(), ","),
		"BATON_WORKER_TEST_MARKER="+marker,
	)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestSigtermFinishesInFlight(t *testing.T) {
	s := startStack(t)
	marker := filepath.Join(t.TempDir(), "inside")
	cmd := startChild(t, s, marker)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	s.apply("replicasets", "slow", rsObj(2))
	waitFor(t, converge, "the child inside the reconcile", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("worker exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(converge):
		t.Fatal("worker did not exit after SIGTERM")
	}
	// The reconcile in flight finished and was acked before the exit: its
	// pods exist (Pending: the child ran only the replicasets controller,
	// and it is gone) and the key is not left leased.
	if pods := s.pods("ReplicaSet", "slow"); len(pods) != 2 {
		t.Errorf("pods of slow = %d, want 2: the reconcile in flight did not finish", len(pods))
	}
	if it := s.inspect("replicasets", "default/slow"); it.GetState() == queuev1.ItemState_ITEM_STATE_LEASED {
		t.Errorf("slow left leased after a graceful stop: %v", it)
	}
}

func TestPanickingReconcileIsRetried(t *testing.T) {
	s := startStack(t)
	rec := newCalls()
	var panics atomic.Int32
	cfg := s.workerConfig()
	cfg.Wrap = rec.wrap(func(ctx context.Context, queue, key string, next func(context.Context) error) error {
		if queue == "replicasets" && key == "default/boom" && panics.Add(1) <= 2 {
			panic("reconciler bug")
		}
		return next(ctx)
	})
	w := s.startWorker(cfg)
	s.apply("replicasets", "boom", rsObj(2))
	waitFor(t, converge, "boom converged after two panics", settledRS(s, "boom", 2))
	if got := w.metric(t, `baton_worker_reconcile_total{controller="replicasets",result="panic"}`); got != "2" {
		t.Errorf("panic metric = %q, want 2", got)
	}
	// The same worker process keeps working.
	s.apply("replicasets", "after", rsObj(1))
	waitFor(t, converge, "a later set converged", settledRS(s, "after", 1))
}

func TestEtcdUnavailableMidReconcile(t *testing.T) {
	s := startStack(t)
	rec := newCalls()
	var once atomic.Bool
	restarted := make(chan error, 1)
	cfg := s.workerConfig()
	cfg.CallTimeout = 300 * time.Millisecond
	cfg.Wrap = rec.wrap(func(ctx context.Context, queue, key string, next func(context.Context) error) error {
		if queue == "replicasets" && key == "default/flaky" && once.CompareAndSwap(false, true) {
			t0 := time.Now()
			s.etcd.Stop()
			t.Logf("etcd stopped in %v", time.Since(t0))
			go func() {
				time.Sleep(1500 * time.Millisecond)
				t0 := time.Now()
				err := s.etcd.Restart(context.Background())
				t.Logf("etcd restarted in %v", time.Since(t0))
				restarted <- err
			}()
		}
		return next(ctx)
	})
	w := s.startWorker(cfg)
	s.apply("replicasets", "flaky", rsObj(3))
	select {
	case err := <-restarted:
		if err != nil {
			t.Fatalf("restart etcd: %v", err)
		}
	case <-time.After(converge):
		t.Fatal("etcd was never stopped")
	}
	t0 := time.Now()
	waitFor(t, converge, "flaky converged after etcd came back", settledRS(s, "flaky", 3))
	t.Logf("converged %v after the restart", time.Since(t0))
	if got := w.metric(t, `baton_worker_reconcile_total{controller="replicasets",result="error"}`); got == "" || got == "0" {
		t.Errorf("error metric = %q: the reconcile during the outage should have failed", got)
	}
	if n := rec.count("replicasets", "default/flaky"); n < 2 {
		t.Errorf("flaky reconciled %d times, want a retry", n)
	}
}

func TestTwoWorkersNeverShareAKey(t *testing.T) {
	s := startStack(t)
	rec := newCalls() // shared by both workers: who is inside Reconcile now
	var perWorker [2]atomic.Int32
	for i := range 2 {
		cfg := s.workerConfig()
		cfg.Worker = fmt.Sprintf("w%d", i)
		cfg.Wrap = rec.wrap(func(ctx context.Context, queue, key string, next func(context.Context) error) error {
			perWorker[i].Add(1)
			time.Sleep(5 * time.Millisecond) // widen the window a second holder would fall into
			return next(ctx)
		})
		s.startWorker(cfg)
	}
	const sets = 8
	for round, n := range []int{2, 4, 1, 3} {
		for i := range sets {
			s.apply("replicasets", fmt.Sprintf("rs%d", i), rsObj(n))
		}
		if round == 3 {
			for i := range sets {
				waitFor(t, converge, fmt.Sprintf("rs%d converged", i), settledRS(s, fmt.Sprintf("rs%d", i), n))
			}
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.overlaps != 0 {
		t.Errorf("%d reconciles began while another of the same key was running", rec.overlaps)
	}
	if perWorker[0].Load() == 0 || perWorker[1].Load() == 0 {
		t.Errorf("reconciles per worker = %d, %d: both should have worked", perWorker[0].Load(), perWorker[1].Load())
	}
}
