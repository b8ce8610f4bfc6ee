package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/services/batonctl/cli"
)

// TestTLSStackWithPrintedFlags runs `baton-dev --tls` as make run TLS=1
// does (on free ports, and with etcd's authentication on) and drives it
// with batonctl given exactly the flags it printed; without them batonctl
// is refused.
func TestTLSStackWithPrintedFlags(t *testing.T) {
	data := t.TempDir()
	pw := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(pw, []byte("correct horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--tls", "--data-dir", data, "--log-level", "warn",
		"--etcd-username", "baton", "--etcd-password-file", pw,
		"--etcd-client-url", "http://127.0.0.1:0",
		"--queue-grpc-addr", "127.0.0.1:0", "--queue-http-addr", "127.0.0.1:0",
		"--observer-grpc-addr", "127.0.0.1:0", "--observer-http-addr", "127.0.0.1:0",
		"--worker-http-addr", "127.0.0.1:0",
		"--rules", filepath.Join("..", "..", "..", "experiment", "rules.yaml"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("baton-dev exited with %v on SIGTERM\n%s", err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Error("baton-dev did not stop within 60 s of SIGTERM")
		}
	}()

	// The banner's alias line holds batonctl's flags.
	aliasc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "alias batonctl='"); ok {
				aliasc <- strings.TrimSuffix(line, "'")
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	var alias string
	select {
	case alias = <-aliasc:
	case err := <-exited:
		t.Fatalf("baton-dev exited: %v\n%s", err, stderr.String())
	case <-time.After(120 * time.Second):
		t.Fatalf("no alias line printed in 120 s\n%s", stderr.String())
	}
	flags := strings.Fields(alias)[1:] // after bin/batonctl
	if _, err := os.Stat(filepath.Join(data, "certs", "admin.crt")); err != nil {
		t.Errorf("the certificates are not under --data-dir/certs: %v", err)
	}
	for _, f := range []string{"--cacert", "--cert", "--key", "--etcd-cacert", "--etcd-cert", "--etcd-key", "--etcd-endpoints", "--queue-addr", "--observer-addr", "--etcd-username", "--etcd-password-file"} {
		if !strings.Contains(" "+alias+" ", " "+f+" ") {
			t.Errorf("printed flags %q lack %s", alias, f)
		}
	}

	batonctl := func(flags []string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		code := cli.Main(ctx, append(append([]string(nil), flags...), args...), cli.IO{
			Stdout: &out, Stderr: &errb, Lookup: func(string) (string, bool) { return "", false },
		})
		return code, out.String() + errb.String()
	}
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	os.WriteFile(pod, []byte("kind: Pod\nmetadata:\n  name: hello\nspec:\n  image: x\n"), 0o644)
	if code, out := batonctl(flags, "apply", "-f", pod); code != 0 {
		t.Fatalf("batonctl apply with the printed flags: exit %d\n%s", code, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out := batonctl(flags, "get", "pods")
		if code == 0 && strings.Contains(out, "Running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod never ran (the worker over mutual TLS): exit %d\n%s", code, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, out := batonctl(flags, "queue", "stats"); code != 0 || !strings.Contains(out, "pods") {
		t.Errorf("batonctl queue stats with the printed flags: exit %d\n%s", code, out)
	}

	// Without the certificate flags: the addresses alone are refused.
	var addrsOnly []string
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i] == "--queue-addr" || flags[i] == "--observer-addr" {
			addrsOnly = append(addrsOnly, flags[i], flags[i+1])
		}
	}
	if code, out := batonctl(append(addrsOnly, "--timeout", "3s"), "queue", "stats"); code != 1 || !strings.Contains(out, "give --cacert, --cert and --key") {
		t.Errorf("batonctl without certificates: exit %d\n%s", code, out)
	}
}
