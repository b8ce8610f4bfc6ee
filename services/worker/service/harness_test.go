package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
	"github.com/batonrun/baton/services/worker/service"
	"github.com/batonrun/baton/test/framework"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stack is a real embedded etcd and the real baton-queue and baton-observer
// binaries, run as child processes by test/framework (this module requires
// no other service's module); the workers under test run in this process,
// so tests can wrap their reconcilers (Config.Wrap).
type stack struct {
	t            testing.TB
	etcd         *framework.Etcd
	cli          *clientv3.Client
	queueAddr    string
	observerAddr string
	queue        *queueclient.Client
	observer     observerv1.ObserverServiceClient
}

// waitFor polls cond every 10 ms until it holds, failing the test after d.
var waitFor = framework.WaitFor

// runBackground runs f until the test ends, then cancels it and waits.
func runBackground(t testing.TB, name string, f func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", name, err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			t0 := time.Now()
			cancel()
			defer func() { t.Logf("%s stopped in %v", name, time.Since(t0)) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop", name)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startStack starts etcd, the queue (with test-sized backoff) and the
// observer with the built-in rules of the reference controllers: workers
// read through its cache. (The observer's 1 s progress requests are not
// test-sized, but the test etcd sends the watches progress notifications
// every 100 ms, which advance idle prefixes as often.)
func startStack(t testing.TB) *stack {
	t.Helper()
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, framework.QueueOptions{BackoffBase: 20 * time.Millisecond, BackoffMax: time.Second})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr})
	return &stack{
		t: t, etcd: etcd, cli: etcd.Client,
		queueAddr: q.Addr, observerAddr: o.Addr,
		queue: q.Client, observer: o.Client.Raw(),
	}
}

// workerConfig is a worker of the stack with test-sized timings.
func (s *stack) workerConfig() service.Config {
	cfg := service.DefaultConfig()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.QueueAddr, cfg.ObserverAddr = s.queueAddr, s.observerAddr
	cfg.EtcdEndpoints = s.etcd.Endpoints()
	cfg.LeaseDuration = 2 * time.Second
	cfg.GracePeriod = 2 * time.Second
	return cfg
}

// worker is a worker started in process.
type worker struct {
	httpAddr string
	stop     func()
}

func (s *stack) startWorker(cfg service.Config) *worker {
	s.t.Helper()
	return s.startWorkerLogged(cfg, framework.Logger(s.t, "worker"))
}

// startWorkerLogged is startWorker with the worker's logger.
func (s *stack) startWorkerLogged(cfg service.Config, log *slog.Logger) *worker {
	s.t.Helper()
	addrs := make(chan string, 1)
	cfg.OnListen = func(h net.Addr) { addrs <- h.String() }
	w := &worker{}
	w.stop = runBackground(s.t, "worker", func(ctx context.Context) error { return service.Run(ctx, cfg, log) })
	select {
	case w.httpAddr = <-addrs:
	case <-time.After(30 * time.Second):
		s.t.Fatal("worker did not start")
	}
	return w
}

// metric returns the value of one sample line of the worker's /metrics,
// e.g. `baton_worker_reconcile_total{controller="pods",result="panic"}`.
func (w *worker) metric(t testing.TB, sample string) string {
	t.Helper()
	resp, err := http.Get("http://" + w.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// apply writes an object as batonctl does: uid kept (or new), generation
// bumped when spec changes.
func (s *stack) apply(resource, name string, obj map[string]any) {
	s.t.Helper()
	key := objects.Key(resource, "default", name)
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["name"], meta["namespace"] = name, "default"
	resp, err := s.cli.Get(s.t.Context(), key)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		var old map[string]any
		json.Unmarshal(resp.Kvs[0].Value, &old)
		om := old["metadata"].(map[string]any)
		meta["uid"] = om["uid"]
		gen, _ := om["generation"].(float64)
		if fmt.Sprint(old["spec"]) != fmt.Sprint(obj["spec"]) {
			gen++
		}
		meta["generation"] = gen
		if st, ok := old["status"]; ok {
			obj["status"] = st
		}
	} else {
		meta["uid"], meta["generation"] = objects.NewUID(), 1
	}
	b, _ := json.Marshal(obj)
	if _, err := s.cli.Put(s.t.Context(), key, string(b)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) del(resource, name string) {
	s.t.Helper()
	if _, err := s.cli.Delete(s.t.Context(), objects.Key(resource, "default", name)); err != nil {
		s.t.Fatal(err)
	}
}

// pods returns the pods of one owner from etcd, by name.
func (s *stack) pods(ownerKind, ownerName string) map[string]*objects.Pod {
	s.t.Helper()
	st := objects.NewClient(s.cli, nil)
	items, err := objects.List[objects.Pod](s.t.Context(), st, objects.Prefix("pods", "default"), objects.OwnedBy{Namespace: "default", Kind: ownerKind, Name: ownerName})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]*objects.Pod{}
	for _, it := range items {
		out[it.Object.Metadata.Name] = it.Object
	}
	return out
}

func get[T any](s *stack, resource, name string) *T {
	s.t.Helper()
	v, _, err := objects.Get[T](s.t.Context(), objects.NewClient(s.cli, nil), objects.Key(resource, "default", name))
	if err != nil {
		return nil
	}
	return v
}

func running(pods map[string]*objects.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == objects.PodRunning {
			n++
		}
	}
	return n
}

// podWatch records every pod event from etcd, in order, from now on.
type podWatch struct {
	mu      sync.Mutex
	events  []podEvent
	initial map[string]bool // live pods when the watch began
}

type podEvent struct {
	name    string
	deleted bool
	pod     *objects.Pod // nil when deleted
}

func (s *stack) watchPods() *podWatch {
	s.t.Helper()
	w := &podWatch{initial: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := s.cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix())
	if err != nil {
		s.t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var p objects.Pod
		json.Unmarshal(kv.Value, &p)
		if objects.Live(&p) {
			w.initial[p.Metadata.Name] = true
		}
	}
	ch := s.cli.Watch(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wr := range ch {
			w.mu.Lock()
			for _, ev := range wr.Events {
				name := string(ev.Kv.Key)[strings.LastIndex(string(ev.Kv.Key), "/")+1:]
				if ev.Type == clientv3.EventTypeDelete {
					w.events = append(w.events, podEvent{name: name, deleted: true})
					continue
				}
				var p objects.Pod
				json.Unmarshal(ev.Kv.Value, &p)
				w.events = append(w.events, podEvent{name: name, pod: &p})
			}
			w.mu.Unlock()
		}
	}()
	s.t.Cleanup(func() { cancel(); <-done })
	return w
}

// initialLive returns a copy of the pods live when the watch began.
func (w *podWatch) initialLive() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for k := range w.initial {
		out[k] = true
	}
	return out
}

// snapshot returns the events so far.
func (w *podWatch) snapshot() []podEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]podEvent(nil), w.events...)
}

// inspect returns one key's item in a queue.
func (s *stack) inspect(queue, key string) *queuev1.Item {
	s.t.Helper()
	it, err := s.queue.Inspect(s.t.Context(), queue, key)
	if err != nil {
		s.t.Fatal(err)
	}
	return it
}

// calls records the reconciles of a worker, for Config.Wrap.
type calls struct {
	mu     sync.Mutex
	n      map[string]int // "queue key" → reconciles
	inside map[string]int // "queue key" → reconciles running now, across workers
	// overlaps counts reconciles that began while another of the same key
	// was running.
	overlaps int
}

func newCalls() *calls { return &calls{n: map[string]int{}, inside: map[string]int{}} }

func (c *calls) count(queue, key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[queue+" "+key]
}

// wrap records every reconcile and calls around (if set) instead of the
// reconciler's own Reconcile.
func (c *calls) wrap(around func(ctx context.Context, queue, key string, next func(context.Context) error) error) func(string, manager.Controller) manager.Controller {
	return func(name string, mc manager.Controller) manager.Controller {
		inner := mc.Reconciler
		mc.Reconciler = reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			id := req.Queue + " " + req.Key
			c.mu.Lock()
			c.n[id]++
			if c.inside[id] > 0 {
				c.overlaps++
			}
			c.inside[id]++
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				c.inside[id]--
				c.mu.Unlock()
			}()
			var res reconcile.Result
			next := func(ctx context.Context) error {
				r, err := inner.Reconcile(ctx, req)
				res = r
				return err
			}
			var err error
			if around == nil {
				err = next(ctx)
			} else {
				err = around(ctx, req.Queue, req.Key, next)
			}
			return res, err
		})
		return mc
	}
}
