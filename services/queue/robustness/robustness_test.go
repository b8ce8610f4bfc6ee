package robustness

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// binDir holds the baton-queue binaries the package builds.
var binDir string

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "baton-robustness-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var built struct {
	sync.Once
	path string
	err  error
}

// queueBinary returns baton-queue, built once for the package without
// -race (as the queue's crash tests build it: the suite measures the
// service), or ROBUSTNESS_BINARY, a baton-queue built elsewhere (a
// release, another commit). The checkers' own tests need none.
func queueBinary(t *testing.T) string {
	built.Do(func() {
		if b := os.Getenv("ROBUSTNESS_BINARY"); b != "" {
			built.path = b
			return
		}
		built.path = filepath.Join(binDir, "baton-queue")
		if out, err := exec.Command("go", "build", "-o", built.path, "../cmd/baton-queue").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ../cmd/baton-queue: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// config is one run of the suite.
type config struct {
	seed     uint64
	duration time.Duration // of the fault schedule and traffic
	classes  []string      // fault classes to draw from; nil: every one
	steps    []step        // a pinned schedule; nil: drawn from seed
	after    time.Duration // traffic after a pinned schedule's last step
	binary   string
}

// defaultDuration is the short mix's length, which `make test` runs too:
// about a minute of faults, checks included about two.
const defaultDuration = 60 * time.Second

// pinnedSeed is the seed of the runs `make test` makes: a randomised
// suite runs a pinned seed there, so that a failure in CI is the code's,
// and replays. Every seed that ever found a failure is pinned as the
// scenario test that replays its schedule (findings_test.go); fresh
// seeds are drawn by `make test-robustness` and `make test-fresh-seeds`
// (BATON_FRESH_SEEDS=1).
const pinnedSeed = 7212986157344102945

// configFromEnv reads ROBUSTNESS_SEED, ROBUSTNESS_DURATION and
// ROBUSTNESS_FAULTS (a comma-separated list of class names); without
// ROBUSTNESS_SEED, the seed is pinnedSeed, or a fresh one with
// BATON_FRESH_SEEDS=1.
func configFromEnv(t *testing.T) config {
	cfg := config{seed: pinnedSeed, duration: defaultDuration}
	if os.Getenv("BATON_FRESH_SEEDS") == "1" {
		cfg.seed = rand.Uint64() >> 1
	}
	if s := os.Getenv("ROBUSTNESS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ROBUSTNESS_SEED=%q: %v", s, err)
		}
		cfg.seed = v
	}
	if s := os.Getenv("ROBUSTNESS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("ROBUSTNESS_DURATION=%q: %v", s, err)
		}
		cfg.duration = d
	}
	if s := os.Getenv("ROBUSTNESS_FAULTS"); s != "" {
		cfg.classes = strings.Split(s, ",")
	}
	return cfg
}

// run is one run's state.
type run struct {
	t       *testing.T
	cfg     config
	c       *cluster
	fw      *firewall
	h       *History
	logDir  string
	mu      sync.Mutex
	faults  map[string]int
	log     []string
	damaged []string
	extra   []Violation // found while running: recovery, damage
	fences  []fenceMark // restores of the whole queue (restoreWhole)
	// unrecovered is the step after which the queue did not recover.
	unrecovered string
}

func (r *run) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", time.Duration(r.h.Now()).Seconds()) + fmt.Sprintf(format, args...)
	r.t.Log(line)
	r.mu.Lock()
	r.log = append(r.log, line)
	r.mu.Unlock()
}

func (r *run) noteDamagedStart(what string) {
	r.mu.Lock()
	r.damaged = append(r.damaged, what)
	r.mu.Unlock()
}

// result is what a run found.
type result struct {
	violations []Violation
	lin        LinearizabilityResult
	set, kept  SetResult
	ops        []Op
	report     string
}

// runSuite runs the workloads under cfg's fault schedule, then checks the
// history. It fails t on a violation unless expectViolations, in which
// case the caller judges.
func runSuite(t *testing.T, cfg config, expectViolations bool) result {
	if testing.Short() {
		t.Skip("the robustness suite runs real processes for minutes: not in -short")
	}
	start := time.Now()
	if cfg.binary == "" {
		cfg.binary = queueBinary(t)
	}
	classes := cfg.classes
	if classes == nil {
		for _, c := range faultClasses {
			if f := openClass(c.name); f != nil {
				t.Logf("leaving out %s: open finding, pinned in %s: %s (ROBUSTNESS_KNOWN=1 or ROBUSTNESS_FAULTS draws it)", c.name, f.scenario, f.name)
				continue
			}
			classes = append(classes, c.name)
		}
	}
	why := iptablesUsable()
	var usable []string
	for _, name := range classes {
		c, ok := classByName(name)
		if !ok {
			t.Fatalf("no fault class %q", name)
		}
		if c.partition && why != "" {
			t.Logf("leaving out %s: %s", name, why)
			continue
		}
		usable = append(usable, name)
	}
	steps := cfg.steps
	if steps == nil {
		steps = schedule(cfg.seed, usable, cfg.duration)
	}
	var sched []string
	for _, s := range steps {
		sched = append(sched, s.String())
	}
	t.Logf("seed %d (replay: ROBUSTNESS_SEED=%d), %v of faults, schedule:\n  %s", cfg.seed, cfg.seed, cfg.duration, strings.Join(sched, "\n  "))

	ctx, cancel := context.WithTimeout(t.Context(), cfg.duration+5*time.Minute)
	defer cancel()
	logDir := t.TempDir()
	r := &run{t: t, cfg: cfg, h: NewHistory(), logDir: logDir, faults: map[string]int{}}
	if why == "" {
		r.fw = newFirewall(t)
	}
	r.c = newCluster(t, cfg.binary, logDir)
	if err := r.c.awaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatalf("the cluster did not form: %v", err)
	}

	// The workloads.
	wctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	all := []int{0, 1, 2}
	for i := range 6 {
		members := []int{i % 3}
		if i >= 3 {
			members = []int{i % 3, (i + 1) % 3, (i + 2) % 3} // a list
		}
		cl := r.c.client(i, r.h, members, cfg.seed)
		wg.Go(func() { cl.runLin(wctx) })
	}
	wc := r.c.client(6, r.h, all, cfg.seed)
	wg.Go(func() { wc.runWork(wctx) })
	var sl setLoad
	adder := r.c.client(7, r.h, []int{2, 0, 1}, cfg.seed)
	wg.Go(func() { sl.runAdder(wctx, adder) })
	worker := r.c.client(8, r.h, []int{1, 2, 0}, cfg.seed)
	wg.Go(func() { sl.runWorker(wctx, worker) })
	kept := r.c.client(9, r.h, []int{0, 1, 2}, cfg.seed)
	wg.Go(func() { sl.runKeptAdder(wctx, kept) })

	// The faults.
	faultsEnd := time.Now().Add(cfg.duration)
	for _, s := range steps {
		if ctx.Err() != nil || (cfg.steps == nil && time.Now().After(faultsEnd)) {
			break
		}
		sleepCtx(ctx, s.pause)
		class, _ := classByName(s.class)
		what, err := class.inject(ctx, r, s)
		r.mu.Lock()
		r.faults[s.class]++
		r.mu.Unlock()
		if err != nil {
			r.logf("%s: %s: error: %v", s, what, err)
		} else {
			r.logf("%s: %s", s, what)
		}
		if err := r.c.awaitHealthy(ctx, 30*time.Second); err != nil {
			r.unrecovered = fmt.Sprintf("%s (%s)", s, what)
			r.extra = append(r.extra, Violation{Checker: "recovery", What: fmt.Sprintf("after %s: %v", r.unrecovered, err)})
			r.logf("not recovered after %s: %v", s, err)
			break
		}
	}
	if cfg.steps == nil {
		sleepCtx(ctx, time.Until(faultsEnd)) // traffic fills the run's length
	} else {
		sleepCtx(ctx, cfg.after)
	}
	stopLoad()
	wg.Wait()
	r.logf("traffic stopped")

	res := r.finish(ctx)
	return r.judge(res, start, expectViolations)
}

// judge reports a run's result, and fails the test on a violation unless
// expectViolations or the violation is an open finding's (outside its
// scenario), saving the run's artifacts.
func (r *run) judge(res result, start time.Time, expectViolations bool) result {
	t, cfg := r.t, r.cfg
	res.report = r.report(res, time.Since(start))
	t.Log(res.report)
	if !expectViolations {
		// Violations of open findings are reported, not failed on, except
		// in the finding's own scenario.
		var fresh []Violation
		for _, v := range res.violations {
			if f := known(v); f != nil && f.scenario != t.Name() {
				t.Logf("KNOWN FINDING (open, pinned in %s): %s:\n%s", f.scenario, f.name, v)
				continue
			}
			fresh = append(fresh, v)
		}
		res.violations = fresh
	}
	if len(res.violations) > 0 && !expectViolations {
		dir := r.saveArtifacts(res)
		var vs []string
		for _, v := range res.violations[:min(10, len(res.violations))] {
			vs = append(vs, v.String())
		}
		t.Errorf("%d violations (history, visualisation, report and member logs in %s; replay with ROBUSTNESS_SEED=%d):\n%s",
			len(res.violations), dir, cfg.seed, strings.Join(vs, "\n"))
	}
	return res
}

// finish heals everything, lets the queue settle, drains the set
// workload, reads the final state through every member, and runs the
// checkers.
func (r *run) finish(ctx context.Context) result {
	var res result
	if r.fw != nil {
		if err := r.fw.heal(); err != nil {
			r.t.Error(err)
		}
	}
	for _, p := range r.c.procs {
		if p.running() {
			_ = p.signal(syscall.SIGCONT, 0)
		} else if err := p.start(); err != nil {
			r.t.Fatal(err)
		}
	}
	healthy := r.c.awaitHealthy(ctx, 60*time.Second)
	if healthy != nil {
		what := fmt.Sprintf("after healing: %v", healthy)
		if r.unrecovered != "" {
			what += " (not recovered since " + r.unrecovered + ")"
		}
		res.violations = append(res.violations, Violation{Checker: "recovery", What: what})
		r.logf("not healthy after healing: %v", healthy)
	}
	// Leases of the stopped clients lapse (2 s at most), then the set
	// workload's keys are leased until none is left, through the leader:
	// a majority that leads is enough, so that a member that did not
	// recover does not also hide what the others hold.
	sleepCtx(ctx, 2500*time.Millisecond)
	if err := r.drainSet(ctx); err != nil {
		res.violations = append(res.violations, Violation{Checker: "set", What: "drain: " + err.Error()})
	}
	if healthy == nil {
		if idx, err := r.c.awaitSameApplied(ctx, 60*time.Second); err != nil {
			res.violations = append(res.violations, Violation{Checker: "state", What: err.Error()})
		} else {
			r.logf("every member applied through %d", idx)
		}
		for i := range r.c.procs {
			cl := r.c.client(100+i, r.h, []int{i}, 0)
			for _, k := range linKeys {
				cl.inspect(ctx, linQueue, k)
			}
			for _, k := range workKeys {
				cl.inspect(ctx, workQueue, k)
			}
		}
		res.violations = append(res.violations, r.compareMemberStates(ctx)...)
	}
	r.check(&res)
	return res
}

// check runs the checkers over the history: invariants, the set, and
// linearizability of the lin and work queues' keys.
func (r *run) check(res *result) {
	res.violations = append(res.violations, r.extra...)
	res.ops = r.h.Ops()
	res.violations = append(res.violations, CheckInvariants(res.ops)...)
	res.violations = append(res.violations, r.checkFences(res.ops)...)
	res.set = CheckSet(res.ops, setQueue)
	res.violations = append(res.violations, res.set.Violations...)
	res.kept = CheckSet(res.ops, keptQueue)
	res.violations = append(res.violations, res.kept.Violations...)
	var lin []Op
	for _, op := range res.ops {
		if op.Queue == linQueue || op.Queue == workQueue {
			lin = append(lin, op)
		}
	}
	checkStart := time.Now()
	res.lin = CheckLinearizable(lin, max(time.Minute, r.cfg.duration))
	r.logf("porcupine: %s over %d key-level operations in %v", res.lin.Result, res.lin.Operations, time.Since(checkStart).Round(time.Millisecond))
	res.violations = append(res.violations, res.lin.Violations...)
}

// drainSet leases every key left in the set and kept queues through the
// leader and acks it, until they hold nothing.
func (r *run) drainSet(ctx context.Context) error {
	return drain(ctx, func() (queuev1.QueueServiceClient, int) {
		l := r.c.leader(ctx)
		if l < 0 {
			return nil, l
		}
		return r.c.qcs[l], l
	}, r, setQueue, keptQueue)
}

// drain leases and acks every key left in queues through the member
// leader returns (nil while there is none), until Stats says each holds
// nothing; a queue that does not exist holds nothing.
func drain(ctx context.Context, leader func() (queuev1.QueueServiceClient, int), r *run, queues ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, q := range queues {
		for {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("queue %s still holds keys after 60 s", q)
			}
			qc, l := leader()
			if qc == nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			cl := r.c.client(99, r.h, []int{l}, 0)
			cl.timeout = 10 * time.Second
			op := cl.lease(ctx, q, 1000, 200*time.Millisecond, time.Minute)
			if len(op.Grants) > 0 {
				if err := cl.ackAll(ctx, q, op.Grants); err != nil {
					r.logf("drain: ack: %v", errString(err))
				}
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := qc.Stats(sctx, &queuev1.StatsRequest{Queue: q})
			cancel()
			if status.Code(err) == codes.NotFound {
				break
			}
			if err == nil && len(st.GetQueues()) == 1 {
				s := st.GetQueues()[0]
				if s.GetPending()+s.GetDelayed()+s.GetLeased()+s.GetParked() == 0 {
					break
				}
			}
		}
	}
	return nil
}

// memberReadsAreSerializable says that the final comparison lists each
// member's own committed state (ListRequest.serializable: answered by
// the member called, never handed to the leader), so that it compares
// the members' states and not the leader's with itself. A member's own
// state knows no lease: a key the leader holds leased is pending in the
// committed log, and its dirty bit is the leader's alone. A delayed key
// whose time has come is pending (the comparison runs seconds after the
// last delay of the workloads ends).
const memberReadsAreSerializable = true

// listOn lists queue through qc, every page: each key's state, attempts
// and dirty bit.
func listOn(ctx context.Context, qc queuev1.QueueServiceClient, queue string) (map[string]string, error) {
	out := map[string]string{}
	token := ""
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := qc.List(lctx, &queuev1.ListRequest{Queue: queue, PageSize: 1000, PageToken: token, Serializable: memberReadsAreSerializable})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, it := range resp.GetItems() {
			st := stateName(it.GetState())
			if st == StateLeased && memberReadsAreSerializable {
				st = StatePending // a follower knows no lease: the leader's lease is pending to it
			}
			if st == StateDelayed && !it.GetNotBefore().AsTime().After(time.Now()) {
				// The leader makes a key whose time came pending in its
				// memory, without a record; a follower holds it delayed.
				st = StatePending
			}
			out[it.GetKey()] = fmt.Sprintf("%s attempts=%d dirty=%v", st, it.GetAttempts(), it.GetDirty() && !memberReadsAreSerializable)
		}
		token = resp.GetNextPageToken()
		if token == "" {
			return out, nil
		}
	}
}

// compareMemberStates compares every queue's items as each member lists
// them, once every member applied the same index.
func (r *run) compareMemberStates(ctx context.Context) []Violation {
	var out []Violation
	var names []string
	for _, p := range r.c.procs {
		names = append(names, p.name)
	}
	for _, q := range []string{linQueue, workQueue, setQueue, keptQueue} {
		views := make([]map[string]string, len(r.c.procs))
		for i, p := range r.c.procs {
			items, err := listOn(ctx, r.c.qcs[i], q)
			if err != nil {
				out = append(out, Violation{Checker: "state", What: fmt.Sprintf("List %s on %s: %v", q, p.name, errString(err))})
				continue
			}
			views[i] = items
		}
		out = append(out, compareStates(q, names, views)...)
	}
	return out
}

// compareStates compares the members' views of queue (nil: the member
// could not be read, which its caller reported) with the first that
// could, and names the keys where each differs.
func compareStates(queue string, names []string, views []map[string]string) []Violation {
	var out []Violation
	first := -1
	for i, items := range views {
		if items == nil {
			continue
		}
		if first < 0 {
			first = i
			continue
		}
		want := views[first]
		if maps.Equal(want, items) {
			continue
		}
		var diff []string
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if got, ok := items[k]; !ok {
				diff = append(diff, fmt.Sprintf("%s: %q vs absent", k, want[k]))
			} else if got != want[k] {
				diff = append(diff, fmt.Sprintf("%s: %q vs %q", k, want[k], got))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(items)) {
			if _, ok := want[k]; !ok {
				diff = append(diff, fmt.Sprintf("%s: absent vs %q", k, items[k]))
			}
		}
		out = append(out, Violation{Checker: "state", What: fmt.Sprintf("queue %s: %s differs from %s in %d keys: %s", queue, names[i], names[first], len(diff), strings.Join(diff[:min(8, len(diff))], "; "))})
	}
	return out
}

// report is the run's summary: operations by kind and outcome, faults by
// class, the checkers' verdicts.
func (r *run) report(res result, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v in all, %d operations\n", r.cfg.seed, took.Round(time.Second), len(res.ops))
	b.WriteString("operations by kind and outcome:\n")
	tally := Tally(res.ops)
	for _, k := range slices.Sorted(maps.Keys(tally)) {
		fmt.Fprintf(&b, "  %-34s %7d\n", k, tally[k])
	}
	errs := map[string]int{}
	for _, op := range res.ops {
		if op.Err != "" {
			e := op.Err
			if i := strings.Index(e, ": "); i > 0 && !strings.HasPrefix(e, "non-status") {
				e = e[:i]
			}
			errs[e]++
		}
	}
	b.WriteString("errors by code and reason:\n")
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		fmt.Fprintf(&b, "  %-34s %7d\n", k, errs[k])
	}
	b.WriteString("faults by class:\n")
	r.mu.Lock()
	for _, k := range slices.Sorted(maps.Keys(r.faults)) {
		fmt.Fprintf(&b, "  %-34s %7d\n", k, r.faults[k])
	}
	for _, d := range r.damaged {
		fmt.Fprintf(&b, "  a damaged member started: %s\n", d)
	}
	b.WriteString("fault log:\n")
	for _, l := range r.log {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	r.mu.Unlock()
	fmt.Fprintf(&b, "linearizability (porcupine, per key): %s over %d key-level operations\n", res.lin.Result, res.lin.Operations)
	for _, s := range []struct {
		q string
		r SetResult
	}{{setQueue, res.set}, {keptQueue, res.kept}} {
		fmt.Fprintf(&b, "%s: %d Adds acknowledged, %d ambiguous, %d keys offered; lost %d, unexpected %d, duplicated %d\n",
			s.q, s.r.Added, s.r.Ambiguous, s.r.Offered, len(s.r.Lost), len(s.r.Unexpected), len(s.r.Duplicated))
	}
	fmt.Fprintf(&b, "violations: %d\n", len(res.violations))
	for _, v := range res.violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

// saveArtifacts writes the history, the visualisation, the report and the
// members' logs under test-output/robustness/ at the repository's root,
// and returns the folder.
func (r *run) saveArtifacts(res result) string {
	root, err := RepoRoot(".")
	if err != nil {
		r.t.Logf("no repository root: %v", err)
		root = os.TempDir()
	}
	name := strings.NewReplacer("/", "-", " ", "_").Replace(r.t.Name())
	dir := filepath.Join(root, "test-output", "robustness", fmt.Sprintf("%s-%s", name, time.Now().UTC().Format("20060102-150405")))
	lin := &res.lin
	if lin.Result == porcupine.Ok || lin.Result == porcupine.Unknown {
		lin = nil // nothing to show; a visualisation of an Ok history of this size is large
	}
	if err := WriteArtifacts(dir, res.ops, lin, res.report); err != nil {
		r.t.Logf("write artifacts: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(r.logDir, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	return dir
}

// TestRobustness is the suite: the workloads through every member under a
// seeded schedule of every fault class, then every checker.
// ROBUSTNESS_SEED replays a schedule, ROBUSTNESS_DURATION sets its
// length, ROBUSTNESS_FAULTS limits the classes.
func TestRobustness(t *testing.T) {
	runSuite(t, configFromEnv(t), false)
}

// unsafeAckTag is the build tag that makes the broker answer writes
// before the majority commit: the negative control's broken queue.
const unsafeAckTag = "baton_unsafe_ack"

// burstSteps is a schedule of n bursts of Adds, each ended by the
// leader's SIGKILL at its first answer (burstKillLeader), every other one
// with the followers frozen during the burst.
func burstSteps(n int) []step {
	var out []step
	for i := range n {
		class := "burst-kill-leader"
		if i%2 == 1 {
			class = "burst-kill-frozen"
		}
		out = append(out, step{n: i + 1, class: class, pause: 800 * time.Millisecond, hold: 300 * time.Millisecond, pick: i, bits: uint64(i) * 7})
	}
	return out
}

// TestNegativeControl runs the suite against a queue built to answer
// writes before the majority commits them, killing the leader right after
// bursts of Adds: the checkers must find acknowledged keys lost. It
// passes only if they fail.
func TestNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("the robustness suite runs real processes for minutes: not in -short")
	}
	out, _ := exec.Command("grep", "-rlw", unsafeAckTag, "../internal/broker").Output()
	if len(strings.TrimSpace(string(out))) == 0 {
		t.Skipf("internal/broker has no %s build tag yet: there is no unsafe build to run the suite against", unsafeAckTag)
	}
	unsafe := filepath.Join(binDir, "baton-queue-unsafe-ack")
	if out, err := exec.Command("go", "build", "-tags", unsafeAckTag, "-o", unsafe, "../cmd/baton-queue").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", unsafeAckTag, err, out)
	}
	cfg := configFromEnv(t)
	cfg.binary = unsafe
	cfg.duration = 20 * time.Second
	cfg.steps = burstSteps(8)
	res := runSuite(t, cfg, true)
	lost := slices.Concat(res.set.Lost, res.kept.Lost)
	if len(lost) == 0 {
		t.Fatalf("the checkers found no lost key in a queue that answers before the commit: they cannot see the loss they exist for")
	}
	t.Logf("as it must, the set checker found %d acknowledged keys lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
}
