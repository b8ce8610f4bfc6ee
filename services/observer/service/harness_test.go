package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
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
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The tests watch pods and replicasets with rules that feed two queues:
// pods (each pod's own key) and replicasets (each replicaset's own key and
// the owner key of each pod owned by a ReplicaSet).
var testRules = []rules.Rule{
	{Queue: "pods", Prefix: "/registry/pods/"},
	{Queue: "replicasets", Prefix: "/registry/pods/", OwnerKind: "ReplicaSet"},
	{Queue: "replicasets", Prefix: "/registry/replicasets/"},
}

const testRulesYAML = `rules:
  - queue: pods
    prefix: /registry/pods/
  - queue: replicasets
    prefix: /registry/pods/
    ownerKind: ReplicaSet
  - queue: replicasets
    prefix: /registry/replicasets/
`

var testQueues = []string{"pods", "replicasets"}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newEtcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// queueProc is a real baton-queue process (test/framework): Stop and
// Start keep its address and data dir.
type queueProc struct {
	*framework.Queue
	addr   string
	client *queueclient.Client
}

func startQueue(t testing.TB) *queueProc {
	t.Helper()
	fq := framework.StartQueue(t, framework.QueueOptions{})
	return &queueProc{Queue: fq, addr: fq.Addr, client: fq.Client}
}

// keys returns every key of queue, in any state.
func (q *queueProc) keys(ctx context.Context, queue string) (map[string]bool, error) {
	items, err := q.client.List(ctx, queue, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 10000)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, it := range items {
		out[it.GetKey()] = true
	}
	return out, nil
}

// drain leases and acknowledges every key of the test queues until they are
// empty.
func (q *queueProc) drain(t testing.TB) {
	t.Helper()
	q.drainQueues(t, testQueues...)
}

// drainQueues is drain for the named queues.
func (q *queueProc) drainQueues(t testing.TB, queues ...string) {
	t.Helper()
	ctx := t.Context()
	for _, name := range queues {
		waitFor(t, 30*time.Second, "queue "+name+" to drain", func() (bool, string) {
			leases, err := q.client.Lease(ctx, name, queueclient.LeaseOptions{Worker: "test", MaxItems: 10000})
			if err != nil {
				return false, err.Error()
			}
			acks := make([]queueclient.Ack, len(leases))
			for i, l := range leases {
				acks[i] = queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()}
			}
			if _, err := q.client.Ack(ctx, name, acks); err != nil {
				return false, err.Error()
			}
			keys, err := q.keys(ctx, name)
			if err != nil {
				if strings.Contains(err.Error(), "NotFound") {
					return true, ""
				}
				return false, err.Error()
			}
			return len(keys) == 0, fmt.Sprintf("%d keys left", len(keys))
		})
	}
}

// observerConn is a running observer (in the process or a child process).
type observerConn struct {
	grpcAddr, httpAddr string
	rpc                observerv1.ObserverServiceClient
	conn               *grpc.ClientConn
	stop               func()              // stops it (in-process) or kills it (child)
	proc               *framework.Observer // child only
}

func dialObserver(t testing.TB, addr string) (*grpc.ClientConn, observerv1.ObserverServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, observerv1.NewObserverServiceClient(conn)
}

// startObserver runs service.Run in the test process.
func startObserver(t testing.TB, endpoints []string, queueAddr string, mod func(*service.Config)) *observerConn {
	t.Helper()
	return startObserverLog(t, endpoints, queueAddr, mod, nil)
}

// startObserverLog is startObserver with a logger (nil discards).
func startObserverLog(t testing.TB, endpoints []string, queueAddr string, mod func(*service.Config), log *slog.Logger) *observerConn {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.EtcdEndpoints, cfg.QueueAddr = endpoints, queueAddr
	cfg.Rules = testRules
	cfg.ProgressInterval = 100 * time.Millisecond
	cfg.GracePeriod = time.Second
	if mod != nil {
		mod(&cfg)
	}
	type addrs struct{ g, h string }
	listening := make(chan addrs, 1)
	cfg.OnListen = func(g, h net.Addr) { listening <- addrs{g.String(), h.String()} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, cfg, log) }()
	o := &observerConn{}
	select {
	case a := <-listening:
		o.grpcAddr, o.httpAddr = a.g, a.h
	case err := <-done:
		cancel()
		t.Fatalf("observer: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("observer did not start")
	}
	var once sync.Once
	o.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("observer: %v", err)
			}
		})
	}
	t.Cleanup(o.stop)
	o.conn, o.rpc = dialObserver(t, o.grpcAddr)
	return o
}

// startObserverProcess runs the baton-observer binary (test/framework)
// with the test rules and waits until it is ready; proc.Kill and
// proc.Start restart it on the same ports.
func startObserverProcess(t testing.TB, endpoints []string, queueAddr string) *observerConn {
	t.Helper()
	fo := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: endpoints, QueueAddr: queueAddr, Rules: testRulesYAML})
	o := &observerConn{grpcAddr: fo.Addr, httpAddr: fo.HTTPAddr, proc: fo, stop: fo.Kill}
	o.conn, o.rpc = dialObserver(t, fo.Addr)
	return o
}

func probeReady(ctx context.Context, httpAddr string) error {
	req, err := newRequest(ctx, "http://"+httpAddr+"/readyz")
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return errors.New(strings.TrimSpace(string(b)))
	}
	return nil
}

// settle waits until the observer has seen etcd's current revision on every
// prefix and its outboxes are empty.
func settle(t testing.TB, o *observerConn, cli *clientv3.Client) {
	t.Helper()
	ctx := t.Context()
	resp, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	head := resp.Header.Revision
	waitFor(t, 60*time.Second, fmt.Sprintf("observer to reach revision %d with empty outboxes", head), func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := o.rpc.Status(cctx, &observerv1.StatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		// An observer just started may not watch its prefixes yet: no
		// prefix is not "every prefix at head", or this would pass before
		// the first lists announce anything. And a prefix's observed
		// revision reaches the first list's before the replay of the
		// history since the checkpoint has announced its changes: only a
		// listed prefix has announced everything up to it.
		if len(st.GetPrefixes()) == 0 {
			return false, "no prefix watched yet"
		}
		for _, p := range st.GetPrefixes() {
			if !p.GetListed() || p.GetObservedRevision() < head {
				return false, fmt.Sprintf("%s at %d, listed %v", p.GetPrefix(), p.GetObservedRevision(), p.GetListed())
			}
		}
		return st.GetOutboxSize() == 0, fmt.Sprintf("outbox %d %v", st.GetOutboxSize(), st.GetOutboxes())
	})
}

// checkCache compares the observer's cache with etcd under every watched
// prefix: same keys, values and mod revisions.
func checkCache(t testing.TB, o *observerConn, cli *clientv3.Client) {
	t.Helper()
	ctx := t.Context()
	for _, prefix := range rules.Prefixes(testRules) {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, kv := range resp.Kvs {
			want[string(kv.Key)] = fmt.Sprintf("%d:%s", kv.ModRevision, kv.Value)
		}
		got := map[string]string{}
		token := ""
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			page, err := o.rpc.List(cctx, &observerv1.ListRequest{Prefix: prefix, PageSize: 1000, PageToken: token, MinRevision: resp.Header.Revision})
			cancel()
			if err != nil {
				t.Fatalf("List %s: %v", prefix, err)
			}
			for _, it := range page.GetItems() {
				got[it.GetKey()] = fmt.Sprintf("%d:%s", it.GetModRevision(), it.GetValue())
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
		}
		if !maps.Equal(got, want) {
			var diffs []string
			for k, v := range want {
				if got[k] != v {
					diffs = append(diffs, fmt.Sprintf("%s: cache %q, etcd %q", k, got[k], v))
				}
			}
			for k, v := range got {
				if _, ok := want[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s: cache %q, not in etcd", k, v))
				}
			}
			sort.Strings(diffs)
			t.Fatalf("cache differs from etcd under %s (%d keys vs %d):\n%s", prefix, len(got), len(want), strings.Join(diffs[:min(20, len(diffs))], "\n"))
		}
	}
}

// podValue is a pod owned by the ReplicaSet rs (none if rs is empty).
func podValue(ns, name, rs, salt string) string {
	m := map[string]any{"name": name, "namespace": ns, "uid": "uid-" + ns + "-" + name, "labels": map[string]string{"salt": salt}}
	if rs != "" {
		m["ownerReferences"] = []map[string]string{{"kind": "ReplicaSet", "name": rs, "uid": "uid-" + ns + "-" + rs}}
	}
	b, _ := json.Marshal(map[string]any{"kind": "Pod", "metadata": m, "status": map[string]string{"phase": "Pending"}})
	return string(b)
}

// world tracks the pods and replicasets a test wrote and the queue keys
// their changes must produce.
type world struct {
	ns     string
	pods   map[string]string // name → owning replicaset ("" none), for live pods
	rss    map[string]bool
	expect map[string]map[string]bool // queue → keys
	rng    *rand.Rand
	n      int
}

func newWorld(ns string, seed uint64) *world {
	return &world{ns: ns, pods: map[string]string{}, rss: map[string]bool{}, rng: rand.New(rand.NewPCG(seed, 1)),
		expect: map[string]map[string]bool{"pods": {}, "replicasets": {}}}
}

func (w *world) resetExpect() { w.expect = map[string]map[string]bool{"pods": {}, "replicasets": {}} }

// op is one change to make to etcd.
type op struct {
	key, value string // value "" deletes
	expect     map[string][]string
}

// populate returns ops creating n pods spread over 5 replicasets (and the
// replicasets).
func (w *world) populate(n int) []op {
	var ops []op
	for i := range 5 {
		rs := fmt.Sprintf("rs%d", i)
		w.rss[rs] = true
		ops = append(ops, op{key: "/registry/replicasets/" + w.ns + "/" + rs, value: `{"kind":"ReplicaSet","metadata":{"name":"` + rs + `","namespace":"` + w.ns + `"}}`,
			expect: map[string][]string{"replicasets": {w.ns + "/" + rs}}})
	}
	for range n {
		ops = append(ops, w.create())
	}
	return ops
}

func (w *world) create() op {
	w.n++
	name := fmt.Sprintf("p%04d", w.n)
	rs := fmt.Sprintf("rs%d", w.rng.IntN(5))
	w.pods[name] = rs
	return op{key: "/registry/pods/" + w.ns + "/" + name, value: podValue(w.ns, name, rs, "0"),
		expect: map[string][]string{"pods": {w.ns + "/" + name}, "replicasets": {w.ns + "/" + rs}}}
}

// churn returns n random changes, each to a different pod: deletes,
// updates (some moving the pod to another replicaset) and creates. Each key
// is touched once, so after a drained queue its presence proves the change
// was announced.
func (w *world) churn(n int) []op {
	names := slices.Sorted(maps.Keys(w.pods))
	w.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	var ops []op
	for i := 0; i < n; i++ {
		if i >= len(names) || w.rng.IntN(4) == 0 {
			ops = append(ops, w.create())
			continue
		}
		name := names[i]
		oldRS := w.pods[name]
		key := "/registry/pods/" + w.ns + "/" + name
		switch w.rng.IntN(3) {
		case 0:
			delete(w.pods, name)
			ops = append(ops, op{key: key, expect: map[string][]string{"pods": {w.ns + "/" + name}, "replicasets": {w.ns + "/" + oldRS}}})
		case 1:
			ops = append(ops, op{key: key, value: podValue(w.ns, name, oldRS, fmt.Sprint(i)),
				expect: map[string][]string{"pods": {w.ns + "/" + name}, "replicasets": {w.ns + "/" + oldRS}}})
		default:
			// Adoption by another set: both the old and the new owner hear.
			newRS := fmt.Sprintf("rs%d", (w.rng.IntN(4)+1+int(oldRS[2]-'0'))%5)
			w.pods[name] = newRS
			ops = append(ops, op{key: key, value: podValue(w.ns, name, newRS, fmt.Sprint(i)),
				expect: map[string][]string{"pods": {w.ns + "/" + name}, "replicasets": {w.ns + "/" + oldRS, w.ns + "/" + newRS}}})
		}
	}
	return ops
}

// apply makes op in etcd, retrying while etcd is unavailable; it records
// the keys the change must announce.
func (w *world) apply(t testing.TB, cli *clientv3.Client, o op) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		var err error
		if o.value == "" {
			_, err = cli.Delete(ctx, o.key)
		} else {
			_, err = cli.Put(ctx, o.key, o.value)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || t.Context().Err() != nil {
			t.Fatalf("write %s: %v", o.key, err)
		}
		time.Sleep(20 * time.Millisecond) // etcd is down: poll until it is back
	}
	for q, ks := range o.expect {
		for _, k := range ks {
			w.expect[q][k] = true
		}
	}
}

func (w *world) applyAll(t testing.TB, cli *clientv3.Client, ops []op) {
	t.Helper()
	for _, o := range ops {
		w.apply(t, cli, o)
	}
}

// checkQueue waits until every expected key is in its queue (which was
// drained before the changes were made).
func (w *world) checkQueue(t testing.TB, q *queueProc) {
	t.Helper()
	for queue, want := range w.expect {
		waitFor(t, 60*time.Second, fmt.Sprintf("queue %s to hold the %d changed keys", queue, len(want)), func() (bool, string) {
			got, err := q.keys(t.Context(), queue)
			if err != nil {
				return false, err.Error()
			}
			var missing []string
			for k := range want {
				if !got[k] {
					missing = append(missing, k)
				}
			}
			sort.Strings(missing)
			return len(missing) == 0, fmt.Sprintf("missing %d: %v", len(missing), missing[:min(10, len(missing))])
		})
	}
}

// signal sends sig to an observer process (SIGSTOP and SIGCONT freeze it).
func signal(t testing.TB, p *framework.Observer, sig syscall.Signal) {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// etcdWithClient starts etcd (startEtcd) and a client for the test.
func etcdWithClient(t testing.TB) (*framework.Etcd, *clientv3.Client) {
	t.Helper()
	srv := startEtcd(t)
	return srv, srv.Client
}

// startEtcd starts the etcd of the test: embedded in the test process by
// default, or, when BATON_TEST_ETCD_BIN names an etcd binary, that binary
// as a child process. scripts/etcd-compat.sh uses the second to run these
// tests against the oldest and newest etcd releases Baton supports, which
// cannot be embedded beside the one go.mod requires.
func startEtcd(t testing.TB) *framework.Etcd {
	t.Helper()
	if bin := os.Getenv("BATON_TEST_ETCD_BIN"); bin != "" {
		return framework.StartEtcdProcess(t, bin)
	}
	return framework.StartEtcd(t)
}

// TestMain removes the binaries test/framework built.
func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }
