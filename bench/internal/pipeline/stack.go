// Package pipeline measures Baton's whole path from etcd to a worker,
// workload 7 of `make bench`: the latency from an etcd put to the start of the reconcile
// it causes, beside etcd's own put → watch event latency measured on the same
// puts; and a cold start of thousands of ReplicaSets through the reference
// controllers, beside the time etcd alone needs for the same writes.
//
// Every part is real: etcd is embedded in the bench process (services/
// etcdembed, default fsync, data on the disk the caller names), baton-queue
// and baton-observer (and, for the cold start, baton-worker) are the built
// binaries run as child processes on loopback, so each has its own runtime
// and garbage collector, as deployed. Only the latency probe's worker runs in
// the bench process, through the worker SDK (sdk/manager), so that
// "reconcile start" is read on the same clock as the put.
package pipeline

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Bins are the binaries of the stack.
type Bins struct {
	Queue, Observer, Worker string
}

// Stack is an embedded etcd, a baton-queue and a baton-observer watching
// that etcd and announcing to that queue.
type Stack struct {
	Etcd     *etcdembed.Server
	Cli      *clientv3.Client // the writers' connection to etcd
	Queue    *baton.Server
	Observer *Proc
	dir      string
	pprof    bool // every child serves /debug/pprof/ (--enable-pprof)
}

// StartStack starts the stack with its data under a new directory in dir.
// rulesYAML is the observer's rules file ("" for its built-in rules, those
// of the reference controllers).
func StartStack(ctx context.Context, dir string, bins Bins, rulesYAML string) (*Stack, error) {
	return StartStackWith(ctx, dir, bins, rulesYAML, false)
}

// StartStackWith is StartStack, with pprof: the queue, the observer and
// the workers StartWorker starts serve /debug/pprof/ on their HTTP
// addresses (--enable-pprof), for profiling.
func StartStackWith(ctx context.Context, dir string, bins Bins, rulesYAML string, pprof bool) (_ *Stack, err error) {
	sdir, err := os.MkdirTemp(dir, "pipeline-")
	if err != nil {
		return nil, err
	}
	s := &Stack{dir: sdir, pprof: pprof}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Etcd, err = StartEtcd(ctx, filepath.Join(sdir, "etcd")); err != nil {
		return nil, err
	}
	if s.Cli, err = NewEtcdClient(s.Etcd); err != nil {
		return nil, err
	}
	var qo baton.Options
	if pprof {
		qo.Args = []string{"--enable-pprof"}
	}
	if s.Queue, err = baton.StartWith(ctx, bins.Queue, sdir, qo); err != nil {
		return nil, fmt.Errorf("baton-queue: %w", err)
	}
	grpcAddr, err := baton.FreeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := baton.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--etcd-endpoints", strings.Join(s.Etcd.Endpoints(), ","), "--queue-addr", s.Queue.GRPCAddr, "--log-level", "warn"}
	if rulesYAML != "" {
		path := filepath.Join(sdir, "rules.yaml")
		if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--rules", path)
	}
	if pprof {
		args = append(args, "--enable-pprof")
	}
	if s.Observer, err = StartProc(ctx, bins.Observer, filepath.Join(sdir, "observer.log"), grpcAddr, httpAddr, args...); err != nil {
		return nil, err
	}
	return s, nil
}

// StartWorker runs baton-worker against the stack with the given
// controllers and concurrency per controller.
func (s *Stack) StartWorker(ctx context.Context, bin, controllers string, concurrency int) (*Proc, error) {
	httpAddr, err := baton.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--http-addr", httpAddr, "--queue-addr", s.Queue.GRPCAddr, "--observer-addr", s.Observer.GRPCAddr,
		"--etcd-endpoints", strings.Join(s.Etcd.Endpoints(), ","), "--controllers", controllers,
		"--concurrency", fmt.Sprint(concurrency), "--lease-duration", "30s", "--log-level", "warn"}
	if s.pprof {
		args = append(args, "--enable-pprof")
	}
	return StartProc(ctx, bin, filepath.Join(s.dir, "worker.log"), "", httpAddr, args...)
}

// StopServices stops the observer and the queue, leaving etcd running (the
// cold start reads etcd's history after the services are gone, so that they
// take no CPU from what follows).
func (s *Stack) StopServices() {
	if s.Observer != nil {
		s.Observer.Stop()
		s.Observer = nil
	}
	if s.Queue != nil {
		s.Queue.Close()
		s.Queue = nil
	}
}

// Close stops everything and removes the data.
func (s *Stack) Close() {
	s.StopServices()
	if s.Cli != nil {
		s.Cli.Close()
		s.Cli = nil
	}
	if s.Etcd != nil {
		s.Etcd.Close()
		s.Etcd = nil
	}
	os.RemoveAll(s.dir)
}

// StartEtcd starts an embedded etcd with default settings (fsync on) and
// its data in dir, on a free loopback port.
func StartEtcd(ctx context.Context, dir string) (*etcdembed.Server, error) {
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return srv, nil
}

// NewEtcdClient opens a connection of its own to srv.
func NewEtcdClient(srv *etcdembed.Server) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 10 * time.Second,
		MaxCallSendMsgSize: 64 << 20, MaxCallRecvMsgSize: 256 << 20, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// Proc is a Baton service (baton-observer, baton-worker) run as a child
// process; its output goes to a log file beside its data.
type Proc struct {
	GRPCAddr, HTTPAddr string
	LogPath            string
	cmd                *exec.Cmd
	exited             chan struct{}
	waitErr            error
}

// StartProc starts bin with args and waits until its /readyz answers 200
// (for the observer: its watches are open and its cache is listed).
func StartProc(ctx context.Context, bin, logPath, grpcAddr, httpAddr string, args ...string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Proc{GRPCAddr: grpcAddr, HTTPAddr: httpAddr, LogPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	if err := p.waitReady(ctx, time.Minute); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	return p, nil
}

func (p *Proc) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited while starting (%v): %s", p.waitErr, tail(p.LogPath))
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (%s): %s", timeout, last, tail(p.LogPath))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Metrics scrapes the process's /metrics.
func (p *Proc) Metrics(ctx context.Context) (map[string]float64, error) {
	return baton.ScrapeMetrics(ctx, p.HTTPAddr)
}

// Stop sends SIGTERM, and SIGKILL if the process has not exited within 5 s.
func (p *Proc) Stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Exited reports an early exit of the process as an error.
func (p *Proc) Exited() error {
	select {
	case <-p.exited:
		return fmt.Errorf("exited (%v): %s", p.waitErr, tail(p.LogPath))
	default:
		return nil
	}
}

// tail returns the end of a log file for an error message: the stack's
// directory, logs included, is removed when the stack closes.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const most = 2000
	if len(b) > most {
		b = b[len(b)-most:]
	}
	if len(b) == 0 {
		return "(empty log)"
	}
	return strings.TrimSpace(string(b))
}
