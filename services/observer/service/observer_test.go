package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/internal/rules"
	"github.com/batonrun/baton/services/observer/service"
	"github.com/batonrun/baton/test/framework"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func prefixStatus(t testing.TB, o *observerConn, prefix string) *observerv1.PrefixStatus {
	t.Helper()
	st, err := o.rpc.Status(t.Context(), &observerv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.GetPrefixes() {
		if p.GetPrefix() == prefix {
			return p
		}
	}
	t.Fatalf("no status for %s", prefix)
	return nil
}

// setup writes a populated world, waits until the observer has delivered
// it, and drains the queues, so that what the queues hold afterwards was
// announced after the setup.
func setup(t *testing.T, o *observerConn, cli *clientv3.Client, q *queueProc, ns string) *world {
	t.Helper()
	w := newWorld(ns, uint64(len(ns)))
	w.applyAll(t, cli, w.populate(60))
	settle(t, o, cli)
	q.drain(t)
	w.resetExpect()
	return w
}

// An etcd stopped and restarted on the same data dir: the watch resumes at
// the last observed revision + 1 and needs no relist.
func TestNoChangeMissedAcrossEtcdRestart(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, nil)
	w := setup(t, o, cli, q, "etcd-restart")

	ops := w.churn(60)
	w.applyAll(t, cli, ops[:30])
	srv.Stop()
	// Not ready while etcd is gone, yet the cache still answers.
	waitFor(t, 30*time.Second, "observer to report not ready", func() (bool, string) {
		err := probeReady(t.Context(), o.httpAddr)
		return err != nil, "still ready"
	})
	if _, err := o.rpc.Get(t.Context(), &observerv1.GetRequest{Key: "/registry/replicasets/etcd-restart/rs0"}); err != nil {
		t.Errorf("Get from the cache while etcd is down: %v", err)
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.applyAll(t, cli, ops[30:])
	settle(t, o, cli)
	w.checkQueue(t, q)
	checkCache(t, o, cli)
	if got := prefixStatus(t, o, "/registry/pods/").GetRelistsTotal(); got != 1 {
		t.Errorf("relists_total = %d, want 1 (the first list only: a restart resumes, it does not relist)", got)
	}
	waitFor(t, 30*time.Second, "observer to be ready again", func() (bool, string) {
		err := probeReady(t.Context(), o.httpAddr)
		return err == nil, fmt.Sprint(err)
	})
}

// The observer is cut off from etcd while changes are made and its revision
// is compacted away: it relists, diffs with its cache and announces every
// key created, changed or deleted meanwhile.
func TestNoChangeMissedAcrossCompaction(t *testing.T) {
	srv, cli := etcdWithClient(t)
	p := startProxy(t, strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	q := startQueue(t)
	o := startObserver(t, []string{"http://" + p.addr()}, q.addr, nil)
	w := setup(t, o, cli, q, "compaction")
	before := prefixStatus(t, o, "/registry/pods/")

	ops := w.churn(60)
	w.applyAll(t, cli, ops[:20])
	p.cut(true)
	w.applyAll(t, cli, ops[20:])
	resp, err := cli.Compact(t.Context(), headRevision(t, cli), clientv3.WithCompactPhysical())
	if err != nil {
		t.Fatal(err)
	}
	_ = resp
	p.cut(false)

	settle(t, o, cli)
	w.checkQueue(t, q)
	checkCache(t, o, cli)
	after := prefixStatus(t, o, "/registry/pods/")
	if after.GetRelistsTotal() <= before.GetRelistsTotal() {
		t.Errorf("relists_total %d → %d, want a relist after compaction", before.GetRelistsTotal(), after.GetRelistsTotal())
	}
}

func headRevision(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// The observer process is frozen (SIGSTOP) while changes are made, then
// continued.
func TestNoChangeMissedAcrossSIGSTOP(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserverProcess(t, srv.Endpoints(), q.addr)
	bin := framework.Binary(t, "baton-observer")
	w := setup(t, o, cli, q, "sigstop")

	ops := w.churn(60)
	w.applyAll(t, cli, ops[:20])
	signal(t, o.proc, syscall.SIGSTOP)
	w.applyAll(t, cli, ops[20:])
	signal(t, o.proc, syscall.SIGCONT)

	settle(t, o, cli)
	w.checkQueue(t, q)
	checkCache(t, o, cli)

	// The healthcheck subcommand probes it; SIGTERM stops it with status 0.
	// (gRPC health follows readiness once a second, so poll.)
	waitFor(t, 30*time.Second, "healthcheck to pass", func() (bool, string) {
		out, err := exec.Command(bin, "healthcheck", "--grpc-addr", o.grpcAddr, "--http-addr", o.httpAddr).CombinedOutput()
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	})
	o.proc.Stop() // SIGTERM; fails the test unless it exits with status 0
	if o.proc.Running() {
		t.Fatal("observer did not exit after SIGTERM")
	}
	if out, err := exec.Command(bin, "healthcheck", "--grpc-addr", o.grpcAddr, "--http-addr", o.httpAddr).CombinedOutput(); err == nil {
		t.Errorf("healthcheck of a stopped observer succeeded:\n%s", out)
	}
}

// The observer process is killed (SIGKILL) while changes are made, and
// started again: its full list at start announces everything, and what its
// outbox held when it died is not lost.
func TestNoChangeMissedAcrossSIGKILL(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserverProcess(t, srv.Endpoints(), q.addr)
	w := setup(t, o, cli, q, "sigkill")
	// The restarted observer replays etcd's history from the checkpoint:
	// wait for it to cover the setup, so the replay starts there.
	head := headRevision(t, cli)
	waitFor(t, 30*time.Second, "checkpoint to reach the setup", func() (bool, string) {
		resp, err := cli.Get(t.Context(), service.CheckpointKey)
		if err != nil || len(resp.Kvs) == 0 {
			return false, fmt.Sprint("no checkpoint ", err)
		}
		c, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		return err == nil && c >= head, fmt.Sprintf("checkpoint %q, head %d", resp.Kvs[0].Value, head)
	})

	ops := w.churn(60)
	w.applyAll(t, cli, ops[:20])
	o.proc.Kill()
	w.applyAll(t, cli, ops[20:])
	o.proc.Start() // the same ports

	settle(t, o, cli)
	w.checkQueue(t, q)
	checkCache(t, o, cli)
}

// The queue is down while 10,000 events on 100 keys arrive: the outbox holds
// at most the distinct keys, observation goes on, and everything reaches
// the queue when it returns.
func TestOutboxWhileQueueDown(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, nil)
	settle(t, o, cli)
	q.Stop()

	const events, keys = 10000, 100
	var (
		wg      sync.WaitGroup
		next    atomic.Int64
		writeMu sync.Mutex
		werr    error
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= events {
					return
				}
				name := fmt.Sprintf("p%03d", i%keys)
				if _, err := cli.Put(t.Context(), "/registry/pods/outbox/"+name, podValue("outbox", name, fmt.Sprintf("rs%d", i%5), fmt.Sprint(i))); err != nil {
					writeMu.Lock()
					werr = err
					writeMu.Unlock()
					return
				}
			}
		})
	}
	// While writing: the outboxes never exceed the distinct keys, and the
	// observed revision keeps moving.
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()
	var revs []int64
	maxOutbox := uint64(0)
	sample := func() {
		st, err := o.rpc.Status(t.Context(), &observerv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ob := range st.GetOutboxes() {
			limit := uint64(keys)
			if ob.GetQueue() == "replicasets" {
				limit = 5
			}
			if ob.GetSize() > limit {
				t.Fatalf("outbox %s holds %d keys, want at most %d", ob.GetQueue(), ob.GetSize(), limit)
			}
		}
		maxOutbox = max(maxOutbox, st.GetOutboxSize())
		for _, p := range st.GetPrefixes() {
			if p.GetPrefix() == "/registry/pods/" {
				revs = append(revs, p.GetObservedRevision())
			}
		}
	}
	for done := false; !done; {
		select {
		case <-writing:
			done = true
		case <-time.After(20 * time.Millisecond):
		}
		sample()
	}
	if werr != nil {
		t.Fatal(werr)
	}
	head := headRevision(t, cli)
	waitFor(t, 60*time.Second, "observer to see every event with the queue down", func() (bool, string) {
		p := prefixStatus(t, o, "/registry/pods/")
		return p.GetObservedRevision() >= head, fmt.Sprintf("observed %d, head %d", p.GetObservedRevision(), head)
	})
	sample()
	if len(revs) < 2 || revs[len(revs)-1] <= revs[0] {
		t.Errorf("observed revisions %v did not advance while the queue was down", revs)
	}
	st, err := o.rpc.Status(t.Context(), &observerv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetOutboxSize() != keys+5 {
		t.Errorf("outbox size %d with the queue down, want %d (100 pods + 5 replicasets)", st.GetOutboxSize(), keys+5)
	}
	for _, ob := range st.GetOutboxes() {
		if ob.GetLastError() == "" {
			t.Errorf("outbox %s: no last_error while the queue is down", ob.GetQueue())
		}
	}
	if pe := prefixStatus(t, o, "/registry/pods/").GetEventsTotal(); pe < events {
		t.Errorf("events_total = %d, want at least %d", pe, events)
	}

	q.Start() // same address and data dir
	settle(t, o, cli)
	got, err := q.keys(t.Context(), "pods")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != keys {
		t.Errorf("queue pods holds %d keys, want %d", len(got), keys)
	}
	for i := range keys {
		if k := fmt.Sprintf("outbox/p%03d", i); !got[k] {
			t.Errorf("queue pods lacks %s", k)
		}
	}
}

func TestGetAndMinRevision(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, nil)
	settle(t, o, cli)
	ctx := t.Context()

	// Read-your-writes: a Get right after a Put, with its revision.
	for i := range 20 {
		key := fmt.Sprintf("/registry/pods/ryw/p%d", i)
		put, err := cli.Put(ctx, key, podValue("ryw", "p", "", fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := o.rpc.Get(ctx, &observerv1.GetRequest{Key: key, MinRevision: put.Header.Revision})
		if err != nil {
			t.Fatalf("Get min_revision %d: %v", put.Header.Revision, err)
		}
		if got.GetModRevision() != put.Header.Revision || got.GetRevision() < put.Header.Revision {
			t.Fatalf("Get = mod %d rev %d, want mod %d", got.GetModRevision(), got.GetRevision(), put.Header.Revision)
		}
	}
	// A write under another prefix: the idle pods prefix still answers at
	// that revision (progress notification on demand).
	put, err := cli.Put(ctx, "/registry/replicasets/ryw/rs", `{"kind":"ReplicaSet"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.rpc.Get(ctx, &observerv1.GetRequest{Key: "/registry/pods/ryw/p0", MinRevision: put.Header.Revision}); err != nil {
		t.Fatalf("Get on an idle prefix at min_revision %d: %v", put.Header.Revision, err)
	}
	list, err := o.rpc.List(ctx, &observerv1.ListRequest{Prefix: "/registry/", MinRevision: put.Header.Revision})
	if err != nil {
		t.Fatal(err)
	}
	if list.GetRevision() < put.Header.Revision || len(list.GetItems()) != 21 {
		t.Errorf("List = %d items at %d, want 21 at ≥ %d", len(list.GetItems()), list.GetRevision(), put.Header.Revision)
	}

	for _, tc := range []struct {
		name string
		req  *observerv1.GetRequest
		code codes.Code
	}{
		{"future revision", &observerv1.GetRequest{Key: "/registry/pods/ryw/p0", MinRevision: put.Header.Revision + 1000}, codes.DeadlineExceeded},
		{"missing", &observerv1.GetRequest{Key: "/registry/pods/ryw/nope"}, codes.NotFound},
		{"unwatched", &observerv1.GetRequest{Key: "/registry/jobs/a/b"}, codes.InvalidArgument},
		{"empty key", &observerv1.GetRequest{}, codes.InvalidArgument},
		{"negative revision", &observerv1.GetRequest{Key: "/registry/pods/a/b", MinRevision: -1}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := o.rpc.Get(cctx, tc.req)
			if status.Code(err) != tc.code {
				t.Errorf("Get = %v, want %v", err, tc.code)
			}
		})
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := o.rpc.List(cctx, &observerv1.ListRequest{Prefix: "/registry/pods/", MinRevision: put.Header.Revision + 1000}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("List at a future revision = %v, want DeadlineExceeded", err)
	}

	// The metrics the design (docs/design.md) names are exported.
	resp, err := httpClient.Get("http://" + o.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"baton_observer_events_total", "baton_observer_relists_total", "baton_observer_watch_restarts_total",
		"baton_observer_observed_revision", "baton_observer_lag_revisions", "baton_observer_outbox_size", "baton_observer_add_latency_seconds_bucket"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Every read with a min_revision that was answered had its wait
	// observed (the 20 Gets, the Get and the List on the idle prefix);
	// those that gave up, and those without one, were not.
	if got := scrape(t, o.httpAddr, "baton_observer_read_wait_seconds_count")[""]; got != 22 {
		t.Errorf("baton_observer_read_wait_seconds_count = %v, want 22", got)
	}
}

func TestListByOwner(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, nil)
	ctx := t.Context()
	for i := range 7 {
		rs := "a"
		if i%2 == 1 {
			rs = "b"
		}
		name := fmt.Sprintf("p%d", i)
		if _, err := cli.Put(ctx, "/registry/pods/ns/"+name, podValue("ns", name, rs, "")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, "/registry/pods/other/p9", podValue("other", "p9", "a", "")); err != nil {
		t.Fatal(err)
	}
	rev := headRevision(t, cli)
	list := func(req *observerv1.ListRequest) ([]string, error) {
		req.MinRevision = rev
		var keys []string
		for pages := 0; pages < 20; pages++ {
			resp, err := o.rpc.List(ctx, req)
			if err != nil {
				return nil, err
			}
			for _, it := range resp.GetItems() {
				keys = append(keys, it.GetKey())
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		return keys, nil
	}
	for _, tc := range []struct {
		name string
		req  *observerv1.ListRequest
		want string
		code codes.Code
	}{
		{"kind and name, pages of 2", &observerv1.ListRequest{Prefix: "/registry/pods/ns/", OwnerKind: "ReplicaSet", OwnerName: "a", PageSize: 2},
			"[/registry/pods/ns/p0 /registry/pods/ns/p2 /registry/pods/ns/p4 /registry/pods/ns/p6]", codes.OK},
		{"kind, name and namespace", &observerv1.ListRequest{OwnerKind: "ReplicaSet", OwnerName: "a", OwnerNamespace: "other"},
			"[/registry/pods/other/p9]", codes.OK},
		{"uid", &observerv1.ListRequest{Prefix: "/registry/pods/", OwnerUid: "uid-ns-b"},
			"[/registry/pods/ns/p1 /registry/pods/ns/p3 /registry/pods/ns/p5]", codes.OK},
		{"wrong kind", &observerv1.ListRequest{OwnerKind: "Job", OwnerName: "a"}, "[]", codes.OK},
		{"all, pages of 3", &observerv1.ListRequest{Prefix: "/registry/pods/", PageSize: 3},
			"[/registry/pods/ns/p0 /registry/pods/ns/p1 /registry/pods/ns/p2 /registry/pods/ns/p3 /registry/pods/ns/p4 /registry/pods/ns/p5 /registry/pods/ns/p6 /registry/pods/other/p9]", codes.OK},
		{"kind without name", &observerv1.ListRequest{OwnerKind: "ReplicaSet"}, "", codes.InvalidArgument},
		{"namespace without kind", &observerv1.ListRequest{OwnerNamespace: "ns"}, "", codes.InvalidArgument},
		{"page too large", &observerv1.ListRequest{PageSize: 10001}, "", codes.InvalidArgument},
		{"bad token", &observerv1.ListRequest{PageToken: "???"}, "", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := list(tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("List = %v, want %v", err, tc.code)
			}
			if tc.code == codes.OK && fmt.Sprint(got) != tc.want && !(tc.want == "[]" && len(got) == 0) {
				t.Errorf("List = %v, want %s", got, tc.want)
			}
		})
	}
}

// Two observers at once: every key reaches the queue, each change is
// worked once (the second announcement collapses), and both caches equal
// etcd.
func TestTwoObserversAreHarmless(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o1 := startObserver(t, srv.Endpoints(), q.addr, nil)
	o2 := startObserver(t, srv.Endpoints(), q.addr, nil)
	w := setup(t, o1, cli, q, "two")
	settle(t, o2, cli)
	q.drain(t)

	w.applyAll(t, cli, w.churn(80))
	settle(t, o1, cli)
	settle(t, o2, cli)
	w.checkQueue(t, q)
	checkCache(t, o1, cli)
	checkCache(t, o2, cli)

	// Each changed key is leased once: the two observers' announcements
	// collapsed into one pending item.
	for queue, want := range w.expect {
		leases, err := q.client.Lease(t.Context(), queue, queueclient.LeaseOptions{Worker: "t", MaxItems: 10000})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, l := range leases {
			seen[l.Key]++
		}
		if len(leases) != len(want) || len(seen) != len(want) {
			t.Errorf("queue %s leased %d keys (%d distinct), want %d", queue, len(leases), len(seen), len(want))
		}
		stats, err := q.client.Stats(t.Context(), queue)
		if err != nil {
			t.Fatal(err)
		}
		if stats[0].GetCollapsedTotal() == 0 {
			t.Errorf("queue %s collapsed nothing: were both observers announcing?", queue)
		}
	}
}

func TestResync(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, func(c *service.Config) { c.Resync = 300 * time.Millisecond })
	w := setup(t, o, cli, q, "resync")
	// Nothing changes, yet every object comes back, at low priority.
	want := len(w.pods)
	waitFor(t, 30*time.Second, "resync to announce every pod", func() (bool, string) {
		got, err := q.keys(t.Context(), "pods")
		if err != nil {
			return false, err.Error()
		}
		return len(got) == want, fmt.Sprintf("%d of %d", len(got), want)
	})
	item, err := q.client.Inspect(t.Context(), "pods", "resync/p0001")
	if err != nil {
		t.Fatal(err)
	}
	if item.GetPriority() != queuev1.Priority_PRIORITY_LOW {
		t.Errorf("resync announced at %v, want LOW", item.GetPriority())
	}
}

func TestRunRefusesBadRules(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - queue: pods\n    prefix: registry/pods/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.RulesFile = "127.0.0.1:0", "127.0.0.1:0", bad
	err := service.Run(t.Context(), cfg, nil)
	var re *rules.Error
	if !errors.As(err, &re) || re.Line != 3 || !strings.Contains(err.Error(), "bad.yaml:3: prefix") {
		t.Errorf("Run = %v, want the file, line 3 and the reason", err)
	}
	cfg.RulesFile = filepath.Join(dir, "missing.yaml")
	if err := service.Run(t.Context(), cfg, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run with a missing rules file = %v, want ErrNotExist", err)
	}
}

func TestLoadRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		cfg      service.Config
		queues   string
		warnings int
		err      string
	}{
		{"builtin", service.Config{}, "[deployments garbagecollector jobs pods replicasets statefulsets]", 0, ""},
		{"file", service.Config{RulesFile: write("ok.yaml", testRulesYAML)}, "[pods replicasets]", 0, ""},
		{"unknown owner kind", service.Config{RulesFile: write("cron.yaml", "rules:\n  - queue: cronjobs\n    prefix: /registry/jobs/\n    ownerKind: CronJob\n")}, "[cronjobs]", 1, ""},
		{"invalid", service.Config{RulesFile: write("bad.yaml", "rules:\n  - queue: x\n    prefix: /a/\n    color: red\n")}, "", 0, `bad.yaml:4: unknown field "color"`},
		{"in code", service.Config{Rules: testRules}, "[pods replicasets]", 0, ""},
		{"bad in code", service.Config{Rules: []rules.Rule{{Queue: "Q", Prefix: "/a/"}}}, "", 0, "not a DNS label"},
		{"watches the checkpoint", service.Config{Rules: []rules.Rule{{Queue: "q", Prefix: "/baton/"}}}, "", 0, "checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, warnings, err := service.LoadRules(tc.cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("LoadRules = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(rules.Queues(rs)); got != tc.queues {
				t.Errorf("queues %s, want %s", got, tc.queues)
			}
			if len(warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", warnings, tc.warnings)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := service.DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		field string
		mod   func(*service.Config)
	}{
		{"--grpc-addr", func(c *service.Config) { c.GRPCAddr = "" }},
		{"--http-addr", func(c *service.Config) { c.HTTPAddr = "" }},
		{"--etcd-endpoints", func(c *service.Config) { c.EtcdEndpoints = nil }},
		{"--queue-addr", func(c *service.Config) { c.QueueAddr = "" }},
		{"--resync", func(c *service.Config) { c.Resync = -time.Second }},
	} {
		c := service.DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate = %v, want an error naming %s", err, tc.field)
		}
	}
}

// proxy forwards TCP to etcd and can cut the observer off from it.
type tcpProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() { l.Close(); p.cut(true); p.wg.Wait() })
	return p
}

func (p *tcpProxy) addr() string { return p.l.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// cut(true) closes every connection and refuses new ones; cut(false)
// forwards again.
func (p *tcpProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}
