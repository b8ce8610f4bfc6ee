package queue_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestStrayArgumentsAreRefused: `baton-queue extra-arg` once started
// serving, and made ./data/queue wherever it ran. Every word the binary does
// not know is a usage error: exit 2, a usage line, nothing created.
func TestStrayArgumentsAreRefused(t *testing.T) {
	for _, args := range [][]string{{"extra-arg"}, {"--grpc-addr", "127.0.0.1:0", "extra"}, {"healthcheck", "extra"}, {"repair", "extra"}, {"helthcheck"}} {
		cmd := exec.Command(binary, args...)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: baton-queue") {
			t.Errorf("baton-queue %v: %v, output %q; want exit 2 and a usage line", args, err, out)
		}
		if entries, _ := os.ReadDir(cmd.Dir); len(entries) != 0 {
			t.Errorf("baton-queue %v created %v in its directory", args, entries)
		}
	}
}
