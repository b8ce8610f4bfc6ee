package service_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/services/runtime/trust"
	"github.com/batonrun/baton/services/worker/controllers"
	"github.com/batonrun/baton/test/framework"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// floodKind is kind j of flood declaration i (j < 0: the kind it is for).
func floodKind(i, j int) kinds.Kind {
	if j < 0 {
		return kinds.Kind{Kind: fmt.Sprintf("Flood%02d", i), Resource: fmt.Sprintf("flood%02d", i)}
	}
	return kinds.Kind{Kind: fmt.Sprintf("Flood%02dOwn%02d", i, j), Resource: fmt.Sprintf("flood%02down%02d", i, j)}
}

// floodDeclarations are n declarations, each for a new kind and owning
// kinds.MaxOwns new kinds: n × 33 prefixes no other rule watches, within
// every documented cap, as anyone who may write etcd can publish them.
func floodDeclarations(n int) []kinds.Declaration {
	var out []kinds.Declaration
	for i := range n {
		d := kinds.Declaration{Queue: fmt.Sprintf("flood%02d", i), For: floodKind(i, -1)}
		for j := range kinds.MaxOwns {
			d.Owns = append(d.Owns, floodKind(i, j))
		}
		out = append(out, d)
	}
	return out
}

// publish writes d at its key.
func (s *stack) publish(d kinds.Declaration) {
	s.t.Helper()
	b, err := d.Marshal()
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.cli.Put(s.t.Context(), d.Key(), string(b)); err != nil {
		s.t.Fatal(err)
	}
}

// status is the observer's Status.
func (s *stack) status() *observerv1.StatusResponse {
	s.t.Helper()
	st, err := s.observer.Status(s.t.Context(), &observerv1.StatusRequest{})
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// declaration returns what the observer made of the declaration at key.
func (s *stack) declaration(key string) *observerv1.DeclarationStatus {
	s.t.Helper()
	for _, d := range s.status().GetDeclarations() {
		if d.GetKey() == key {
			return d
		}
	}
	return nil
}

// inForce waits until the observer has every declaration of ds in force.
func (s *stack) inForce(ds ...kinds.Declaration) {
	s.t.Helper()
	waitFor(s.t, converge, fmt.Sprintf("%d declarations in force", len(ds)), func() bool {
		in := map[string]bool{}
		for _, d := range s.status().GetDeclarations() {
			in[d.GetKey()] = d.GetInForceRevision() > 0 && d.GetRefused() == ""
		}
		for _, d := range ds {
			if !in[d.Key()] {
				return false
			}
		}
		return true
	})
}

// put writes an object of kind k named name in default, owned by owners.
func (s *stack) put(k kinds.Kind, name string, owners ...objects.OwnerReference) *objects.ObjectMeta {
	s.t.Helper()
	m := &objects.ObjectMeta{Name: name, Namespace: "default", OwnerReferences: owners}
	if _, err := objects.NewClient(s.cli, nil).Create(s.t.Context(), k.Key("default", name), &objects.Object[map[string]any, map[string]any]{Kind: k.Kind, Metadata: *m}); err != nil {
		s.t.Fatal(err)
	}
	raw, err := objects.NewClient(s.cli, nil).GetDirect(s.t.Context(), k.Key("default", name))
	if err != nil {
		s.t.Fatal(err)
	}
	o, err := objects.Decode[objects.Object[map[string]any, map[string]any]](raw)
	if err != nil {
		s.t.Fatal(err)
	}
	return &o.Metadata
}

// there reports whether etcd holds the object of kind k named name.
func (s *stack) there(k kinds.Kind, name string) bool {
	s.t.Helper()
	resp, err := s.cli.Get(s.t.Context(), k.Key("default", name), clientv3.WithCountOnly())
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.Count == 1
}

// logBytes is a slog handler that counts the bytes a worker logs at INFO
// and above (as a JSON handler writes them), and passes every record on.
type logBytes struct {
	next slog.Handler
	n    *atomic.Int64
}

func (h logBytes) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h logBytes) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		var w countingWriter
		_ = slog.NewJSONHandler(&w, nil).Handle(ctx, r)
		h.n.Add(int64(w))
	}
	return h.next.Handle(ctx, r)
}

func (h logBytes) WithAttrs(as []slog.Attr) slog.Handler {
	return logBytes{next: h.next.WithAttrs(as), n: h.n}
}

func (h logBytes) WithGroup(g string) slog.Handler {
	return logBytes{next: h.next.WithGroup(g), n: h.n}
}

type countingWriter int

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

// queueMetric returns the sum of the samples of metric on the /metrics at
// url, read with client (0 when it has none).
func queueMetric(t testing.TB, client *http.Client, url, metric string) float64 {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	var sum float64
	ready := false // the page is the queue's metrics (a counter never incremented shows no line)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		ready = ready || strings.HasPrefix(line, "baton_ready ")
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	if !ready {
		t.Fatalf("%s shows no baton_ready: not a Baton service's metrics", url)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return sum
}

// TestGarbageCollectorUnderDeclarationFlood: thirty declarations, each for
// a new kind and owning 32 new kinds (990 prefixes, within every
// documented cap), then a declaration of 33 more that passes
// kinds.MaxDeclaredPrefixes, then a legitimate kind. The flood must starve
// nobody: the legitimate kind's orphan is collected and its object with a
// live owner stays; the refused declaration is refused precisely and the
// collector does not follow it (an object whose owner is of its kind is
// left alone); the queue refuses none of the worker's calls and the
// worker's log stays quiet. Once the flood's declarations are deleted,
// nothing the collector wrote for them remains, before a restart of the
// worker or after, and it still collects.
func TestGarbageCollectorUnderDeclarationFlood(t *testing.T) {
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, framework.QueueOptions{BackoffBase: 20 * time.Millisecond, BackoffMax: time.Second})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr})
	s := &stack{t: t, etcd: etcd, cli: etcd.Client, queueAddr: q.Addr, observerAddr: o.Addr, queue: q.Client, observer: o.Client.Raw()}
	var logged atomic.Int64
	log := slog.New(logBytes{next: framework.Logger(t, "worker").Handler(), n: &logged})
	w := s.startWorkerLogged(s.workerConfig(), log)
	ctx := t.Context()

	flood := floodDeclarations(30)
	for _, d := range flood {
		s.publish(d)
	}
	s.inForce(flood...)

	// 990 declared prefixes: 33 more pass the cap, and the whole
	// declaration is refused, naming it.
	ghost := kinds.Kind{Kind: "Ghost", Resource: "ghosts"}
	over := kinds.Declaration{Queue: "ghosts", For: ghost}
	for j := range kinds.MaxOwns {
		over.Owns = append(over.Owns, kinds.Kind{Kind: fmt.Sprintf("Ghost%02d", j), Resource: fmt.Sprintf("ghost%02d", j)})
	}
	s.publish(over)
	waitFor(t, converge, "the declaration past the prefix cap refused", func() bool {
		d := s.declaration(over.Key())
		return d != nil && d.GetRefused() != ""
	})
	if d := s.declaration(over.Key()); d.GetInForceRevision() != 0 || !strings.Contains(d.GetRefused(), "would make 1023 declared prefixes, at most 1000 (kinds.MaxDeclaredPrefixes)") {
		t.Errorf("the declaration past the cap: in force at %d, refused %q", d.GetInForceRevision(), d.GetRefused())
	}

	widget := kinds.Kind{Kind: "Widget", Resource: "widgets"}
	legit := kinds.Declaration{Queue: "widgets", For: widget}
	s.publish(legit)
	s.inForce(legit)
	parent := s.put(widget, "parent")
	s.put(widget, "child", parent.Ref(widget.Kind))
	s.put(widget, "orphan", objects.OwnerReference{Kind: widget.Kind, Name: "gone", UID: objects.NewUID()})
	s.put(widget, "haunted", objects.OwnerReference{Kind: ghost.Kind, Name: "spirit", UID: objects.NewUID()})
	waitFor(t, converge, "the legitimate kind's orphan collected", func() bool { return !s.there(widget, "orphan") })
	if !s.there(widget, "child") {
		t.Error("a widget whose owner lives was deleted")
	}
	// The object owned by a Ghost has been judged (its key failed once,
	// naming the unknown kind) and stays: the refused declaration's kind
	// is none the collector collects.
	waitFor(t, converge, "the haunted widget judged", func() bool {
		it, err := s.queue.Inspect(ctx, kinds.GarbageCollectorQueue, kinds.CollectorKey(widget, "default/haunted"))
		return err == nil && it.GetAttempts() > 0 && strings.Contains(it.GetLastError(), "Ghost")
	})
	if !s.there(widget, "haunted") {
		t.Error("a widget whose owner's kind the observer refused was deleted")
	}

	// The queue refused none of the worker's calls, and the worker holds
	// no queue per kind: one per controller.
	if n := queueMetric(t, http.DefaultClient, "http://"+q.HTTPAddr+"/metrics", "baton_limit_rejected_total"); n != 0 {
		t.Errorf("the queue refused %v of the worker's calls (baton_limit_rejected_total)", n)
	}
	stats, err := s.queue.Stats(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if strings.HasPrefix(st.GetQueue(), kinds.GarbageCollectorQueuePrefix) {
			t.Errorf("a queue of the collector per kind: %s", st.GetQueue())
		}
	}

	// The flood goes: nothing the collector wrote for it remains, and it
	// still collects.
	quiet := logged.Load()
	for _, d := range append(flood, over) {
		if _, err := s.cli.Delete(ctx, d.Key()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, converge, "the observer feeds the collector no flood kind", func() bool {
		for _, r := range s.status().GetRules() {
			if strings.HasPrefix(r.GetPrefix(), kinds.RegistryPrefix+"flood") {
				return false
			}
		}
		return true
	})
	declared := func() []string {
		resp, err := s.cli.Get(ctx, kinds.DeclarationPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range resp.Kvs {
			got = append(got, string(kv.Key))
		}
		slices.Sort(got)
		return got
	}
	want := []string{legit.Key()}
	for _, d := range kinds.BuiltinDeclarations() {
		want = append(want, d.Key())
	}
	slices.Sort(want)
	if got := declared(); !slices.Equal(got, want) {
		t.Errorf("declarations left in etcd: %v, want the worker's and the legitimate one: %v", got, want)
	}
	s.put(widget, "orphan2", objects.OwnerReference{Kind: widget.Kind, Name: "gone", UID: objects.NewUID()})
	waitFor(t, converge, "a later orphan collected", func() bool { return !s.there(widget, "orphan2") })

	// A restarted worker finds nothing of the flood either, and collects.
	w.stop()
	s.startWorkerLogged(s.workerConfig(), log)
	s.put(widget, "orphan3", objects.OwnerReference{Kind: widget.Kind, Name: "gone", UID: objects.NewUID()})
	waitFor(t, converge, "an orphan collected after a restart", func() bool { return !s.there(widget, "orphan3") })
	if got := declared(); !slices.Equal(got, want) {
		t.Errorf("declarations in etcd after a restart: %v, want %v", got, want)
	}

	// Logs are rate-limited per cause: the flood's standing and going
	// cost the log a few lines, not a stream.
	t.Logf("the worker logged %d bytes at INFO and above, %d of them while the flood went", logged.Load(), logged.Load()-quiet)
	if n := logged.Load() - quiet; n > 32<<10 {
		t.Errorf("the worker logged %d bytes at INFO and above while the flood went", n)
	}
	if n := logged.Load(); n > 256<<10 {
		t.Errorf("the worker logged %d bytes at INFO and above in all", n)
	}
}

// TestGarbageCollectorAtTheDeclarationCaps: the caps agree end to end,
// each met at its documented value. Under mutual TLS, so that the worker
// has an identity, the queue bounds waiting Leases per connection and per
// identity at exactly the worker's controllers (six): the worker,
// collector included, opens no more whatever is declared, and none of its
// calls is refused. Declared prefixes reach
// kinds.MaxDeclaredPrefixes exactly (990 of a flood, 10 more of a
// legitimate declaration, whose kinds are collected); one more is refused
// precisely, and an object whose owner is of its kind is left alone.
// Declarations reach kinds.MaxDeclarations exactly; one more is refused
// precisely, and the collector still collects.
func TestGarbageCollectorAtTheDeclarationCaps(t *testing.T) {
	certs := framework.NewCerts(t)
	etcd := framework.StartEtcd(t)
	perConn := strconv.Itoa(len(controllers.Names))
	q := framework.StartQueue(t, framework.QueueOptions{BackoffBase: 20 * time.Millisecond, BackoffMax: time.Second, TLS: certs,
		Args: []string{"--max-waiting-leases-per-conn", perConn, "--max-waiting-leases", perConn}})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, TLS: certs})
	s := &stack{t: t, etcd: etcd, cli: etcd.Client, queueAddr: q.Addr, observerAddr: o.Addr, queue: q.Client, observer: o.Client.Raw()}
	cfg := s.workerConfig()
	cfg.TLS = trust.Config{CertFile: certs.CertFile("worker"), KeyFile: certs.KeyFile("worker"), CAFile: certs.CAFile()}
	s.startWorker(cfg)
	admin := &http.Client{Transport: &http.Transport{TLSClientConfig: certs.Source(t, "admin").ClientConfig("127.0.0.1")}}
	ctx := t.Context()
	s.inForce(kinds.BuiltinDeclarations()...)

	flood := floodDeclarations(30)
	for _, d := range flood {
		s.publish(d)
	}
	s.inForce(flood...)
	// Ten prefixes more: kinds.MaxDeclaredPrefixes exactly.
	tenth := kinds.Declaration{Queue: "tenths", For: kinds.Kind{Kind: "Tenth", Resource: "tenths"}}
	for j := range 9 {
		tenth.Owns = append(tenth.Owns, kinds.Kind{Kind: fmt.Sprintf("Tenth%d", j), Resource: fmt.Sprintf("tenth%d", j)})
	}
	s.publish(tenth)
	s.inForce(tenth)
	owned := tenth.Owns[8]
	s.put(owned, "orphan", objects.OwnerReference{Kind: tenth.For.Kind, Name: "gone", UID: objects.NewUID()})
	waitFor(t, converge, "an orphan of the last kind within the cap collected", func() bool { return !s.there(owned, "orphan") })

	over := kinds.Declaration{Queue: "overs", For: kinds.Kind{Kind: "Over", Resource: "overs"}}
	s.publish(over)
	waitFor(t, converge, "the declaration past the prefix cap refused", func() bool {
		d := s.declaration(over.Key())
		return d != nil && d.GetRefused() != ""
	})
	if d := s.declaration(over.Key()); !strings.Contains(d.GetRefused(), "its 1 new prefixes would make 1001 declared prefixes, at most 1000 (kinds.MaxDeclaredPrefixes)") {
		t.Errorf("the declaration past the prefix cap: %q", d.GetRefused())
	}
	s.put(owned, "haunted", objects.OwnerReference{Kind: over.For.Kind, Name: "spirit", UID: objects.NewUID()})
	waitFor(t, converge, "the object owned by a refused kind judged", func() bool {
		it, err := s.queue.Inspect(ctx, kinds.GarbageCollectorQueue, kinds.CollectorKey(owned, "default/haunted"))
		return err == nil && it.GetAttempts() > 0 && strings.Contains(it.GetLastError(), over.For.Kind)
	})
	if !s.there(owned, "haunted") {
		t.Error("an object whose owner's kind the observer refused was deleted")
	}

	// Declarations that add no prefix, up to kinds.MaxDeclarations.
	inForce := len(kinds.BuiltinDeclarations()) + len(flood) + 1
	var fill []kinds.Declaration
	for i := range kinds.MaxDeclarations - inForce {
		fill = append(fill, kinds.Declaration{Queue: fmt.Sprintf("fill%04d", i), For: tenth.For})
	}
	for _, d := range fill {
		s.publish(d)
	}
	s.inForce(fill...)
	late := kinds.Declaration{Queue: "late", For: tenth.For}
	s.publish(late)
	waitFor(t, converge, "the declaration past the declarations cap refused", func() bool {
		d := s.declaration(late.Key())
		return d != nil && d.GetRefused() != ""
	})
	if d := s.declaration(late.Key()); !strings.Contains(d.GetRefused(), "1000 declarations are in force already, the most the observer executes (kinds.MaxDeclarations)") {
		t.Errorf("the declaration past the declarations cap: %q", d.GetRefused())
	}
	s.put(tenth.For, "orphan", objects.OwnerReference{Kind: tenth.For.Kind, Name: "gone", UID: objects.NewUID()})
	waitFor(t, converge, "an orphan collected at both caps", func() bool { return !s.there(tenth.For, "orphan") })

	if n := queueMetric(t, admin, "https://"+q.HTTPAddr+"/metrics", "baton_limit_rejected_total"); n != 0 {
		t.Errorf("the queue refused %v of the worker's waiting Leases (baton_limit_rejected_total) at limits of %s", n, perConn)
	}
}
