package manifest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// readInBackground runs Read of paths, stdin as given, and returns what it
// returns on a channel.
func readInBackground(ctx context.Context, paths []string, stdin io.Reader) <-chan error {
	done := make(chan error, 1)
	go func() {
		objs, err := Read(ctx, paths, false, stdin, "", nil)
		if err == nil || objs != nil {
			err = errors.Join(err, errors.New("objects returned"))
		}
		done <- err
	}()
	return done
}

// interrupted waits, at most 10 seconds, for Read's error, and checks it
// is an *Interrupted of name.
func interrupted(t *testing.T, done <-chan error, name string) {
	t.Helper()
	select {
	case err := <-done:
		var ie *Interrupted
		if !errors.As(err, &ie) || ie.Name != name || !errors.Is(err, context.Canceled) {
			t.Errorf("Read = %v, want an *Interrupted of %s that is context.Canceled", err, name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read went on 10s after its context ended")
	}
}

// TestReadStopsWithItsContext: Read returns as soon as its context ends,
// while stdin has not ended; and at once when it has ended already.
func TestReadStopsWithItsContext(t *testing.T) {
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close() }) // ends the read Read left behind
	ctx, cancel := context.WithCancel(t.Context())
	done := readInBackground(ctx, []string{Stdin}, r)
	// A write returns once it is read: Read is reading.
	if _, err := io.WriteString(w, "kind: Pod\nmetadata:\n"); err != nil {
		t.Fatal(err)
	}
	cancel()
	interrupted(t, done, StdinName)
	if got := (&Interrupted{Name: StdinName, Cause: context.Cause(ctx)}).Error(); got != "<stdin>: reading stopped before its end: context canceled" {
		t.Errorf("message %q", got)
	}

	interrupted(t, readInBackground(ctx, []string{Stdin}, r), StdinName)
}
