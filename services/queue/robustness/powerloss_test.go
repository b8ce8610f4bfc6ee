package robustness

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/store/faultfs"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc"
)

// A power loss of every member at once, with what was written and not
// synced dropped, is a fault a process cannot suffer: SIGKILL leaves the
// page cache to the kernel, which writes it out. So this class runs in
// this process: three members made of the queue's own parts
// (broker.OpenReplicated on store.OpenRaftLog, a real gRPC server on
// 127.0.0.1 for the raft traffic and the clients), each on a faultfs disk
// of its own. A power cut cuts the three disks at one instant
// (faultfs.CrashAll: each keeps the bytes of each file up to its last
// Sync and the entries of each directory as of its last SyncDir), stops
// the three servers and throws the members away; they then start again
// on what survived. The workloads and the checkers are the suite's.
//
// The members answer their own calls and hand nothing on (the forwarding
// is the real processes' business, tested there): every client holds a
// list of all three and moves along it on UNAVAILABLE, NOT_LEADER included.

// entryFrame is the least a write of the raft log that holds an entry
// adds to a file: the frames of a hard state alone seen in the runs are
// 13 bytes, those with an entry 49 or more.
const entryFrame = 32

// powerDuration is the traffic's length in a power-loss run.
const powerDuration = 20 * time.Second

// pmember is one in-process member.
type pmember struct {
	id     uint64
	name   string
	addr   string
	disk   *faultfs.Disk
	b      *broker.Broker
	srv    *grpc.Server
	served chan struct{}
	n      int // starts, for its log files
}

// powerTrio is the three in-process members.
type powerTrio struct {
	t      *testing.T
	logDir string
	ms     []*pmember
	peers  map[uint64]string
	names  map[uint64]string
}

func newPowerTrio(t *testing.T, logDir string, lag time.Duration) *powerTrio {
	tr := &powerTrio{t: t, logDir: logDir, peers: map[uint64]string{}, names: map[uint64]string{}}
	for i := range 3 {
		m := &pmember{id: uint64(i + 1), name: fmt.Sprintf("p%d", i+1), addr: freePort(t), disk: faultfs.New(uint64(i + 1))}
		if lag > 0 {
			m.disk.LagSyncs(lag)
		}
		tr.ms = append(tr.ms, m)
		tr.peers[m.id], tr.names[m.id] = m.addr, m.name
	}
	t.Cleanup(func() {
		for _, m := range tr.ms {
			tr.stop(m)
		}
	})
	for _, m := range tr.ms {
		if err := tr.start(m); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// start opens m on what its disk holds and serves it.
func (tr *powerTrio) start(m *pmember) error {
	m.n++
	f, err := os.Create(filepath.Join(tr.logDir, fmt.Sprintf("%s-run-%03d.log", m.name, m.n)))
	if err != nil {
		return err
	}
	tr.t.Cleanup(func() { f.Close() })
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: "/data/raft", FS: m.disk.Mount(), Logger: log})
	if err != nil {
		return fmt.Errorf("%s: open its raft log on what survived: %w", m.name, err)
	}
	// The real members' settings (memberFlags): 50 ms ticks, a 500 ms
	// election timeout, 2 s leases, backoff from 5 ms to 100 ms.
	wq := workqueue.DefaultConfig()
	wq.BackoffBase, wq.BackoffMax = 5*time.Millisecond, 100*time.Millisecond
	b, err := broker.OpenReplicated(broker.Config{Queue: wq, DefaultLease: 2 * time.Second, CompactBytes: 64 << 10},
		replica.Config{ID: m.id, ClusterID: 0x9a55, Peers: tr.peers, Names: tr.names, Log: rlog, TickInterval: 50 * time.Millisecond, Logger: log},
		nil, log)
	if err != nil {
		rlog.Close()
		return fmt.Errorf("%s: %w", m.name, err)
	}
	lis, err := net.Listen("tcp", m.addr)
	if err != nil {
		b.Close()
		return fmt.Errorf("%s: listen on %s again: %w", m.name, m.addr, err)
	}
	m.b = b
	m.srv = grpc.NewServer()
	b.Member().Register(m.srv)
	queuev1.RegisterQueueServiceServer(m.srv, server.New(b))
	m.served = make(chan struct{})
	srv, served := m.srv, m.served
	go func() { defer close(served); _ = srv.Serve(lis) }()
	return nil
}

// stop ends m's server and closes its broker, if it runs.
func (tr *powerTrio) stop(m *pmember) {
	if m.srv != nil {
		m.srv.Stop()
		<-m.served
		m.srv = nil
	}
	if m.b != nil {
		// After a power cut its disk fails every call (EIO): the errors
		// are the dead machine's.
		_ = m.b.Close()
		m.b = nil
	}
}

// cut is the power loss of all three: the disks forget what was not
// synced, at one instant, whatever the members were writing; then the
// network goes (within milliseconds: meanwhile a member can answer only
// from what it held, its disk failing every call) and the members are
// gone. With midWrite, the instant is the next fsync any member asks for
// of a write that holds entries (more than a bare hard state's frame;
// within a second, else at once), between its write and its sync: that
// member's write is lost for certain, where a cut at a random instant
// nearly always finds every write synced. It returns what the disks lost
// (faultfs.CrashAll).
func (tr *powerTrio) cut(midWrite bool) (lostBytes int64, lostEntries int) {
	var disks []*faultfs.Disk
	for _, m := range tr.ms {
		disks = append(disks, m.disk)
	}
	var once sync.Once
	crash := func() { once.Do(func() { lostBytes, lostEntries = faultfs.CrashAll(disks...) }) }
	if midWrite {
		synced := make(chan struct{})
		for _, d := range disks {
			// The hook runs in the member's raft loop before its sync,
			// outside the disk's lock: the crash ends that sync with EIO.
			d.OnSync(func(name string) {
				if d.Unsynced(name) < entryFrame {
					return
				}
				crash()
				select {
				case synced <- struct{}{}:
				default:
				}
			})
		}
		select {
		case <-synced:
		case <-time.After(time.Second):
		}
		for _, d := range disks {
			d.OnSync(nil)
		}
	}
	crash()
	var wg sync.WaitGroup
	for _, m := range tr.ms {
		wg.Go(func() { tr.stop(m) })
	}
	wg.Wait()
	return lostBytes, lostEntries
}

// leader returns the index of the one member that leads, or -1.
func (tr *powerTrio) leader() int {
	l := -1
	for i, m := range tr.ms {
		if m.b != nil && m.b.Leading() {
			if l >= 0 {
				return -1
			}
			l = i
		}
	}
	return l
}

// awaitLeader waits up to limit for one member to lead, and returns it.
func (tr *powerTrio) awaitLeader(ctx context.Context, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		if l := tr.leader(); l >= 0 {
			return l, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1, fmt.Errorf("no leader within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitSameApplied waits until the three applied one index, and returns it.
func (tr *powerTrio) awaitSameApplied(ctx context.Context, limit time.Duration) (uint64, error) {
	deadline := time.Now().Add(limit)
	for {
		var idx []uint64
		for _, m := range tr.ms {
			idx = append(idx, m.b.Member().Status().Applied)
		}
		if idx[0] == idx[1] && idx[1] == idx[2] {
			return idx[0], nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("applied indexes differ after %v: %v", limit, idx)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// view is the clients' cluster: the members' names and connections.
func (tr *powerTrio) view() *cluster {
	c := &cluster{t: tr.t}
	for _, m := range tr.ms {
		conn := dial(tr.t, m.addr)
		c.procs = append(c.procs, &proc{name: m.name})
		c.conns = append(c.conns, conn)
		c.qcs = append(c.qcs, queuev1.NewQueueServiceClient(conn))
	}
	return c
}

// powerConfig is one power-loss run.
type powerConfig struct {
	seed     uint64
	duration time.Duration
	cuts     int           // power losses, at seeded moments
	lag      time.Duration // the disks' sync lag (faultfs.LagSyncs): the negative control's
}

// runPowerLoss runs the workloads on an in-process trio under cfg.cuts
// power losses, then checks the history as runSuite does.
func runPowerLoss(t *testing.T, cfg powerConfig, expectViolations bool) result {
	if testing.Short() {
		t.Skip("the power-loss runs take half a minute: not in -short")
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.seed, 0x9a55))
	// The cuts fall at seeded moments of the run, after a second of
	// traffic, and each lasts 100 to 600 ms.
	var at []time.Duration
	for range cfg.cuts {
		at = append(at, time.Second+time.Duration(rng.Int64N(int64(cfg.duration-2*time.Second))))
	}
	slices.Sort(at)
	var sched []string
	for _, a := range at {
		sched = append(sched, a.Round(time.Millisecond).String())
	}
	t.Logf("seed %d (replay: ROBUSTNESS_SEED=%d), %v of traffic, power cuts at %s", cfg.seed, cfg.seed, cfg.duration, strings.Join(sched, ", "))

	ctx, cancel := context.WithTimeout(t.Context(), cfg.duration+5*time.Minute)
	defer cancel()
	logDir := t.TempDir()
	tr := newPowerTrio(t, logDir, cfg.lag)
	r := &run{t: t, cfg: config{seed: cfg.seed, duration: cfg.duration}, h: NewHistory(), logDir: logDir, faults: map[string]int{}}
	r.c = tr.view()
	if _, err := tr.awaitLeader(ctx, 30*time.Second); err != nil {
		t.Fatalf("the trio did not elect a leader: %v", err)
	}

	wctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 6 {
		cl := r.c.client(i, r.h, []int{i % 3, (i + 1) % 3, (i + 2) % 3}, cfg.seed)
		wg.Go(func() { cl.runLin(wctx) })
	}
	wc := r.c.client(6, r.h, []int{0, 1, 2}, cfg.seed)
	wg.Go(func() { wc.runWork(wctx) })
	var sl setLoad
	adder := r.c.client(7, r.h, []int{2, 0, 1}, cfg.seed)
	wg.Go(func() { sl.runAdder(wctx, adder) })
	worker := r.c.client(8, r.h, []int{1, 2, 0}, cfg.seed)
	wg.Go(func() { sl.runWorker(wctx, worker) })
	kept := r.c.client(9, r.h, []int{0, 1, 2}, cfg.seed)
	wg.Go(func() { sl.runKeptAdder(wctx, kept) })

	began := time.Now()
	for n, a := range at {
		sleepCtx(ctx, time.Until(began.Add(a)))
		hold := time.Duration(100+rng.IntN(500)) * time.Millisecond
		midWrite := rng.IntN(2) == 0
		lostBytes, lostEntries := tr.cut(midWrite)
		r.mu.Lock()
		r.faults["power-loss-all"]++
		r.mu.Unlock()
		sleepCtx(ctx, hold)
		var errs []string
		for _, m := range tr.ms {
			if err := tr.start(m); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			r.extra = append(r.extra, Violation{Checker: "recovery", What: fmt.Sprintf("power loss #%d: %s", n+1, strings.Join(errs, "; "))})
			r.logf("power loss #%d: a member did not start: %s", n+1, strings.Join(errs, "; "))
			break
		}
		l, err := tr.awaitLeader(ctx, 30*time.Second)
		if err != nil {
			r.extra = append(r.extra, Violation{Checker: "recovery", What: fmt.Sprintf("after power loss #%d: %v", n+1, err)})
			r.logf("power loss #%d: %v", n+1, err)
			break
		}
		when := "at a random instant"
		if midWrite {
			when = "at a write's fsync"
		}
		r.logf("power loss #%d of all three %s, off %v, %d unsynced bytes and %d directory changes dropped; %s leads again", n+1, when, hold, lostBytes, lostEntries, tr.ms[l].name)
	}
	sleepCtx(ctx, time.Until(began.Add(cfg.duration)))
	stopLoad()
	wg.Wait()
	r.logf("traffic stopped")

	var res result
	if len(r.extra) == 0 {
		tr.settle(ctx, r, &res)
	}
	r.check(&res)
	return r.judge(res, start, expectViolations)
}

// settle drains the set queue through the leader once the stopped
// clients' leases lapsed, waits for the three to apply one index, reads
// every key of the model's queues through the leader, and compares the
// members' own states.
func (tr *powerTrio) settle(ctx context.Context, r *run, res *result) {
	sleepCtx(ctx, 2500*time.Millisecond)
	if err := tr.drainSet(ctx, r); err != nil {
		res.violations = append(res.violations, Violation{Checker: "set", What: "drain: " + err.Error()})
	}
	// In process, an honest trio catches up within a few seconds; 20 s
	// spares the negative control, whose members may never agree, a
	// long wait.
	idx, err := tr.awaitSameApplied(ctx, 20*time.Second)
	if err != nil {
		res.violations = append(res.violations, Violation{Checker: "state", What: err.Error()})
		return
	}
	r.logf("every member applied through %d", idx)
	l, err := tr.awaitLeader(ctx, 30*time.Second)
	if err != nil {
		res.violations = append(res.violations, Violation{Checker: "recovery", What: "at the end: " + err.Error()})
		return
	}
	cl := r.c.client(100, r.h, []int{l}, 0)
	for _, k := range linKeys {
		cl.inspect(ctx, linQueue, k)
	}
	for _, k := range workKeys {
		cl.inspect(ctx, workQueue, k)
	}
	res.violations = append(res.violations, r.compareMemberStates(ctx)...)
}

// drainSet drains the set and kept queues through the leader.
func (tr *powerTrio) drainSet(ctx context.Context, r *run) error {
	return drain(ctx, func() (queuev1.QueueServiceClient, int) {
		l := tr.leader()
		if l < 0 {
			return nil, l
		}
		return r.c.qcs[l], l
	}, r, setQueue, keptQueue)
}

// TestPowerLoss: the workloads on three in-process members while the
// power of all three is cut at once, five times at seeded moments, each
// member keeping only what it had synced. Nothing acknowledged may be
// lost, the history must be linearizable, and every member must end with
// the same state.
func TestPowerLoss(t *testing.T) {
	cfg := configFromEnv(t)
	runPowerLoss(t, powerConfig{seed: cfg.seed, duration: powerDuration, cuts: 5}, false)
}

// TestPowerLossNegativeControl runs the same on disks that acknowledge
// each sync 300 ms before they keep what it covers
// (faultfs.LagSyncs): the raft log then answers a Save before it is
// durable, as a store that acknowledges before fsync does, and the
// checkers must find acknowledged Adds lost. It passes only if they do.
func TestPowerLossNegativeControl(t *testing.T) {
	cfg := configFromEnv(t)
	res := runPowerLoss(t, powerConfig{seed: cfg.seed, duration: powerDuration, cuts: 5, lag: 300 * time.Millisecond}, true)
	lost := slices.Concat(res.set.Lost, res.kept.Lost)
	if len(lost) == 0 {
		t.Fatalf("the checkers found no lost key on disks that acknowledge syncs before they keep them: they cannot see the loss they exist for")
	}
	t.Logf("as it must, the set checker found %d acknowledged keys lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
}
