package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// experimentCommand is the program behind `batonctl experiment`: the
// experiments drive the servers, with the worker SDK, so they live in their
// own module and binary (services/experiment) rather than in batonctl.
const experimentCommand = "baton-experiment"

// experimentCleanup bounds how long batonctl waits, after passing an
// interrupt on, for the experiment to clean up and exit (its cleanup is
// bounded at 30 s).
const experimentCleanup = 40 * time.Second

// cmdExperiment runs baton-experiment as kubectl runs a plugin: the binary
// found beside batonctl's own, else on PATH, with batonctl's global flags
// first and the rest of the command line as given; it reads and writes
// batonctl's stdin, stdout and stderr, and batonctl exits with its status.
func cmdExperiment(ctx context.Context, a *app, args []string) error {
	path, err := findExperiment(os.Executable, a.lookupEnv)
	if err != nil {
		return err
	}
	argv := []string{
		"--etcd-endpoints=" + a.etcdEndpoints,
		"--queue-addr=" + a.queueAddr,
		"--observer-addr=" + a.observerAddr,
		"--timeout=" + a.timeout.String(),
	}
	// The certificate flags, under the experiment's names (a Baton
	// binary's: --tls-cert-file …; etcd's are the same in both).
	for _, f := range []struct{ flag, value string }{
		{"tls-ca-file", a.tlsFiles.CAFile}, {"tls-cert-file", a.tlsFiles.CertFile}, {"tls-key-file", a.tlsFiles.KeyFile},
		{"etcd-cacert", a.etcdConn.CACert}, {"etcd-cert", a.etcdConn.Cert}, {"etcd-key", a.etcdConn.Key},
		{"etcd-username", a.etcdConn.Username}, {"etcd-password-file", a.etcdConn.PasswordFile},
	} {
		if f.value != "" {
			argv = append(argv, "--"+f.flag+"="+f.value)
		}
	}
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.Stdin, a.Stdout, a.Stderr
	// Ctrl-C (or SIGTERM) reaches batonctl: pass it on as an interrupt, so
	// the experiment deletes its objects and forgets its keys, instead of
	// the SIGKILL CommandContext sends by default.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = experimentCleanup
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		// baton-experiment has said what went wrong on stderr.
		return exitStatus(ee.ExitCode())
	case errors.As(err, &ee):
		return fmt.Errorf("%s: %v", path, ee) // killed by a signal
	}
	return fmt.Errorf("run %s: %w", path, err)
}

// findExperiment returns the baton-experiment binary beside the running
// batonctl (make build puts both in bin/), else the first on PATH (read
// through lookup), as kubectl finds its plugins.
func findExperiment(executable func() (string, error), lookup func(string) (string, bool)) (string, error) {
	beside := ""
	if self, err := executable(); err == nil {
		beside = filepath.Dir(self)
		if p := filepath.Join(beside, experimentCommand); isExecutable(p) {
			return p, nil
		}
	}
	path, _ := lookup("PATH")
	for _, dir := range filepath.SplitList(path) {
		// A relative PATH entry would run whatever the current directory
		// holds (Go's exec.LookPath refuses those too).
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		if p := filepath.Join(dir, experimentCommand); isExecutable(p) {
			return p, nil
		}
	}
	where := "on PATH"
	if beside != "" {
		where = "beside batonctl (in " + beside + ") or on PATH"
	}
	return "", fmt.Errorf("batonctl experiment runs %s, which is not %s: `make build` puts it in bin/, or build it from services/experiment/cmd/%s", experimentCommand, where, experimentCommand)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// lookupEnv reads the environment as the IO says.
func (a *app) lookupEnv(k string) (string, bool) {
	if a.Lookup != nil {
		return a.Lookup(k)
	}
	return os.LookupEnv(k)
}

// exitStatus is a status to exit with and nothing to print: the program
// batonctl ran has printed its own errors.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
