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

// TestBadMemberFlagsExit2: a bad --name or --advertise-addr, on the command
// line or as BATON_QUEUE_<FLAG>, is a usage error: exit 2, one line naming
// the flag and what is wrong, nothing created. So are the other values
// Validate checks, which once made Run fail with exit 1 in the JSON log.
func TestBadMemberFlagsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--name", "queue 0"}, want: `baton-queue: --name "queue 0" has " " at byte 5: a member name is letters, digits, '.', '-' and '_'`},
		{env: "BATON_QUEUE_NAME=q=0", want: `baton-queue: --name "q=0" has "=" at byte 1: a member name is letters, digits, '.', '-' and '_'`},
		{args: []string{"--advertise-addr", "0.0.0.0:7070"}, want: `baton-queue: --advertise-addr "0.0.0.0:7070" has the wildcard host 0.0.0.0, where a process listens: give the host others dial`},
		{env: "BATON_QUEUE_ADVERTISE_ADDR=queue-0", want: `baton-queue: --advertise-addr "queue-0" is not host:port`},
		{args: []string{"--max-queues", "0"}, want: "baton-queue: --max-queues must be at least 1, not 0"},
	} {
		cmd := exec.Command(binary, append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.args...)...)
		cmd.Dir = t.TempDir()
		if tc.env != "" {
			cmd.Env = append(os.Environ(), tc.env)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("baton-queue %v %s: %v, output %q; want exit 2 and the one line %q", tc.args, tc.env, err, out, tc.want)
		}
		if entries, _ := os.ReadDir(cmd.Dir); len(entries) != 0 {
			t.Errorf("baton-queue %v %s created %v in its directory", tc.args, tc.env, entries)
		}
	}
}
