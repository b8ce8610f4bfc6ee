package manifest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a FIFO in a folder of the test's.
func mkfifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.yaml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// eventually polls cond until it holds or 10 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitingForWriter reports whether a thread of this process waits in the
// open of a FIFO for its writer (the kernel's wait_for_partner); the test
// is skipped where /proc does not say.
func waitingForWriter(t *testing.T) bool {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/wchan")
	if err != nil || len(tasks) == 0 {
		t.Skipf("no /proc/self/task/*/wchan here: %v", err)
	}
	for _, p := range tasks {
		if b, err := os.ReadFile(p); err == nil && string(b) == "wait_for_partner" {
			return true
		}
	}
	return false
}

// TestReadFIFOStopsWithItsContext: Read of a FIFO returns as soon as its
// context ends, while it waits for a writer, and while its writer writes
// nothing more; the FIFO it reads is closed then.
func TestReadFIFOStopsWithItsContext(t *testing.T) {
	t.Run("no writer", func(t *testing.T) {
		fifo := mkfifo(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := readInBackground(ctx, []string{fifo}, nil)
		eventually(t, "Read waits for the FIFO's writer", func() bool { return waitingForWriter(t) })
		cancel()
		interrupted(t, done, fifo)
		// The open Read left waits on: a writer ends it, and the file it
		// opens is closed at once.
		w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatalf("no reader waits at the FIFO: %v", err)
		}
		defer w.Close()
		eventually(t, "the reader left behind closes the FIFO", func() bool {
			_, err := w.Write([]byte("x"))
			return errors.Is(err, syscall.EPIPE)
		})
	})

	t.Run("a writer that writes no more", func(t *testing.T) {
		fifo := mkfifo(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := readInBackground(ctx, []string{fifo}, nil)
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once Read has opened it
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.WriteString("kind: Pod\n"); err != nil {
			t.Fatal(err)
		}
		cancel()
		interrupted(t, done, fifo)
		eventually(t, "Read closes the FIFO", func() bool {
			_, err := w.Write([]byte("x"))
			return errors.Is(err, syscall.EPIPE)
		})
	})
}
