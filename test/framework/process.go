package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// defaultReadyTimeout bounds a start, from exec to ready: a -race
	// binary on a loaded two-core machine can take seconds.
	defaultReadyTimeout = 60 * time.Second
	// defaultStopTimeout bounds the wait for an exit after SIGTERM before
	// SIGKILL follows (the services' grace periods are shorter).
	defaultStopTimeout = 30 * time.Second
	// pollInterval is how often readiness and WaitFor conditions are
	// checked.
	pollInterval = 10 * time.Millisecond
	// maxOutput bounds the output kept per process (the newest is kept).
	maxOutput = 8 << 20
	// raceMarker starts every report of the race detector.
	raceMarker = "WARNING: DATA RACE"
)

// Process is a child process run by the framework: one of Baton's binaries
// (inside a Queue, Observer or Worker) or an etcd binary. It keeps its
// arguments across starts, so a restart comes up on the same ports and data
// directory. Start and Restart must be called from the test's goroutine;
// the other methods from any.
type Process struct {
	t    testing.TB
	name string // for messages, e.g. "baton-queue"
	path string
	// args returns the arguments of the next start.
	args func() []string
	// ready reports whether a started process is ready; it is polled until
	// it returns nil.
	ready        func(ctx context.Context) error
	readyTimeout time.Duration
	// termExitOK counts death by SIGTERM as a clean stop (etcd re-raises
	// the signal once it has shut down; Baton's binaries exit 0).
	termExitOK bool

	out *output

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd has exited
	waitErr  error         // cmd.Wait's result, once exited is closed
	expected bool          // the current run's exit was asked for
	runs     int
	lost     []string // exits nobody asked for
	// lostLast is set when the last entry of lost is the current run's, so
	// a caller who turns out to expect that exit can take it back.
	lostLast bool
}

// newProcess prepares a process and registers its cleanup; start it with
// start.
func newProcess(t testing.TB, name, path string, args func() []string) *Process {
	p := &Process{t: t, name: name, path: path, args: args, readyTimeout: defaultReadyTimeout, out: &output{}}
	t.Cleanup(p.cleanup)
	return p
}

// Name returns the process's name, e.g. "baton-queue".
func (p *Process) Name() string { return p.name }

// PID returns the process id of the current run, or 0 if it never started.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

func (p *Process) runningLocked() bool {
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

// Output returns what the process wrote to stdout and stderr so far, over
// every run (the newest 8 MiB).
func (p *Process) Output() string { return p.out.String() }

// Start starts the process again after Stop, Kill or an exit, with the same
// arguments, and waits until it is ready; it fails the test if it cannot.
func (p *Process) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

// Restart stops the process (Stop) and starts it again (Start).
func (p *Process) Restart() {
	p.t.Helper()
	p.Stop()
	p.Start()
}

// start launches a run and waits until it is ready. On failure the run is
// killed and the error carries its output.
func (p *Process) start() error {
	p.mu.Lock()
	if p.runningLocked() {
		p.mu.Unlock()
		return fmt.Errorf("framework: %s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	p.runs++
	args := p.args()
	p.out.mark(fmt.Sprintf("=== %s run %d: %s %s", p.name, p.runs, p.path, strings.Join(args, " ")))
	mark := p.out.Len()
	cmd := exec.Command(p.path, args...)
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = p.out, p.out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("framework: start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.expected, p.waitErr, p.lostLast = cmd, exited, false, nil, false
	p.mu.Unlock()
	go p.wait(cmd, exited)

	deadline := time.Now().Add(p.readyTimeout)
	var last error
	for {
		select {
		case <-exited:
			p.mu.Lock()
			p.claimExitLocked() // reported here, not again at cleanup
			err := p.waitErr
			p.mu.Unlock()
			return fmt.Errorf("framework: %s exited before it was ready (%v); its output:\n%s", p.name, err, p.out.Since(mark))
		default:
		}
		if p.ready == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		last = p.ready(ctx)
		cancel()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("framework: %s not ready after %v (last: %v); its output:\n%s", p.name, p.readyTimeout, last, p.out.Since(mark))
		}
		time.Sleep(pollInterval)
	}
}

// wait records the exit of one run.
func (p *Process) wait(cmd *exec.Cmd, exited chan struct{}) {
	err := cmd.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waitErr = err
	if !p.expected {
		p.lost = append(p.lost, fmt.Sprintf("pid %d: %v", cmd.Process.Pid, exitString(err)))
		p.lostLast = true
	}
	close(exited)
}

// claimExitLocked takes back the current run's exit from lost: someone
// expected it after all.
func (p *Process) claimExitLocked() {
	p.expected = true
	if p.lostLast {
		p.lost = p.lost[:len(p.lost)-1]
		p.lostLast = false
	}
}

// current returns the running command and its exit channel, marking its
// coming exit as asked for; ok is false when nothing runs.
func (p *Process) current() (cmd *exec.Cmd, exited chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return nil, nil, false
	}
	p.expected = true
	return p.cmd, p.exited, true
}

// Stop sends SIGTERM and waits for the exit, SIGKILL after 30 s. It fails
// the test (t.Errorf) if the process did not exit cleanly: status 0, the
// way Baton's binaries end on SIGTERM.
func (p *Process) Stop() {
	if err := p.stop(defaultStopTimeout); err != nil {
		p.t.Error(err)
	}
}

func (p *Process) stop(timeout time.Duration) error {
	cmd, exited, ok := p.current()
	if !ok {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT) // in case a test froze it
	select {
	case <-exited:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("framework: %s (pid %d) did not exit within %v of SIGTERM; killed", p.name, cmd.Process.Pid, timeout)
	}
	p.mu.Lock()
	err := p.waitErr
	p.mu.Unlock()
	if err == nil || p.termExitOK && signaled(err, syscall.SIGTERM) {
		return nil
	}
	return fmt.Errorf("framework: %s (pid %d) exited uncleanly on SIGTERM: %v", p.name, cmd.Process.Pid, exitString(err))
}

// Kill sends SIGKILL and waits for the exit: a crash, as kill -9 makes one.
func (p *Process) Kill() {
	cmd, exited, ok := p.current()
	if !ok {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Signal sends sig to the running process (e.g. SIGSTOP and SIGCONT, to
// freeze it); use Stop and Kill to end it.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("framework: %s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the process to exit on its own (a test that
// makes it fail) and returns the exit (nil for status 0); an exit waited
// for is not reported as unexpected.
func (p *Process) Wait(timeout time.Duration) error {
	cmd, exited, ok := p.current()
	if !ok {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.exited == nil {
			return fmt.Errorf("framework: %s never started", p.name)
		}
		// It has already exited: take that exit as the one waited for.
		p.claimExitLocked()
		return p.waitErr
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		return fmt.Errorf("framework: %s (pid %d) still running after %v", p.name, cmd.Process.Pid, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// cleanup ends the process at the end of the test and reports what went
// wrong: an unclean stop, an exit nobody asked for, a data race.
func (p *Process) cleanup() {
	t0 := time.Now()
	if p.Running() {
		if err := p.stop(defaultStopTimeout); err != nil {
			p.t.Error(err)
		}
		p.t.Logf("framework: %s stopped in %v", p.name, time.Since(t0).Round(time.Millisecond))
	}
	p.mu.Lock()
	lost := p.lost
	p.mu.Unlock()
	for _, l := range lost {
		p.t.Errorf("framework: %s exited unexpectedly (%s)", p.name, l)
	}
	if n := p.out.races(); n > 0 {
		p.t.Errorf("framework: the race detector reported %d data race(s) in %s", n, p.name)
	}
	if p.t.Failed() && p.runs > 0 {
		p.t.Logf("framework: output of %s:\n%s", p.name, p.out.String())
	}
}

// childEnv is this process's environment without Baton's own variables, so
// a developer's BATON_QUEUE_DATA_DIR (every flag is also a variable) does
// not reach the children.
//
// A -race binary sleeps a second at exit by default (GORACE's
// atexit_sleep_ms), which every stop of every test would pay; the children
// skip it, keeping the other GORACE options.
func childEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "BATON_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GORACE="+gorace)
}

func signaled(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// output collects a process's stdout and stderr (the newest maxOutput
// bytes), hands each complete line to onLine, and counts race reports.
type output struct {
	mu      sync.Mutex
	buf     []byte
	dropped int // bytes dropped from the front
	partial []byte
	nraces  int
	onLine  func(line []byte)
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, b...)
	if len(o.buf) > maxOutput {
		n := len(o.buf) - maxOutput/2
		o.buf = append(o.buf[:0], o.buf[n:]...)
		o.dropped += n
	}
	o.partial = append(o.partial, b...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		line := o.partial[:i]
		if bytes.Contains(line, []byte(raceMarker)) {
			o.nraces++
		}
		if o.onLine != nil {
			o.onLine(line)
		}
		o.partial = o.partial[i+1:]
	}
	if len(o.partial) == 0 {
		o.partial = nil // let the consumed prefix go
	} else if len(o.partial) > 64<<10 {
		o.partial = o.partial[len(o.partial)-64<<10:] // a line that never ends
	}
	return len(b), nil
}

// mark writes a line of the framework's own, between runs.
func (o *output) mark(line string) {
	o.mu.Lock()
	if len(o.partial) > 0 {
		o.buf = append(o.buf, '\n')
		o.partial = nil
	}
	o.mu.Unlock()
	o.Write([]byte(line + "\n"))
}

// Len returns the position of the next byte written, counting dropped ones.
func (o *output) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped + len(o.buf)
}

// Since returns the output from position pos (from Len) on.
func (o *output) Since(pos int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := max(pos-o.dropped, 0)
	return string(o.buf[min(i, len(o.buf)):])
}

func (o *output) String() string { return o.Since(0) }

func (o *output) races() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nraces
}
