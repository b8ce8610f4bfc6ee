package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// binary is the baton-queue built once for this package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-queue-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "baton-queue")
	// Not under -race: the crash test measures the service, and a race
	// build of the server would slow every restart several times over.
	out, err := exec.Command("go", "build", "-o", binary, "./cmd/baton-queue").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/baton-queue: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a baton-queue process on fixed loopback ports and one data
// directory, restarted in place so clients reconnect to the same address.
type proc struct {
	t                  *testing.T
	dir, logDir        string
	grpcAddr, httpAddr string
	args               []string
	// gid, if set, is the group the process runs as (its uid stays the
	// test's): the partition test tells the members' sockets apart by it.
	gid uint32
	// bin, if set, is the baton-queue binary to run instead of this
	// build's (the upgrade test runs an earlier release's).
	bin     string
	n       int // starts so far
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// handedOut holds every address freePort has returned in this process.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// freePort returns a loopback address that was free a moment ago, for a
// baton-queue process to listen on, and never one it returned before: the
// kernel may hand a just-closed port to the next bind, and two members of
// one cluster given the same port made a replicated test fail with
// "address already in use".
func freePort(t *testing.T) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		handedOut.Lock()
		taken := handedOut.addrs[addr]
		handedOut.addrs[addr] = true
		handedOut.Unlock()
		if !taken {
			return addr
		}
	}
}

// The kernel hands a just-closed port out again within a few hundred
// binds; freePort must not, or two processes of one test collide.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[string]int{}
	for i := range 500 {
		addr := freePort(t)
		if j, ok := seen[addr]; ok {
			t.Fatalf("freePort returned %s on calls %d and %d", addr, j, i)
		}
		seen[addr] = i
	}
}

func newProc(t *testing.T, args ...string) *proc {
	p := &proc{t: t, dir: t.TempDir(), logDir: t.TempDir(), grpcAddr: freePort(t), httpAddr: freePort(t), args: args}
	t.Cleanup(func() {
		if p.cmd != nil && p.running() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			p.dumpLog()
		}
	})
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// start launches the process; it does not wait for it to serve.
func (p *proc) start() {
	p.t.Helper()
	p.n++
	logf, err := os.Create(filepath.Join(p.logDir, fmt.Sprintf("run-%03d.log", p.n)))
	if err != nil {
		p.t.Fatal(err)
	}
	args := append([]string{"--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr, "--data-dir", p.dir, "--log-level", "warn"}, p.args...)
	bin := binary
	if p.bin != "" {
		bin = p.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if p.gid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(os.Getuid()), Gid: p.gid, NoSetGroups: true}}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatalf("start baton-queue: %v", err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
}

// signal sends sig and waits up to limit for the process to exit.
func (p *proc) signal(sig os.Signal, limit time.Duration) (time.Duration, error) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.exited:
		return time.Since(start), p.waitErr
	case <-time.After(limit):
		p.t.Fatalf("baton-queue did not exit within %v of %v", limit, sig)
		return 0, nil
	}
}

// dumpLog shows the tail of the last runs' output, for a failing test.
func (p *proc) dumpLog() {
	for n := max(1, p.n-2); n <= p.n; n++ {
		b, err := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("run-%03d.log", n)))
		if err != nil {
			continue
		}
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		p.t.Logf("baton-queue run %d output:\n%s", n, b)
	}
}

// dial connects with a short reconnect backoff: the default grows to two
// minutes, longer than a restart.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitServing polls grpc.health.v1 until the queue answers SERVING, and
// fails the test if the process exits first.
func (p *proc) waitServing(ctx context.Context, conn *grpc.ClientConn) time.Duration {
	p.t.Helper()
	start := time.Now()
	hc := healthpb.NewHealthClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: "baton.queue.v1.QueueService"}, grpc.WaitForReady(true))
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return time.Since(start)
		}
		if !p.running() {
			p.t.Fatalf("baton-queue exited while starting: %v", p.waitErr)
		}
		if ctx.Err() != nil {
			p.t.Fatalf("baton-queue not serving after %v: %v %v", time.Since(start), r, err)
		}
	}
}

// gate lets the crash loop stop new calls and wait for the ones in flight,
// so it checks a quiet queue. Calls in flight when the process is killed
// finish against the restarted one (the client retries Unavailable).
type gate struct {
	mu       sync.Mutex
	cond     *sync.Cond
	closed   bool
	inflight int
}

func newGate() *gate {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) enter() {
	g.mu.Lock()
	for g.closed {
		g.cond.Wait()
	}
	g.inflight++
	g.mu.Unlock()
}

func (g *gate) exit() {
	g.mu.Lock()
	g.inflight--
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	g.closed = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) waitIdle() {
	g.mu.Lock()
	for g.inflight > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// ledger is what the test knows about each key.
type ledger struct {
	mu        sync.Mutex
	added     map[string]bool // Add returned OK
	done      map[string]bool // a success ack answered OK
	uncertain map[string]bool // a success ack failed in transit: it may or may not have landed
	lost      atomic.Int64    // stale tokens answered LEASE_LOST, as they must
	history   map[string][]string
}

// note records an event of key k, shown if the key goes missing; the
// caller holds l.mu.
func (l *ledger) note(k, format string, args ...any) {
	l.history[k] = append(l.history[k], fmt.Sprintf(format, args...))
}

// TestCrashRestart SIGKILLs a real baton-queue at random moments under
// concurrent Adds and Lease/Ack workers (mostly success, some failures and
// requeues; two failures park a key), restarts it, and checks after every
// restart that each key whose Add returned OK and that no success ack took
// away is still stored, that tokens from before the crash are LEASE_LOST, and
// at the end that every added key was worked to success.
func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	const (
		queue    = "crash"
		restarts = 22
		adders   = 6
		workers  = 4
	)
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	// Failures retry after 1-20 ms, so they churn through the test; a key
	// parks after two, and the final drain revives parked keys with an Add.
	p := newProc(t, "--backoff-base", "1ms", "--backoff-max", "20ms", "--grace-period", "1s", "--max-attempts", "2")
	p.start()
	conn := dial(t, p.grpcAddr)
	p.waitServing(ctx, conn)

	// Adds and Leases retry Unavailable until they land; an Ack is tried
	// once, so the test knows when one may or may not have landed.
	retrying := queueclient.New(conn, queueclient.WithBackoff(queueclient.Backoff{Initial: 5 * time.Millisecond, Max: 100 * time.Millisecond}))
	once := queueclient.New(conn, queueclient.WithBackoff(queueclient.Backoff{Attempts: 1}))

	var (
		g             = newGate()
		gen           atomic.Int64 // generation of the process; bumped after each kill, before the restart
		stop          atomic.Bool
		l             = ledger{added: map[string]bool{}, done: map[string]bool{}, uncertain: map[string]bool{}, history: map[string][]string{}}
		addWG, workWG sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}

	for a := range adders {
		addWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(a), 1))
			for seq := 0; !stop.Load() && ctx.Err() == nil; {
				keys := make([]string, 1+rng.IntN(12))
				for i := range keys {
					keys[i] = fmt.Sprintf("ns-%d/key-%06d", a, seq)
					seq++
				}
				g.enter()
				res, err := retrying.Add(ctx, queue, keys, queueclient.AddOptions{})
				g.exit()
				if err != nil {
					if ctx.Err() == nil {
						fail("add: %v", err)
					}
					return
				}
				if res.Queued+res.Collapsed != len(keys) {
					fail("add of %d keys answered %+v", len(keys), res)
				}
				l.mu.Lock()
				for _, k := range keys {
					l.added[k] = true
					l.note(k, "add ok (gen %d)", gen.Load())
				}
				l.mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // pace: the ledger is checked under -race
			}
		})
	}

	work := func(w int, drain *atomic.Bool) {
		rng := rand.New(rand.NewPCG(uint64(w), 2))
		for ctx.Err() == nil && !(drain.Load()) {
			g.enter()
			g0 := gen.Load()
			leases, err := retrying.Lease(ctx, queue, queueclient.LeaseOptions{Worker: fmt.Sprintf("w%d", w), MaxItems: 1 + rng.IntN(30), Duration: time.Minute, Wait: 200 * time.Millisecond})
			g1 := gen.Load()
			g.exit()
			if err != nil {
				if ctx.Err() == nil {
					fail("lease: %v", err)
				}
				return
			}
			if len(leases) == 0 {
				continue
			}
			if rng.IntN(4) == 0 {
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // a slow reconcile, to be caught by a crash
			}
			acks := make([]queueclient.Ack, len(leases))
			for i, le := range leases {
				acks[i] = queueclient.Ack{Key: le.Key, Token: le.Token, Outcome: queueclient.Success()}
				switch rng.IntN(10) {
				case 0:
					acks[i].Outcome = queueclient.Failure("simulated failure")
				case 1:
					acks[i].Outcome = queueclient.RequeueAfter(time.Duration(rng.IntN(5)) * time.Millisecond)
				}
			}
			g.enter()
			ga := gen.Load()
			res, err := once.Ack(ctx, queue, acks)
			gaEnd := gen.Load()
			g.exit()
			l.mu.Lock()
			if err != nil {
				// The process died under this call: the acks may or may
				// not have been stored before it did.
				for _, a := range acks {
					if a.Outcome == queueclient.Success() {
						l.uncertain[a.Key] = true
					}
					l.note(a.Key, "ack %v of token %x (gen %d..%d): %v", a.Outcome == queueclient.Success(), a.Token, ga, gaEnd, err)
				}
				l.mu.Unlock()
				continue
			}
			for i, r := range res {
				known := g0 == g1 // the lease was answered by process generation g0
				switch {
				case known && ga > g0 && r.Status == queueclient.OK:
					fail("token %d of %s from generation %d acked OK in generation %d", acks[i].Token, r.Key, g0, ga)
				case known && ga > g0:
					l.lost.Add(1)
				case known && ga == g0 && gaEnd == g0 && r.Status != queueclient.OK:
					fail("ack of a live lease of %s in the same generation answered %v", r.Key, r.Status)
				}
				if r.Status == queueclient.OK && acks[i].Outcome == queueclient.Success() {
					l.done[r.Key] = true
				}
				l.note(r.Key, "lease token %x (gen %d..%d), ack success=%v (gen %d..%d): %v", acks[i].Token, g0, g1, acks[i].Outcome == queueclient.Success(), ga, gaEnd, r.Status)
			}
			l.mu.Unlock()
		}
	}
	var drain atomic.Bool
	for w := range workers {
		workWG.Go(func() { work(w, &drain) })
	}

	rng := rand.New(rand.NewPCG(7, 7))
	var slowest time.Duration
	stashLost := 0
	for r := 1; r <= restarts && ctx.Err() == nil; r++ {
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond) // a random moment
		// Leases the test itself holds across the crash: after the restart
		// their tokens must be LEASE_LOST.
		stash, err := once.Lease(ctx, queue, queueclient.LeaseOptions{Worker: "stash", MaxItems: 5, Duration: time.Minute})
		if err != nil {
			t.Fatalf("stash lease: %v", err)
		}
		g.close()
		if _, err := p.signal(syscall.SIGKILL, 10*time.Second); err == nil {
			t.Fatal("SIGKILLed baton-queue exited 0")
		}
		gen.Add(1)
		p.start()
		took := p.waitServing(ctx, conn)
		slowest = max(slowest, took)
		g.waitIdle()

		// Every key added and not acked away is stored.
		l.mu.Lock()
		var required []string
		for k := range l.added {
			if !l.done[k] && !l.uncertain[k] {
				required = append(required, k)
			}
		}
		l.mu.Unlock()
		items, err := once.List(ctx, queue, queuev1.ItemState_ITEM_STATE_UNSPECIFIED, 10000)
		if err != nil {
			t.Fatalf("list after restart %d: %v", r, err)
		}
		present := make(map[string]queuev1.ItemState, len(items))
		for _, it := range items {
			present[it.GetKey()] = it.GetState()
		}
		var missing []string
		for _, k := range required {
			if _, ok := present[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			l.mu.Lock()
			for _, k := range missing[:min(5, len(missing))] {
				t.Logf("history of %s: %q", k, l.history[k])
			}
			l.mu.Unlock()
			t.Fatalf("restart %d: %d of %d unfinished keys lost, e.g. %v", r, len(missing), len(required), missing[:min(10, len(missing))])
		}
		rng.Shuffle(len(required), func(i, j int) { required[i], required[j] = required[j], required[i] })
		for _, k := range required[:min(50, len(required))] {
			it, err := once.Inspect(ctx, queue, k)
			if err != nil {
				t.Fatal(err)
			}
			switch it.GetState() {
			case queuev1.ItemState_ITEM_STATE_PENDING, queuev1.ItemState_ITEM_STATE_DELAYED, queuev1.ItemState_ITEM_STATE_LEASED, queuev1.ItemState_ITEM_STATE_PARKED:
			default:
				t.Fatalf("restart %d: unfinished key %s is %v", r, k, it.GetState())
			}
		}
		// The stashed tokens died with the process.
		if len(stash) > 0 {
			acks := make([]queueclient.Ack, len(stash))
			for i, s := range stash {
				acks[i] = queueclient.Ack{Key: s.Key, Token: s.Token, Outcome: queueclient.Success()}
			}
			res, err := once.Ack(ctx, queue, acks)
			if err != nil {
				t.Fatalf("ack of stashed leases: %v", err)
			}
			l.mu.Lock()
			for i, rr := range res {
				l.note(rr.Key, "stash token %x acked after restart %d: %v", acks[i].Token, r, rr.Status)
			}
			l.mu.Unlock()
			for i, rr := range res {
				if rr.Status != queueclient.LeaseLost {
					t.Fatalf("restart %d: token %d of %s from before the crash answered %v", r, acks[i].Token, rr.Key, rr.Status)
				}
				stashLost++
			}
		}
		t.Logf("restart %d: serving after %v; %d unfinished keys stored, %d listed", r, took.Round(time.Millisecond), len(required), len(items))
		g.open()
	}
	if ctx.Err() != nil {
		addWG.Wait()
		workWG.Wait()
		t.Fatalf("stopped early: %v", ctx.Err())
	}

	// Stop adding, let the workers drain the queue, then stop them.
	stop.Store(true)
	addWG.Wait()
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	defer dcancel()
	for {
		st, err := once.Stats(dctx, queue)
		if err != nil {
			t.Fatalf("stats while draining: %v", err)
		}
		s := st[0]
		if s.GetPending()+s.GetDelayed()+s.GetLeased()+s.GetParked() == 0 {
			break
		}
		if s.GetParked() > 0 && s.GetPending()+s.GetDelayed()+s.GetLeased() == 0 {
			parked, err := once.List(dctx, queue, queuev1.ItemState_ITEM_STATE_PARKED, 10000)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, it := range parked {
				keys = append(keys, it.GetKey())
			}
			if _, err := once.Add(dctx, queue, keys, queueclient.AddOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if dctx.Err() != nil {
			t.Fatalf("queue not drained: %v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	drain.Store(true)
	workWG.Wait()

	l.mu.Lock()
	defer l.mu.Unlock()
	var never []string
	uncertainAbsent := 0
	for k := range l.added {
		if l.done[k] {
			continue
		}
		if l.uncertain[k] {
			uncertainAbsent++ // its success ack landed before the crash
			continue
		}
		never = append(never, k)
	}
	if len(never) > 0 {
		sort.Strings(never)
		t.Fatalf("%d added keys were never worked to success, e.g. %v", len(never), never[:min(10, len(never))])
	}
	if stashLost == 0 || l.lost.Load() == 0 {
		t.Errorf("no stale token was exercised (stash %d, workers %d): the test did not test LEASE_LOST", stashLost, l.lost.Load())
	}
	if len(l.added) < 1000 {
		t.Errorf("only %d keys added: too little load to mean anything", len(l.added))
	}
	t.Logf("%d restarts, slowest %v; %d keys; %d stale tokens LEASE_LOST (%d held by workers); %d acks lost in transit whose keys never came back",
		restarts, slowest.Round(time.Millisecond), len(l.added), stashLost+int(l.lost.Load()), l.lost.Load(), uncertainAbsent)
}

// TestGracefulTerm checks SIGTERM: the process answers what is in flight,
// exits 0 within its grace period, and keeps every unfinished key; leases
// held across the stop come back pending and their tokens are LEASE_LOST.
func TestGracefulTerm(t *testing.T) {
	const grace = 3 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p := newProc(t, "--grace-period", grace.String())
	p.start()
	conn := dial(t, p.grpcAddr)
	p.waitServing(ctx, conn)
	c := queueclient.New(conn, queueclient.WithBackoff(queueclient.Backoff{Attempts: 1}))

	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/k%03d", i)
	}
	if _, err := c.Add(ctx, "term", keys, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctx, "term", []string{"ns/later"}, queueclient.AddOptions{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	leases, err := c.Lease(ctx, "term", queueclient.LeaseOptions{Worker: "w", MaxItems: 10, Duration: 5 * time.Minute})
	if err != nil || len(leases) != 10 {
		t.Fatalf("lease: %v %v", leases, err)
	}
	var acks []queueclient.Ack
	for _, l := range leases[:5] {
		acks = append(acks, queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()})
	}
	// One failure: its attempts and last error must survive the restart.
	acks = append(acks, queueclient.Ack{Key: leases[5].Key, Token: leases[5].Token, Outcome: queueclient.Failure("boom")})
	if res, err := c.Ack(ctx, "term", acks); err != nil || res[4].Status != queueclient.OK || res[5].Status != queueclient.OK {
		t.Fatalf("ack: %v %v", res, err)
	}

	// A long poll in flight must not hold the exit past the grace period.
	polled := make(chan error, 1)
	go func() {
		_, err := c.Lease(ctx, "idle", queueclient.LeaseOptions{Worker: "w", Wait: 20 * time.Second})
		polled <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it park (if not, it fails or returns: fine either way)

	took, err := p.signal(syscall.SIGTERM, grace+5*time.Second)
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v (want status 0)", err)
	}
	// The long poll is answered at once, so the exit does not wait out the
	// grace period.
	if took > grace-time.Second {
		t.Fatalf("exit took %v with a long poll in flight (grace period %v)", took, grace)
	}
	t.Logf("SIGTERM: exited 0 after %v (grace %v)", took.Round(time.Millisecond), grace)
	select {
	case err := <-polled:
		if err != nil {
			t.Fatalf("long poll in flight at SIGTERM ended with %v, want an empty answer", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-polling Lease still open after the process exited")
	}

	p.start()
	p.waitServing(ctx, conn)
	st, err := c.Stats(ctx, "term")
	if err != nil {
		t.Fatal(err)
	}
	if s := st[0]; s.GetPending() != 95 || s.GetDelayed() != 1 || s.GetLeased() != 0 {
		t.Fatalf("after restart: pending %d delayed %d leased %d, want 95 1 0", s.GetPending(), s.GetDelayed(), s.GetLeased())
	}
	for i, l := range leases {
		it, err := c.Inspect(ctx, "term", l.Key)
		if err != nil {
			t.Fatal(err)
		}
		want := queuev1.ItemState_ITEM_STATE_PENDING
		if i < 5 {
			want = queuev1.ItemState_ITEM_STATE_ABSENT
		}
		if it.GetState() != want {
			t.Errorf("%s after restart: %v, want %v", l.Key, it.GetState(), want)
		}
		if i == 5 && (it.GetAttempts() != 1 || it.GetLastError() != "boom") {
			t.Errorf("failed key %s after restart: attempts %d last_error %q, want 1 \"boom\"", l.Key, it.GetAttempts(), it.GetLastError())
		}
	}
	var stale []queueclient.Ack
	for _, l := range leases[5:] {
		stale = append(stale, queueclient.Ack{Key: l.Key, Token: l.Token, Outcome: queueclient.Success()})
	}
	res, err := c.Ack(ctx, "term", stale)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != queueclient.LeaseLost {
			t.Errorf("token from before SIGTERM for %s: %v, want LEASE_LOST", r.Key, r.Status)
		}
	}
	if _, err := p.signal(syscall.SIGTERM, grace+5*time.Second); err != nil {
		t.Fatalf("second SIGTERM: %v", err)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		t.Fatalf("exit: %v", ee)
	}
}
