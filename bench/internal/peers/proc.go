package peers

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/bench/internal/refs"
	"github.com/batonrun/baton/services/etcdembed"
	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/grpc"
)

// The servers a child process can run (ServeMain's -kind).
const (
	KindNATS     = "nats"      // NATS JetStream, default sync settings
	KindNATSSync = "nats-sync" // NATS JetStream with sync_interval: always
	KindEtcd     = "etcd"      // etcd, default fsync
	KindRefs     = "refs"      // the reference gRPC services of package refs
)

// The child's protocol on its standard streams: it prints readyLine once
// clients can connect; for each heapCmd line on its standard input it
// collects garbage twice and prints "heap <bytes in use>"; at the end of its
// standard input (the parent closed it, or died) it stops the server and
// exits. So a child never outlives the bench.
const (
	readyLine = "ready"
	heapCmd   = "heap"
)

// ServeMain is the child side of Proc: it parses args (-kind, -dir, -addr,
// -peer-addr), serves until stdin ends and returns the exit code. The bench
// binary runs it for its hidden "serve" subcommand.
func ServeMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kind := fs.String("kind", "", "nats, nats-sync, etcd or refs")
	dir := fs.String("dir", "", "data directory (kept across restarts)")
	addr := fs.String("addr", "", "client address, 127.0.0.1:port")
	peer := fs.String("peer-addr", "", "etcd's peer address, or a clustered NATS server's route address, 127.0.0.1:port (fixed across restarts: etcd records it)")
	name := fs.String("name", "", "a clustered NATS server's name, unique in its cluster")
	routes := fs.String("routes", "", "a clustered NATS server's routes: every member's -peer-addr, comma-separated (empty: not clustered)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	stop, err := serve(*kind, *dir, *addr, *peer, *name, *routes)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	defer stop()
	fmt.Fprintln(stdout, readyLine)
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		if sc.Text() == heapCmd {
			fmt.Fprintf(stdout, "%s %d\n", heapCmd, liveHeap())
		}
	}
	return 0
}

// serve starts a server of kind in this process and returns how to stop it.
func serve(kind, dir, addr, peer, name, routes string) (func(), error) {
	if dir == "" || addr == "" {
		return nil, errors.New("-dir and -addr are required")
	}
	switch kind {
	case KindNATS, KindNATSSync:
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("port %q: %w", p, err)
		}
		opts := natsOptions(dir, port, kind == KindNATSSync)
		if routes != "" {
			if err := clusterNATS(opts, name, peer, routes); err != nil {
				return nil, err
			}
		}
		srv, err := startNATSServer(opts, 30*time.Second)
		if err != nil {
			return nil, err
		}
		return func() { srv.Shutdown(); srv.WaitForShutdown() }, nil
	case KindRefs:
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		s := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
		refs.Register(s)
		go func() { _ = s.Serve(lis) }()
		return s.Stop, nil
	case KindEtcd:
		if peer == "" {
			return nil, errors.New("etcd needs -peer-addr")
		}
		srv, err := etcdembed.Start(context.Background(), etcdembed.Config{Dir: dir, ClientURL: "http://" + addr, PeerURL: "http://" + peer})
		if err != nil {
			return nil, err
		}
		return srv.Close, nil
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// startNATSServer starts a NATS server in this process and waits until it
// accepts clients.
func startNATSServer(opts *server.Options, wait time.Duration) (*server.Server, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server not ready in %v", wait)
	}
	return srv, nil
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC() // the second frees what the first one's finalizers released
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Proc is a contender's server in a child process (ServeMain), on fixed
// loopback ports and one data directory, so that it can be SIGKILLed and
// started again on the same data like baton-queue: the bench cannot kill a
// server embedded in its own process.
type Proc struct {
	Kind, Dir string
	Addr      string // client address, 127.0.0.1:port
	peerAddr  string
	command   []string // the executable and the arguments before ServeMain's
	extra     []string // ServeMain's arguments besides -kind, -dir, -addr, -peer-addr
	logPath   string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // the child's standard output
	exited chan struct{}
	err    error // the child's exit, once exited is closed
}

// StartProc runs command (e.g. the bench binary and "serve") with
// ServeMain's arguments for kind and dir and waits until the server is
// ready. The child's standard error goes to dir + ".log".
func StartProc(ctx context.Context, command []string, kind, dir string) (*Proc, error) {
	p := &Proc{Kind: kind, Dir: dir, command: command, logPath: dir + ".log"}
	var err error
	if p.Addr, err = baton.FreeAddr(); err != nil {
		return nil, err
	}
	if p.peerAddr, err = baton.FreeAddr(); err != nil {
		return nil, err
	}
	if _, err := p.launch(ctx); err != nil {
		_ = p.Kill() // its log stays, for the error's sake
		return nil, err
	}
	return p, nil
}

// launch starts the child and waits for its ready line; it returns the time
// from exec until then.
func (p *Proc) launch(ctx context.Context) (time.Duration, error) {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	args := append(append([]string{}, p.command[1:]...), "-kind", p.Kind, "-dir", p.Dir, "-addr", p.Addr, "-peer-addr", p.peerAddr)
	args = append(args, p.extra...)
	cmd := exec.Command(p.command[0], args...)
	// The heap figures assume the default GC target.
	cmd.Env = append(os.Environ(), "GOGC=100")
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return 0, fmt.Errorf("start %s: %w", p.command[0], err)
	}
	lines, exited := make(chan string, 16), make(chan struct{})
	p.cmd, p.stdin, p.lines, p.exited = cmd, stdin, lines, exited
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		// The pipe is at its end once the child is gone; Wait closes it.
		p.err = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	select {
	case l := <-lines:
		if l != readyLine {
			return 0, fmt.Errorf("%s server said %q, not %q", p.Kind, l, readyLine)
		}
		return time.Since(start), nil
	case <-exited:
		return 0, fmt.Errorf("%s server exited while starting (%v); see %s", p.Kind, p.err, p.logPath)
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("%s server not ready in 2 minutes; see %s", p.Kind, p.logPath)
	}
}

// Kill SIGKILLs the child (no shutdown of any kind) and waits until it is
// gone; it does nothing if the child is not running.
func (p *Proc) Kill() error {
	if p.cmd == nil {
		return nil
	}
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.exited
	return nil
}

// Restart SIGKILLs the child if it runs, starts a new one on the same data
// and ports, and returns the time from exec until it said it was ready.
func (p *Proc) Restart(ctx context.Context) (time.Duration, error) {
	if err := p.Kill(); err != nil {
		return 0, err
	}
	return p.launch(ctx)
}

// Heap asks the child for its live heap: bytes in use after two garbage
// collections (the server's alone: the client is in the bench process).
func (p *Proc) Heap(ctx context.Context) (uint64, error) {
	if _, err := fmt.Fprintln(p.stdin, heapCmd); err != nil {
		return 0, err
	}
	select {
	case l := <-p.lines:
		v, ok := strings.CutPrefix(l, heapCmd+" ")
		if !ok {
			return 0, fmt.Errorf("%s server answered %q to %q", p.Kind, l, heapCmd)
		}
		return strconv.ParseUint(v, 10, 64)
	case <-p.exited:
		return 0, fmt.Errorf("%s server exited (%v)", p.Kind, p.err)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// RSS returns the child's resident set size in bytes (VmRSS in
// /proc/<pid>/status): its heap, stacks, runtime overhead and whatever
// pages it maps, such as bbolt's database file.
func (p *Proc) RSS() (uint64, error) {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0, errors.New("not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads the VmRSS line ("VmRSS:   12345 kB") of a
// /proc/<pid>/status file, in bytes.
func parseVmRSS(status string) (uint64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS line")
}

// Close kills the child and removes its log (the caller owns the data
// directory).
func (p *Proc) Close() {
	_ = p.Kill()
	os.Remove(p.logPath)
}
