package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sent := []time.Time{t0, t0.Add(time.Millisecond), t0.Add(2 * time.Millisecond), t0.Add(3 * time.Millisecond)}
	ks := []string{"a", "b", "c", "d"}
	seen := map[string]time.Time{
		"a": t0.Add(5 * time.Millisecond), // 5 ms
		"b": t0.Add(2 * time.Millisecond), // 1 ms
		"d": t0.Add(6 * time.Millisecond), // 3 ms
		"x": t0,                           // not a key of the run
	}
	got, missing := Latencies(sent, seen, ks)
	want := []time.Duration{time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond}
	if missing != 1 || len(got) != len(want) {
		t.Fatalf("got %v, %d missing", got, missing)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestHistogramMean(t *testing.T) {
	const name, labels = "x_seconds", `{queue="probe"}`
	before := map[string]float64{name + "_sum" + labels: 1, name + "_count" + labels: 10}
	after := map[string]float64{name + "_sum" + labels: 1.5, name + "_count" + labels: 110}
	if got := HistogramMean(before, after, name, labels); got != 5*time.Millisecond {
		t.Fatalf("mean %v, want 5ms", got)
	}
	if got := HistogramMean(after, after, name, labels); got != 0 {
		t.Fatalf("no new observations: %v", got)
	}
	if got := HistogramMean(nil, map[string]float64{}, name, labels); got != 0 {
		t.Fatalf("no histogram: %v", got)
	}
	// A histogram first seen after the run started: all of it counts.
	if got := HistogramMean(nil, after, name, labels); got < 13636*time.Microsecond || got > 13637*time.Microsecond {
		t.Fatalf("new histogram: %v", got)
	}
}

func TestPutRate(t *testing.T) {
	if r := (LatencyResult{Puts: 1001, Issuing: time.Second}).PutRate(); r != 1000 {
		t.Fatalf("rate %v", r)
	}
	if r := (LatencyResult{Puts: 1}).PutRate(); r != 0 {
		t.Fatalf("rate of one put %v", r)
	}
}

func TestKeysMatchObserverKeys(t *testing.T) {
	ks := keys("lat", 3)
	if ks[2] != "lat/p0000002" || queueKey(ProbePrefix+"lat/p0000002") != ks[2] {
		t.Fatalf("keys %v", ks)
	}
}

func TestReplicaSetJSON(t *testing.T) {
	var rs struct {
		Kind     string
		Metadata struct {
			Name, Namespace, UID string
			Generation           int64
		}
		Spec struct{ Replicas int }
	}
	if err := json.Unmarshal([]byte(rsJSON("rs00007")), &rs); err != nil {
		t.Fatal(err)
	}
	if rs.Kind != "ReplicaSet" || rs.Metadata.Name != "rs00007" || rs.Metadata.Namespace != "default" ||
		rs.Metadata.UID == "" || rs.Metadata.Generation != 1 || rs.Spec.Replicas != 3 {
		t.Fatalf("%+v", rs)
	}
}

// binaries returns the repository's built binaries, or skips: `make build`
// makes them.
func binaries(t *testing.T) Bins {
	t.Helper()
	root, err := filepath.Abs("../../../bin")
	if err != nil {
		t.Fatal(err)
	}
	b := Bins{Queue: filepath.Join(root, "baton-queue"), Observer: filepath.Join(root, "baton-observer"), Worker: filepath.Join(root, "baton-worker")}
	for _, p := range []string{b.Queue, b.Observer, b.Worker} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%v (run `make build`)", err)
		}
	}
	return b
}

// TestLatencySmall runs the latency workload end to end on the real
// binaries, small: every put must be reconciled and watched.
func TestLatencySmall(t *testing.T) {
	bins := binaries(t)
	s, err := StartStack(t.Context(), t.TempDir(), bins, ProbeRules)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := Latency(t.Context(), s, LatencyConfig{Rate: 200, Duration: 500 * time.Millisecond, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Puts != 100 || len(res.Reconcile) != 100 || len(res.Watch) != 100 || len(res.Put) != 100 {
		t.Fatalf("%d puts, %d reconciled, %d watched, %d put calls", res.Puts, len(res.Reconcile), len(res.Watch), len(res.Put))
	}
	if res.Reconcile[0] <= 0 || res.Watch[0] <= 0 {
		t.Fatalf("latencies must be positive: reconcile %v, watch %v", res.Reconcile[0], res.Watch[0])
	}
	// Every put is split where its key became ready in the queue: after
	// the put began, and before its reconcile did.
	if len(res.Ready) != 100 || len(res.Handoff) != 100 || res.Ready[0] <= 0 || res.Handoff[0] < 0 {
		t.Fatalf("split at ready: %d put → ready (first %v), %d ready → start (first %v)", len(res.Ready), res.Ready[0], len(res.Handoff), res.Handoff[0])
	}
}

// TestColdStartSmall runs the cold start end to end on the real binaries
// with a few sets: it must converge, count the writes it needed (at least
// the set creates and 3 pod creates per set) and replay them.
func TestColdStartSmall(t *testing.T) {
	bins := binaries(t)
	const sets = 20
	res, err := ColdStart(t.Context(), t.TempDir(), bins, ColdConfig{Sets: sets, Concurrency: 4, Timeout: 2 * time.Minute, Profile: true}, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("converged in %v (etcd alone %v): %d requests, %d keys written, %v reconciles %v, %v etcd reads",
		res.Converge, res.Alone, res.Requests, res.KeyWrites, res.Reconciles, res.ReconcilesBy, res.Reads)
	if res.Converge <= 0 || res.Alone <= 0 {
		t.Fatalf("times: %+v", res)
	}
	// The creates are one transaction; each pod is created and started.
	if res.KeyWrites < sets+2*3*sets || res.Requests < 1+3*sets || res.Reconciles < sets {
		t.Fatalf("too few writes or reconciles for %d sets: %+v", sets, res)
	}
	// Each set is reconciled, and each of its pods.
	if res.ReconcilesBy["replicasets"] < sets || res.ReconcilesBy["pods"] < 3*sets ||
		res.ReconcilesBy["replicasets"]+res.ReconcilesBy["pods"] != res.Reconciles {
		t.Errorf("reconciles by controller %v of %v", res.ReconcilesBy, res.Reconciles)
	}
	// Both controllers' reconciles were timed, and the observer timed the
	// waits of their cache reads, each with the lease's min_revision.
	if res.ReconcileMean["replicasets"] <= 0 || res.ReconcileMean["pods"] <= 0 || res.ReadWaits < res.Reconciles || res.ReadWaitMean <= 0 {
		t.Errorf("reconcile means %v, %v reads waited %v on average", res.ReconcileMean, res.ReadWaits, res.ReadWaitMean)
	}
	// The controllers read through the observer's cache: etcd sees a read
	// only when one confirms an owner gone (none here) and the observer's
	// probes, far fewer than one a reconcile.
	if !res.ReadsKnown || res.ReadsPerReconcile() >= 0.5 {
		t.Errorf("etcd reads %v (known %v) for %v reconciles", res.Reads, res.ReadsKnown, res.Reconciles)
	}
	// Every process was profiled. A profile samples CPU at 100 Hz, and in
	// a cold start of 20 sets, over in about 0.1 s, a process may well use
	// less than 10 ms, so one without samples is no failure (CI had the
	// queue's empty); all of them together without any would be.
	names := map[string]bool{}
	var cpu time.Duration
	var top int
	for _, p := range res.Profiles {
		names[p.Name] = p.Profile != nil
		cpu += p.CPU
		top += len(p.Top(5))
	}
	for _, n := range []string{"baton-queue", "baton-observer", "baton-worker", "batonbench"} {
		if !names[n] {
			t.Errorf("no profile of %s: %v (errors %v)", n, names, res.ProfileErrs)
		}
	}
	if len(res.ProfileErrs) > 0 {
		t.Errorf("profile errors: %v", res.ProfileErrs)
	}
	if cpu <= 0 || top == 0 {
		t.Errorf("the profiles hold no samples: %v of CPU, %d top functions", cpu, top)
	}
}

// TestEtcdRequests: the Range requests an embedded etcd served are counted
// from its gRPC server metrics, apart from other methods.
func TestEtcdRequests(t *testing.T) {
	srv, err := StartEtcd(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := NewEtcdClient(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	r0, err := EtcdRequests("Range")
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := EtcdRequests("Put")
	for range 5 {
		if _, err := cli.Get(t.Context(), "k", clientv3.WithSerializable()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Get(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	r1, _ := EtcdRequests("Range")
	p1, _ := EtcdRequests("Put")
	if r1-r0 != 6 || p1 != p0 {
		t.Fatalf("6 Gets counted as %v Ranges and %v Puts", r1-r0, p1-p0)
	}
}

// TestCountReconciles: baton_worker_reconcile_total's series add up in
// all, by controller, and those that failed.
func TestCountReconciles(t *testing.T) {
	var r ColdResult
	r.Sets = 2
	r.countReconciles(map[string]float64{
		`baton_worker_reconcile_total{controller="replicasets",result="success"}`: 3,
		`baton_worker_reconcile_total{controller="replicasets",result="error"}`:   1,
		`baton_worker_reconcile_total{controller="pods",result="success"}`:        7,
		`baton_worker_reconcile_total{controller="pods",result="requeue_after"}`:  1,
		`baton_worker_reconcile_duration_seconds_count{controller="pods"}`:        99,
	})
	if r.Reconciles != 12 || r.ReconcilesBy["replicasets"] != 4 || r.ReconcilesBy["pods"] != 8 || r.Failed != 1 || r.PerSet(r.Reconciles) != 6 {
		t.Fatalf("%+v", r)
	}
	if labelValue(`x{a="1",b="two"}`, "b") != "two" || labelValue("x", "a") != "" {
		t.Fatal("labelValue")
	}
}
