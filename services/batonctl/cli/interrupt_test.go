//go:build linux

package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/batonrun/baton/test/framework"
)

// child is batonctl run as a process (the binary built from this tree), as
// a user runs it from a shell: its signals are the real ones.
type child struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
}

// startChild starts batonctl with args against etcd, stdin as given (nil:
// /dev/null).
func startChild(t *testing.T, etcd string, stdin *os.File, args ...string) *child {
	t.Helper()
	c := &child{done: make(chan error, 1)}
	c.cmd = exec.Command(framework.Binary(t, "batonctl"),
		append([]string{"--etcd-endpoints", etcd, "--queue-addr", deadAddr, "--observer-addr", deadAddr, "--timeout", "2s"}, args...)...)
	c.cmd.Env = []string{"HOME=" + t.TempDir()} // none of the developer's BATON_BATONCTL_ settings
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = stdin, &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// interrupt sends sig and returns the exit status, failing the test if
// batonctl is still running 10 seconds later.
func (c *child) interrupt(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("batonctl was killed by %v instead of ending on it\nstderr:\n%s", ws.Signal(), c.stderr.String())
		}
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("batonctl went on reading 10s after %v\nstderr:\n%s", sig, c.stderr.String())
	}
	return 0
}

// waitsIn reports whether a thread of process pid sleeps in the kernel
// function fn (its wchan); the test is skipped where /proc does not say.
func waitsIn(t *testing.T, pid int, fn string) bool {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
	if err != nil || len(tasks) == 0 {
		t.Skipf("no /proc/%d/task/*/wchan here: %v", pid, err)
	}
	for _, p := range tasks {
		if b, err := os.ReadFile(p); err == nil && string(b) == fn {
			return true
		}
	}
	return false
}

// drained waits until the reader of the pipe whose write end is w has
// read everything written to it.
func drained(t *testing.T, w *os.File) {
	t.Helper()
	eventually(t, 15*time.Second, "batonctl read what was written", func() bool {
		n, err := unix.IoctlGetInt(int(w.Fd()), unix.TIOCINQ) // FIONREAD: the bytes not yet read
		if err != nil {
			t.Fatalf("FIONREAD: %v", err)
		}
		return n == 0
	})
}

// assertNothingStored fails if etcd holds an object.
func assertNothingStored(t *testing.T, endpoint string) {
	t.Helper()
	resp, err := etcdClient(t, endpoint).Get(t.Context(), "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("an interrupted apply stored %d objects", resp.Count)
	}
}

// TestApplyInterruptedWhileReading: apply -f reads its input with the
// command's context, so Ctrl-C or SIGTERM ends it while it waits for a
// FIFO's writer, for a writer that never closes the FIFO, or for stdin
// that never ends: an error that says so, exit 1, nothing applied.
func TestApplyInterruptedWhileReading(t *testing.T) {
	etcd := startEtcd(t)
	const partial = "kind: Pod\nmetadata:\n  name: web\n" // a document the writer has not finished

	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		cause := map[os.Signal]string{os.Interrupt: "interrupt signal received", syscall.SIGTERM: "terminated signal received"}[sig]

		t.Run("a FIFO no one writes/"+sig.String(), func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "web.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			c := startChild(t, etcd, nil, "apply", "-f", fifo)
			// Opening a FIFO to read waits for a writer, in the kernel's
			// wait_for_partner.
			eventually(t, 15*time.Second, "batonctl waits for the FIFO's writer", func() bool { return waitsIn(t, c.cmd.Process.Pid, "wait_for_partner") })
			code := c.interrupt(t, sig)
			want := "error: " + fifo + ": reading stopped before its end: " + cause + "; nothing was applied\n"
			if code != 1 || c.stderr.String() != want || c.stdout.String() != "" {
				t.Errorf("exit %d\nstdout %q\nstderr %q\nwant 1 and stderr %q", code, c.stdout.String(), c.stderr.String(), want)
			}
			assertNothingStored(t, etcd)
		})

		t.Run("a FIFO whose writer does not close it/"+sig.String(), func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "web.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			c := startChild(t, etcd, nil, "apply", "-f", fifo)
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once batonctl has opened it
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.WriteString(partial); err != nil {
				t.Fatal(err)
			}
			drained(t, w)
			code := c.interrupt(t, sig)
			if code != 1 || !strings.Contains(c.stderr.String(), fifo+": reading stopped before its end: "+cause+"; nothing was applied") {
				t.Errorf("exit %d, stderr %q", code, c.stderr.String())
			}
			assertNothingStored(t, etcd)
		})

		t.Run("stdin that does not end/"+sig.String(), func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			c := startChild(t, etcd, r, "apply", "-f", "-")
			r.Close()
			if _, err := w.WriteString(partial); err != nil {
				t.Fatal(err)
			}
			drained(t, w)
			code := c.interrupt(t, sig)
			want := "error: <stdin>: reading stopped before its end: " + cause + "; nothing was applied\n"
			if code != 1 || c.stderr.String() != want {
				t.Errorf("exit %d, stderr %q, want %q", code, c.stderr.String(), want)
			}
			assertNothingStored(t, etcd)
		})
	}

	// delete -f reads the same way.
	t.Run("delete -f from stdin", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		c := startChild(t, etcd, r, "delete", "-f", "-")
		r.Close()
		if _, err := w.WriteString(partial); err != nil {
			t.Fatal(err)
		}
		drained(t, w)
		if code := c.interrupt(t, os.Interrupt); code != 1 || !strings.Contains(c.stderr.String(), "<stdin>: reading stopped before its end: interrupt signal received; nothing was deleted") {
			t.Errorf("exit %d, stderr %q", code, c.stderr.String())
		}
	})
}
