package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/service"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// manyDeclarations publishes n declarations of queues <tag>0, <tag>1, …,
// each for its own kind and owning kinds.MaxOwns kinds of its own: n ×
// (1 + kinds.MaxOwns) prefixes no other rule watches. It returns their
// keys and the number of prefixes.
func manyDeclarations(t testing.TB, cli *clientv3.Client, tag string, n int) ([]string, int) {
	t.Helper()
	var keys []string
	for i := range n {
		q := fmt.Sprintf("%s%d", tag, i)
		d := kinds.Declaration{Queue: q, For: kinds.Kind{Kind: "K" + q, Resource: q}, Owns: manyOwns(q)}
		publish(t, cli, d)
		keys = append(keys, d.Key())
	}
	return keys, n * (1 + kinds.MaxOwns)
}

// waitPrefixes waits until the observer watches want prefixes, every one
// listed.
func waitPrefixes(t testing.TB, o *observerConn, want int) {
	t.Helper()
	waitFor(t, 120*time.Second, fmt.Sprintf("%d prefixes watched and listed", want), func() (bool, string) {
		st := observerStatus(t, o)
		listed := 0
		for _, p := range st.GetPrefixes() {
			if p.GetListed() {
				listed++
			}
		}
		return len(st.GetPrefixes()) == want && listed == want, fmt.Sprintf("%d prefixes, %d listed", len(st.GetPrefixes()), listed)
	})
}

// goroutines returns the goroutines of the process outside the embedded
// etcd server (whose stacks run through its server packages), and the etcd
// watch streams being served (each has one receive loop).
func goroutines() (observer, watchStreams int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "(*serverWatchStream).recvLoop"):
			watchStreams++
		case strings.Contains(g, "go.etcd.io/etcd/server/"), strings.Contains(g, "go.etcd.io/raft/"):
		default:
			observer++
		}
	}
	return observer, watchStreams
}

// settledGoroutines waits a moment for goroutines that are ending to end,
// and returns goroutines() once two readings agree.
func settledGoroutines(t testing.TB) (observer, watchStreams int) {
	t.Helper()
	o, w := goroutines()
	waitFor(t, 10*time.Second, "the goroutine count to settle", func() (bool, string) {
		time.Sleep(200 * time.Millisecond)
		o2, w2 := goroutines()
		same := o2 == o && w2 == w
		o, w = o2, w2
		return same, fmt.Sprintf("%d goroutines, %d watch streams", o, w)
	})
	return o, w
}

// recorderQueue serves a queue that accepts every Add and keeps nothing,
// so that the queue's own goroutines and memory stay out of a measure.
func recorderQueue(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(gs, &addRecorder{arrived: map[string]time.Time{}})
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	return l.Addr().String()
}

// BenchmarkCostPerPrefix measures what a watched prefix costs the
// observer: declarations of 30 controllers that each own kinds.MaxOwns
// kinds of their own (990 prefixes, as an etcd writer may publish them),
// until every prefix is listed. goroutines/prefix counts the goroutines
// outside the embedded etcd server; bytes/prefix is the live heap and
// goroutine stacks of the whole process (observer and the etcd it
// watches), after a garbage collection.
func BenchmarkCostPerPrefix(b *testing.B) {
	srv, cli := etcdWithClient(b)
	o := startObserver(b, srv.Endpoints(), recorderQueue(b), nil)
	settle(b, o, cli)
	var goroutinesPer, bytesPer float64
	for i := range b.N {
		base := len(observerStatus(b, o).GetPrefixes())
		g0, _ := settledGoroutines(b)
		m0 := liveBytes()
		keys, n := manyDeclarations(b, cli, fmt.Sprintf("c%dq", i), 30)
		waitPrefixes(b, o, base+n)
		g1, _ := settledGoroutines(b)
		m1 := liveBytes()
		goroutinesPer += float64(g1-g0) / float64(n)
		bytesPer += float64(int64(m1)-int64(m0)) / float64(n)
		for _, k := range keys {
			del(b, cli, k)
		}
		waitPrefixes(b, o, base)
	}
	b.ReportMetric(goroutinesPer/float64(b.N), "goroutines/prefix")
	b.ReportMetric(bytesPer/float64(b.N), "bytes/prefix")
}

// liveBytes is the heap in use and the goroutine stacks after a garbage
// collection.
func liveBytes() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// Prefixes declared by the hundred cost the observer a goroutine each (its
// informer), not a watch stream each: every watch shares one etcd watch
// stream.
func TestWatchedPrefixesShareAStream(t *testing.T) {
	srv, cli := etcdWithClient(t)
	o := startObserver(t, srv.Endpoints(), recorderQueue(t), nil)
	settle(t, o, cli)
	base := len(observerStatus(t, o).GetPrefixes())
	g0, w0 := settledGoroutines(t)
	keys, n := manyDeclarations(t, cli, "share", 6)
	waitPrefixes(t, o, base+n)
	g1, w1 := settledGoroutines(t)
	t.Logf("%d prefixes: %d → %d goroutines, %d → %d etcd watch streams", n, g0, g1, w0, w1)
	if per := float64(g1-g0) / float64(n); per > 1.5 {
		t.Errorf("%.2f goroutines per declared prefix, want at most 1.5 (the informer's own)", per)
	}
	if w1 > 2 {
		t.Errorf("%d etcd watch streams for %d prefixes, want at most 2", w1, base+n)
	}
	if got := scrape(t, o.httpAddr, "baton_observer_watch_streams_total")[""]; got != 1 {
		t.Errorf("baton_observer_watch_streams_total = %v, want 1", got)
	}
	for _, k := range keys {
		del(t, cli, k)
	}
	waitPrefixes(t, o, base)
}

// Declarations past kinds.MaxDeclaredPrefixes are refused, each logged
// once however often the declarations change, and counted by reason.
func TestDeclarationLimitsAreLoggedOnceAndCounted(t *testing.T) {
	srv, cli := etcdWithClient(t)
	logs := newLogCapture(t)
	o := startObserverLog(t, srv.Endpoints(), recorderQueue(t), nil, logs.logger())
	settle(t, o, cli)
	base := len(observerStatus(t, o).GetPrefixes())
	per := 1 + kinds.MaxOwns
	fit := kinds.MaxDeclaredPrefixes / per
	keys, _ := manyDeclarations(t, cli, "lim", fit+1)
	waitPrefixes(t, o, base+fit*per)
	over := keys[fit]
	// Other declarations come and go meanwhile, a refused one among them.
	for i := range 20 {
		put(t, cli, "/baton/rules/junk", fmt.Sprintf("{%d", i))
		publish(t, cli, kinds.Declaration{Queue: "lim0", For: kinds.Kind{Kind: "Klim0", Resource: "lim0"}, Owns: manyOwns("lim0")})
	}
	waitFor(t, 30*time.Second, "the refusals counted by reason", func() (bool, string) {
		got := scrape(t, o.httpAddr, "baton_observer_declarations_refused_by_reason")
		return got[`{reason="too_many_prefixes"}`] == 1 && got[`{reason="invalid"}`] == 1, fmt.Sprint(got)
	})
	settle(t, o, cli)
	if got := logs.find(slog.LevelWarn, "declaration refused", map[string]string{"key": over, "reason": "*"}); len(got) != 1 ||
		!strings.Contains(got[0].Attrs["reason"], "kinds.MaxDeclaredPrefixes") {
		t.Errorf("%s: WARN lines %v, want one naming kinds.MaxDeclaredPrefixes", over, got)
	}
	if got := logs.find(slog.LevelWarn, "declaration refused", map[string]string{"key": "/baton/rules/junk"}); len(got) != 1 {
		t.Errorf("/baton/rules/junk, refused 20 times for the same reason: %d WARN lines, want 1", len(got))
	}
	if got := len(observerStatus(t, o).GetPrefixes()); got != base+fit*per {
		t.Errorf("%d prefixes watched, want %d", got, base+fit*per)
	}
}

// manyOwns is what manyDeclarations has queue q own.
func manyOwns(q string) []kinds.Kind {
	var out []kinds.Kind
	for j := range kinds.MaxOwns {
		out = append(out, kinds.Kind{Kind: fmt.Sprintf("K%sO%d", q, j), Resource: fmt.Sprintf("%s-o%d", q, j)})
	}
	return out
}

// The known-key record of hundreds of prefixes is a few etcd values, not
// one per prefix; once it is stored and nothing changes, the observer
// writes nothing more to etcd.
func TestRecordOfManyPrefixesIsCheap(t *testing.T) {
	srv, cli := etcdWithClient(t)
	o := startObserver(t, srv.Endpoints(), recorderQueue(t), fastRecord)
	settle(t, o, cli)
	base := len(observerStatus(t, o).GetPrefixes())
	_, n := manyDeclarations(t, cli, "rec", 6)
	waitPrefixes(t, o, base+n)
	waitFor(t, 30*time.Second, "a record of every prefix", func() (bool, string) {
		_, covered, err := checkpoint.NewEtcd(cli).Covers(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return len(covered) == base-1+n, fmt.Sprintf("%d prefixes recorded", len(covered))
	})
	settle(t, o, cli)
	resp, err := cli.Get(t.Context(), service.RecordKey+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 4 {
		t.Errorf("the record of %d prefixes is %d etcd values, want a few", n+2, len(resp.Kvs))
	}
	// Idle: etcd's revision stays where it is for two seconds.
	head := resp.Header.Revision
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if now := headRevision(t, cli); now != head {
			t.Fatalf("etcd's revision moved from %d to %d while nothing changed", head, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// storedCheckpoint returns the checkpoint stored in etcd (0 if none).
func storedCheckpoint(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), service.CheckpointKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	c, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Declarations come and go without pause, each with a prefix of its own,
// while records are rate-limited (an hour apart): the checkpoint still
// follows the changes delivered, as a prefix not yet listed, or not yet in
// the stored record, does not hold it back.
func TestCheckpointAdvancesWhileDeclarationsChurn(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, func(c *service.Config) { c.RecordInterval = time.Hour })
	for i := range 3 {
		put(t, cli, fmt.Sprintf("/registry/pods/churn/p%d", i), podValue("churn", fmt.Sprintf("p%d", i), "", ""))
	}
	settle(t, o, cli)
	waitRecord(t, cli, lastChange(t, cli))

	ctx, stop := context.WithCancel(t.Context())
	churned := make(chan int, 1)
	go func() {
		i := 0
		defer func() { churned <- i }()
		for ; ctx.Err() == nil; i++ {
			// Each with an object: its first list finds a key the stored
			// record lacks.
			d := kinds.Declaration{Queue: fmt.Sprintf("churn%d", i), For: kinds.Kind{Kind: fmt.Sprintf("Churn%d", i), Resource: fmt.Sprintf("churn%d", i)}}
			if _, err := cli.Put(ctx, d.For.Key("ns", "x"), objectValue(d.For.Kind, "ns", "x", "", "")); err != nil {
				return
			}
			b, _ := d.Marshal()
			if _, err := cli.Put(ctx, d.Key(), string(b)); err != nil {
				return
			}
			if i >= 3 {
				if _, err := cli.Delete(ctx, fmt.Sprintf("/baton/rules/churn%d", i-3)); err != nil {
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for i := range 3 {
		// A change of a known pod: the stored record still holds (a new
		// pod would wait for the next record, an hour away).
		rev := put(t, cli, fmt.Sprintf("/registry/pods/churn/p%d", i), podValue("churn", fmt.Sprintf("p%d", i), "", "changed"))
		waitFor(t, 20*time.Second, fmt.Sprintf("the checkpoint to reach the pod put at %d while declarations churn", rev), func() (bool, string) {
			c := storedCheckpoint(t, cli)
			return c >= rev, fmt.Sprintf("checkpoint %d", c)
		})
	}
	stop()
	if n := <-churned; n < 10 {
		t.Errorf("only %d declarations churned", n)
	}
}

// Declarations that come and go leave nothing behind: once a queue is in
// no rule and its outbox is empty, the outbox and its drainer go too, so
// queues named by declarations long deleted cost nothing.
func TestDeletedDeclarationsLeaveNothing(t *testing.T) {
	srv, cli := etcdWithClient(t)
	o := startObserver(t, srv.Endpoints(), recorderQueue(t), nil)
	settle(t, o, cli)
	base := len(observerStatus(t, o).GetPrefixes())
	outboxes := len(observerStatus(t, o).GetOutboxes())
	g0, _ := settledGoroutines(t)
	for round := range 3 {
		var keys []string
		for i := range 20 {
			q := fmt.Sprintf("gone%d-%d", round, i)
			d := kinds.Declaration{Queue: q, For: kinds.Kind{Kind: fmt.Sprintf("Gone%dx%d", round, i), Resource: q}}
			put(t, cli, d.For.Key("ns", "x"), objectValue(d.For.Kind, "ns", "x", "", ""))
			publish(t, cli, d)
			keys = append(keys, d.Key())
		}
		waitPrefixes(t, o, base+20)
		for _, k := range keys {
			del(t, cli, k)
		}
		waitPrefixes(t, o, base)
	}
	waitFor(t, 30*time.Second, "the outboxes of the deleted declarations' queues to go", func() (bool, string) {
		n := len(observerStatus(t, o).GetOutboxes())
		return n == outboxes, fmt.Sprintf("%d outboxes, %d before", n, outboxes)
	})
	if g1, _ := settledGoroutines(t); g1 > g0+5 {
		t.Errorf("%d goroutines after 60 declarations came and went, %d before", g1, g0)
	}
}
