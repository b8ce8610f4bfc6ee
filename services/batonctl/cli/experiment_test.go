package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeExperiment writes, into dir, a baton-experiment that prints its
// arguments one a line and what it read on stdin, says something on
// stderr, and exits with the status its last argument names as exit=N. It stands in for the real one (services/experiment, which tests
// itself against a running stack): batonctl's part is to find it and hand
// it the command line.
func fakeExperiment(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, experimentCommand)
	script := `#!/bin/sh
for a in "$@"; do echo "arg $a"; done
echo "stdin $(cat)"
echo "from the experiment" >&2
for last in "$@"; do :; done
case "$last" in exit=*) exit "${last#exit=}";; esac
exit 0
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// experimentRun is one run of batonctl by runWithPath.
type experimentRun struct {
	code           int
	stdout, stderr string
}

// runWithPath runs batonctl in-process with PATH as its whole environment.
func runWithPath(t *testing.T, path, stdin string, args ...string) experimentRun {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(t.Context(), args, IO{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Lookup: func(k string) (string, bool) {
			if k == "PATH" && path != "" {
				return path, true
			}
			return "", false
		},
	})
	return experimentRun{code: code, stdout: out.String(), stderr: errb.String()}
}

// TestExperimentCommand: `batonctl experiment …` runs baton-experiment from
// PATH with batonctl's global flags first (given before or after the
// command, or the defaults), passes the rest, its streams and its exit
// status through, and says in one line what to do when there is none.
func TestExperimentCommand(t *testing.T) {
	dir := t.TempDir()
	fakeExperiment(t, dir)
	path := "relative/dir" + string(os.PathListSeparator) + dir

	r := runWithPath(t, path, "hello", "--queue-addr", "q.example:7070", "experiment", "repeat", "--notifications", "5", "--observer-addr", "o.example:7071")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	want := "arg --etcd-endpoints=" + DefaultEtcdEndpoints + "\narg --queue-addr=q.example:7070\narg --observer-addr=o.example:7071\narg --timeout=5s\n" +
		"arg repeat\narg --notifications\narg 5\nstdin hello\n"
	if r.stdout != want {
		t.Errorf("baton-experiment was given\n%s\nwant\n%s", r.stdout, want)
	}
	if r.stderr != "from the experiment\n" {
		t.Errorf("stderr %q, want the experiment's own", r.stderr)
	}

	// The certificate flags under baton-experiment's names, etcd's as
	// they are.
	r = runWithPath(t, path, "", "--cacert", "ca.crt", "--cert", "admin.crt", "--key", "admin.key", "--etcd-cacert", "eca.crt",
		"--etcd-username", "root", "--etcd-password-file", "pw", "experiment", "clean")
	want = "arg --etcd-endpoints=" + DefaultEtcdEndpoints + "\narg --queue-addr=" + DefaultQueueAddr + "\narg --observer-addr=" + DefaultObserverAddr + "\narg --timeout=5s\n" +
		"arg --tls-ca-file=ca.crt\narg --tls-cert-file=admin.crt\narg --tls-key-file=admin.key\narg --etcd-cacert=eca.crt\narg --etcd-username=root\narg --etcd-password-file=pw\narg clean\nstdin \n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("with certificates, baton-experiment was given (exit %d)\n%s\nwant\n%s", r.code, r.stdout, want)
	}

	// Its exit status is batonctl's, with nothing added to its errors.
	for _, code := range []string{"1", "2"} {
		r := runWithPath(t, path, "", "experiment", "burst", "exit="+code)
		if want := int(code[0] - '0'); r.code != want || r.stderr != "from the experiment\n" {
			t.Errorf("experiment exiting %s: batonctl exit %d, stderr %q", code, r.code, r.stderr)
		}
	}

	// None on PATH (a relative entry does not count).
	r = runWithPath(t, "relative/dir", "", "experiment", "repeat")
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 ||
		!strings.Contains(r.stderr, "error: batonctl experiment runs baton-experiment, which is not beside batonctl (in ") ||
		!strings.Contains(r.stderr, "or on PATH: `make build` puts it in bin/") {
		t.Errorf("no baton-experiment: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestFindExperiment: the binary beside batonctl wins over PATH's.
func TestFindExperiment(t *testing.T) {
	self, onPath := t.TempDir(), t.TempDir()
	beside := fakeExperiment(t, self)
	inPath := fakeExperiment(t, onPath)
	executable := func() (string, error) { return filepath.Join(self, "batonctl"), nil }
	lookup := func(string) (string, bool) { return onPath, true }
	if got, err := findExperiment(executable, lookup); err != nil || got != beside {
		t.Errorf("with one beside and one on PATH: %q, %v; want %q", got, err, beside)
	}
	if got, err := findExperiment(func() (string, error) { return "", errors.New("unknown") }, lookup); err != nil || got != inPath {
		t.Errorf("only on PATH: %q, %v; want %q", got, err, inPath)
	}
	if err := os.Chmod(inPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := findExperiment(func() (string, error) { return "", errors.New("unknown") }, lookup); err == nil || !strings.Contains(err.Error(), "which is not on PATH") {
		t.Errorf("not executable: %q, %v; want an error", got, err)
	}
}
