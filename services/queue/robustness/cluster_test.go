package robustness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// The Raft timing of every run: 50 ms heartbeats, 500 ms election timeout.
var memberFlags = []string{"--heartbeat-interval", "50ms", "--election-timeout", "500ms",
	"--grace-period", "1s", "--backoff-base", "5ms", "--backoff-max", "100ms",
	"--default-lease", "2s", "--compact-bytes", "65536", "--log-level", "warn"}

// firstGID is the group of the first member; each member runs as a group
// of its own, which iptables' owner match tells apart on loopback.
const firstGID = 47200

// proc is one baton-queue process, restarted in place.
type proc struct {
	t                  *testing.T
	binary             string
	name               string
	dir, logDir        string
	grpcAddr, httpAddr string
	peerAddr           string
	gid                uint32
	args               []string
	n                  int
	// once are arguments for the next start alone (--force-new-cluster).
	once []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	stopped bool // SIGSTOPped
}

// usedAddrs keeps freePort from handing an address out twice.
var usedAddrs sync.Map

func freePort(t *testing.T) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, taken := usedAddrs.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	logf, err := os.Create(filepath.Join(p.logDir, fmt.Sprintf("%s-run-%03d.log", p.name, p.n)))
	if err != nil {
		return err
	}
	args := append([]string{"--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr, "--data-dir", p.dir}, p.args...)
	args, p.once = append(args, p.once...), nil
	cmd := exec.Command(p.binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(os.Getuid()), Gid: p.gid, NoSetGroups: true}}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.stopped = cmd, exited, false
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// signal sends sig; for SIGKILL and SIGTERM it waits up to limit for the
// exit.
func (p *proc) signal(sig syscall.Signal, limit time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if sig == syscall.SIGSTOP {
		p.stopped = true
	}
	if sig == syscall.SIGCONT {
		p.stopped = false
	}
	p.mu.Unlock()
	if cmd == nil || !p.running() {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	if sig != syscall.SIGKILL && sig != syscall.SIGTERM {
		return nil
	}
	if sig == syscall.SIGTERM {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("%s did not exit within %v of %v", p.name, limit, sig)
	}
}

func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// waitExit waits up to limit for the process to exit by itself; it
// reports whether it did.
func (p *proc) waitExit(limit time.Duration) bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return true
	case <-time.After(limit):
		return false
	}
}

// kill SIGKILLs the process if it runs (a stopped one too).
func (p *proc) kill() {
	if p.running() {
		_ = p.signal(syscall.SIGKILL, 10*time.Second)
	}
}

// wipe empties the data directory, as a lost disk leaves it.
func (p *proc) wipe() error {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(p.dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// lastLog returns the tail of the process's last run's output.
func (p *proc) lastLog(n int) string {
	b, err := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("%s-run-%03d.log", p.name, p.n)))
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// logContains reports whether the process's last run logged s.
func (p *proc) logContains(s string) bool {
	b, err := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("%s-run-%03d.log", p.name, p.n)))
	return err == nil && strings.Contains(string(b), s)
}

// notable returns the first n lines of the process's last run that are
// not the server's "finished call" lines, each cut to 400 bytes.
func (p *proc) notable(n int) string {
	b, err := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("%s-run-%03d.log", p.name, p.n)))
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.Contains(l, `"msg":"finished call"`) {
			continue
		}
		out = append(out, l[:min(400, len(l))])
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, "\n")
}

// cluster is three members of one replicated queue.
type cluster struct {
	t     *testing.T
	procs []*proc
	conns []*grpc.ClientConn
	qcs   []queuev1.QueueServiceClient
	ccs   []queuev1.ClusterServiceClient
	// quiet is held shared by every recorded call while it is in flight
	// (a work stream's ack until its answer), and exclusively by a fault
	// that needs the queue to have nothing in flight (stopIdleLeader).
	quiet sync.RWMutex
}

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

// initialCluster is the --initial-cluster of procs.
func initialCluster(procs []*proc) string {
	var parts []string
	for _, p := range procs {
		parts = append(parts, p.name+"="+p.peerAddr)
	}
	return strings.Join(parts, ",")
}

func newCluster(t *testing.T, binary, logDir string) *cluster {
	c := &cluster{t: t}
	for i := range 3 {
		c.procs = append(c.procs, &proc{t: t, binary: binary, name: fmt.Sprintf("m%d", i+1), dir: t.TempDir(), logDir: logDir,
			grpcAddr: freePort(t), httpAddr: freePort(t), peerAddr: freePort(t), gid: firstGID + uint32(i)})
	}
	ic := initialCluster(c.procs)
	for _, p := range c.procs {
		p.args = append([]string{"--name", p.name, "--peer-addr", p.peerAddr, "--initial-cluster", ic}, memberFlags...)
		conn := dial(t, p.grpcAddr)
		c.conns = append(c.conns, conn)
		c.qcs = append(c.qcs, queuev1.NewQueueServiceClient(conn))
		c.ccs = append(c.ccs, queuev1.NewClusterServiceClient(conn))
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			if p.running() {
				_ = p.signal(syscall.SIGCONT, 0)
				p.kill()
			}
		}
	})
	for _, p := range c.procs {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// startThree starts three members for a scenario (skipped in -short)
// and waits until they are whole; it returns a context bounded by limit,
// the cluster and the index of its leader.
func startThree(t *testing.T, limit time.Duration) (context.Context, *cluster, int) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts three baton-queue processes: not in -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	c := newCluster(t, queueBinary(t), t.TempDir())
	if err := c.awaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	l, err := c.awaitLeader(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, l
}

// restartEmptied empties p's data directory and starts it again: what a
// member's log tells the operator to do when it refuses its directory or
// cannot follow, after which it rejoins.
func (p *proc) restartEmptied() error {
	if err := p.wipe(); err != nil {
		return err
	}
	return p.start()
}

// status asks member i for its own view, briefly.
func (c *cluster) status(ctx context.Context, i int) (*queuev1.StatusResponse, error) {
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	return c.ccs[i].Status(sctx, &queuev1.StatusRequest{})
}

// leader returns the index of a running member that says it leads, or -1.
func (c *cluster) leader(ctx context.Context) int {
	for i, p := range c.procs {
		if !p.running() || p.isStopped() {
			continue
		}
		if st, err := c.status(ctx, i); err == nil && st.GetMember().GetLeader() {
			return i
		}
	}
	return -1
}

// awaitLeader waits up to limit for a leader.
func (c *cluster) awaitLeader(ctx context.Context, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for {
		if l := c.leader(ctx); l >= 0 {
			return l, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1, fmt.Errorf("no leader within %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitHealthy waits until all three run, all three name one leader, and
// the leader lists three voters.
func (c *cluster) awaitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for {
		last = c.health(ctx)
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not healthy within %v: %s", limit, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// awaitHealthyOr waits up to limit until the cluster is healthy or stop
// holds, and reports whether stop held first.
func (c *cluster) awaitHealthyOr(ctx context.Context, limit time.Duration, stop func() bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if c.health(ctx) == "" {
			return false
		}
		if stop() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return stop()
}

// health returns "" when the cluster is whole (every member runs, knows
// one leader and lists three voters), else what is missing.
func (c *cluster) health(ctx context.Context) string {
	leader := ""
	for i, p := range c.procs {
		if !p.running() {
			return p.name + " is not running"
		}
		st, err := c.status(ctx, i)
		if err != nil {
			return fmt.Sprintf("%s: %v", p.name, errString(err))
		}
		switch {
		case st.GetLeaderName() == "":
			return p.name + " knows no leader"
		case leader == "":
			leader = st.GetLeaderName()
		case leader != st.GetLeaderName():
			return fmt.Sprintf("leaders differ: %s and %s", leader, st.GetLeaderName())
		}
	}
	// Every member's own list, not the leader's alone: a member that has
	// not applied a promotion yet still counts the old voters only, and
	// the loss of the leader then leaves it no majority to elect with.
	for i, p := range c.procs {
		lctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		ml, err := c.ccs[i].MemberList(lctx, &queuev1.MemberListRequest{})
		cancel()
		if err != nil {
			return fmt.Sprintf("MemberList on %s: %v", p.name, errString(err))
		}
		voters := 0
		for _, m := range ml.GetMembers() {
			if !m.GetLearner() {
				voters++
			}
		}
		if voters != 3 || len(ml.GetMembers()) != 3 {
			return fmt.Sprintf("%s lists %d members, %d voters", p.name, len(ml.GetMembers()), voters)
		}
	}
	return ""
}

// awaitSameApplied waits until every member's Status shows one applied
// index, and returns it.
func (c *cluster) awaitSameApplied(ctx context.Context, limit time.Duration) (uint64, error) {
	deadline := time.Now().Add(limit)
	var seen []string
	for {
		seen = seen[:0]
		var idx []uint64
		for i := range c.procs {
			st, err := c.status(ctx, i)
			if err != nil {
				seen = append(seen, errString(err))
				continue
			}
			idx = append(idx, st.GetMember().GetAppliedIndex())
			seen = append(seen, fmt.Sprintf("%s:%d", c.procs[i].name, st.GetMember().GetAppliedIndex()))
		}
		if len(idx) == 3 && idx[0] == idx[1] && idx[1] == idx[2] {
			return idx[0], nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("applied indexes differ after %v: %v", limit, seen)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// firewall cuts peer traffic on loopback with iptables OUTPUT rules
// matched by the sending process's group, and removes them on heal and
// at the test's end.
type firewall struct {
	t     *testing.T
	mu    sync.Mutex
	rules [][]string
}

// iptablesUsable reports why iptables cannot be used here, or "".
func iptablesUsable() string {
	if os.Getuid() != 0 {
		return "partitions need root (iptables)"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return "partitions need iptables, which is not installed"
	}
	if out, err := exec.Command("iptables", "-S", "OUTPUT").CombinedOutput(); err != nil {
		return fmt.Sprintf("iptables cannot be used here: %v: %s", err, out)
	}
	return ""
}

func newFirewall(t *testing.T) *firewall {
	f := &firewall{t: t}
	t.Cleanup(func() {
		if err := f.heal(); err != nil {
			t.Error(err)
		}
	})
	return f
}

func (f *firewall) drop(spec ...string) error {
	rule := append([]string{"OUTPUT", "-o", "lo", "-p", "tcp"}, spec...)
	rule = append(rule, "-j", "DROP")
	f.mu.Lock()
	defer f.mu.Unlock()
	if out, err := exec.Command("iptables", append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables -I %v: %v: %s", rule, err, out)
	}
	f.rules = append(f.rules, rule)
	return nil
}

// heal removes every rule; it tries each even when one fails.
func (f *firewall) heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []string
	for _, rule := range f.rules {
		if out, err := exec.Command("iptables", append([]string{"-D"}, rule...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("iptables -D %v: %v: %s", rule, err, out))
		}
	}
	f.rules = nil
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// cutPair cuts the peer traffic between members a and b both ways: what
// a's process sends to b's peer listener and what b's sends to a's.
func (f *firewall) cutPair(c *cluster, a, b int) error {
	if err := f.drop("-m", "owner", "--gid-owner", fmt.Sprint(c.procs[a].gid), "--dport", port(c.procs[b].peerAddr)); err != nil {
		return err
	}
	return f.drop("-m", "owner", "--gid-owner", fmt.Sprint(c.procs[b].gid), "--dport", port(c.procs[a].peerAddr))
}

// isolate cuts member i off both others.
func (f *firewall) isolate(c *cluster, i int) error {
	for j := range c.procs {
		if j != i {
			if err := f.cutPair(c, i, j); err != nil {
				return err
			}
		}
	}
	return nil
}
