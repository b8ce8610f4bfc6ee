package service_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdServer is the etcd a test runs against: etcd embedded in the test
// process by default, or, when BATON_TEST_ETCD_BIN names an etcd binary,
// that binary as a child process. scripts/etcd-compat.sh uses the second
// to run these tests against the oldest and newest etcd releases Baton
// supports, which cannot be embedded beside the one go.mod requires.
type etcdServer interface {
	Endpoints() []string
	// Stop stops etcd, keeping its data; Restart starts it again on the
	// same data and ports.
	Stop()
	Restart(ctx context.Context) error
}

// startEtcd starts the etcd of the test, stopped when the test ends.
func startEtcd(t testing.TB) etcdServer {
	t.Helper()
	bin := os.Getenv("BATON_TEST_ETCD_BIN")
	if bin == "" {
		return etcdembed.StartForTest(t)
	}
	return startEtcdProcess(t, bin)
}

// etcdProcess is an etcd binary run as a child process with the settings
// etcdembed.StartForTest uses: loopback ports, no fsync, progress
// notifications every 100 ms.
type etcdProcess struct {
	t    testing.TB
	args []string // the binary, then its flags
	url  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error // the exit of cmd
}

var etcdVersion = regexp.MustCompile(`etcd Version: 3\.(\d+)\.`)

func startEtcdProcess(t testing.TB, bin string) *etcdProcess {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	m := etcdVersion.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s --version: %v (%q)", bin, err, out)
	}
	// etcd 3.6 renamed the experimental flag; 3.7 dropped the old name.
	progress := "--watch-progress-notify-interval"
	if string(m[1]) == "5" {
		progress = "--experimental-watch-progress-notify-interval"
	}
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	p := &etcdProcess{t: t, url: client, args: []string{bin,
		"--name", "test", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer, "--log-level", "warn",
		"--unsafe-no-fsync", progress, "100ms",
	}}
	if err := p.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func (p *etcdProcess) Endpoints() []string { return []string{p.url} }

func (p *etcdProcess) Restart(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stderr = &testWriter{t: p.t, prefix: "etcd: "}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: p.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		cmd.Process.Kill()
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(sctx, p.url)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("etcd exited while starting: %v", werr)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("etcd not serving after 30 s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.cmd, p.done = cmd, exited
	return nil
}

// Stop ends etcd with SIGTERM (SIGKILL after 10 s) and waits for it.
func (p *etcdProcess) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd, p.done = nil, nil
}
