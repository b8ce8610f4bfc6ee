package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/test/framework"
)

// The markers around each part of docs/workers.md's "Depending on the SDK"
// that the test follows: <!-- name --> before it, <!-- /name --> after.
const (
	markVersions     = "sdk-versions"
	markMain         = "sdk-main"
	markReplaceInit  = "sdk-replace-init"
	markReplaceLines = "sdk-replace-lines"
	markReplaceBuild = "sdk-replace-build"
	markList         = "sdk-list"
	markWorkInit     = "sdk-work-init"
	markWorkBuild    = "sdk-work-build"
)

// cloneInDoc stands for the clone's path in the replace lines the section
// shows.
const cloneInDoc = "/path/to/baton"

// sectionBound bounds the whole test: each way runs a few go commands that
// find every module in the module cache and most packages in the build
// cache, so this is far more than they take.
const sectionBound = 5 * time.Minute

// declareBound bounds the wait for the section's program to publish its
// declaration: it starts at once, and the manager gives up on etcd after
// a few seconds of retries (package declare), so this is far more.
const declareBound = time.Minute

// stopBound bounds the program's exit after SIGTERM: nothing is in flight.
const stopBound = 30 * time.Second

// TestDependingOnTheSDK does what docs/workers.md's "Depending on the SDK"
// says, word for word, in directories outside the repository: both ways
// of requiring the SDK build the section's main.go, and the module built
// uses the etcd client and gRPC at the versions the SDK's go.mod names,
// which the section's table and output also show. The program built the
// replace way, with nothing but the three replace lines, then runs
// against an etcd that requires mutual TLS, given etcdctl's flags, which
// it takes with the SDK's etcdconn. The commands, go.mod lines and
// program come from the doc itself, so the two cannot drift apart.
func TestDependingOnTheSDK(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "workers.md"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), sectionBound)
	defer cancel()

	pins := sdkPins(ctx, t, filepath.Join(root, "sdk"))
	table := versionTable(t, section(t, doc, markVersions))
	for _, mod := range []string{"go", etcdClient, grpc} {
		if table[mod] != pins[mod] {
			t.Errorf("the section's table says %s %q; sdk/go.mod says %q", mod, table[mod], pins[mod])
		}
	}
	wantList := etcdClient + " " + pins[etcdClient] + "\n" + grpc + " " + pins[grpc]
	if got := code(t, doc, markList); got != wantList {
		t.Errorf("the section shows go list -m printing\n%s\nwant sdk/go.mod's versions\n%s", got, wantList)
	}
	mainGo := code(t, doc, markMain)

	t.Run("replace", func(t *testing.T) {
		dir := outside(t, root)
		run(ctx, t, dir, root, code(t, doc, markReplaceInit))
		var replaced []string
		for _, r := range goModJSON(ctx, t, dir).Replace {
			replaced = append(replaced, "replace "+r.Old.Path+" => "+r.New.Path)
		}
		var want []string
		for _, l := range strings.Split(code(t, doc, markReplaceLines), "\n") {
			if l != "" {
				want = append(want, strings.ReplaceAll(l, cloneInDoc, root))
			}
		}
		if strings.Join(replaced, "\n") != strings.Join(want, "\n") || len(want) != 3 {
			t.Errorf("go.mod's replace lines are\n%s\nthe section shows (three)\n%s", strings.Join(replaced, "\n"), strings.Join(want, "\n"))
		}
		writeMain(t, dir, mainGo)
		if got := run(ctx, t, dir, root, code(t, doc, markReplaceBuild)); got != wantList {
			t.Errorf("go list -m printed\n%s\nwant the SDK's versions\n%s", got, wantList)
		}
		declaresOverTLS(ctx, t, dir, root)
	})

	t.Run("work", func(t *testing.T) {
		dir := outside(t, root)
		run(ctx, t, dir, root, code(t, doc, markWorkInit))
		writeMain(t, dir, mainGo)
		if got := run(ctx, t, dir, root, code(t, doc, markWorkBuild)); got != wantList {
			t.Errorf("go list -m printed\n%s\nwant the SDK's versions\n%s", got, wantList)
		}
	})
}

const (
	etcdClient = "go.etcd.io/etcd/client/v3"
	grpc       = "google.golang.org/grpc"
)

// section returns what lies between the markers named name.
func section(t *testing.T, doc []byte, name string) string {
	t.Helper()
	begin, end := "<!-- "+name+" -->\n", "<!-- /"+name+" -->"
	_, after, ok := strings.Cut(string(doc), begin)
	if !ok {
		t.Fatalf("docs/workers.md has no %q", begin)
	}
	inside, _, ok := strings.Cut(after, end)
	if !ok {
		t.Fatalf("docs/workers.md has no %q after %q", end, begin)
	}
	return inside
}

// code returns the fenced code block between the markers named name,
// without its fences and its last newline.
func code(t *testing.T, doc []byte, name string) string {
	t.Helper()
	s := strings.TrimSpace(section(t, doc, name))
	first, rest, ok := strings.Cut(s, "\n")
	if !ok || !strings.HasPrefix(first, "```") || !strings.HasSuffix(rest, "```") {
		t.Fatalf("between the %s markers of docs/workers.md: want one fenced code block, have\n%s", name, s)
	}
	return strings.TrimSuffix(strings.TrimSuffix(rest, "```"), "\n")
}

// versionTable reads the rows of a markdown table of modules and versions.
func versionTable(t *testing.T, s string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n")[2:] { // past the header and its rule
		cells := strings.Split(strings.Trim(l, "| "), "|")
		if len(cells) != 2 {
			t.Fatalf("the versions table has the row %q", l)
		}
		rows[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
	}
	return rows
}

// goMod is what `go mod edit -json` prints, as far as the test reads it.
type goMod struct {
	Go      string
	Require []struct{ Path, Version string }
	Replace []struct{ Old, New struct{ Path string } }
}

func goModJSON(ctx context.Context, t *testing.T, dir string) goMod {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// sdkPins returns the Go version and the etcd client's and gRPC's versions
// sdk/go.mod names.
func sdkPins(ctx context.Context, t *testing.T, sdk string) map[string]string {
	t.Helper()
	m := goModJSON(ctx, t, sdk)
	pins := map[string]string{"go": m.Go}
	for _, r := range m.Require {
		if r.Path == etcdClient || r.Path == grpc {
			pins[r.Path] = r.Version
		}
	}
	if pins[etcdClient] == "" || pins[grpc] == "" {
		t.Fatalf("sdk/go.mod requires no %s or no %s: %+v", etcdClient, grpc, m.Require)
	}
	return pins
}

// outside returns an empty directory that is not in the repository, as
// the section starts from (a go.work above it would change what the go
// command does).
func outside(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the temporary directory %s is inside the repository %s: set TMPDIR elsewhere", dir, root)
	}
	return dir
}

func writeMain(t *testing.T, dir, src string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs the section's commands in dir as a user's shell would, with
// BATON set to the clone, and returns what they printed on stdout. The
// environment is the test's (the module proxy, the module and build
// caches) without GOWORK: make test sets GOWORK=off, which would switch
// off the workspace of the go work way.
func run(ctx context.Context, t *testing.T, dir, root, script string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "sh", "-ec", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "BATON=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "BATON="+root)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s:\n%s\nfailed: %v\nstdout:\n%s\nstderr:\n%s", dir, script, err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// declaresOverTLS builds the section's program in dir and runs it against
// an embedded etcd that serves only TLS and requires a client certificate
// of its CA, with the flags the section names (etcdctl's, which the SDK's
// etcdconn registers). Before it leases, the program publishes its
// declaration in etcd: finding it there shows that etcdconn took the
// flags and the client presented the certificate, since etcd refuses a
// client without one. No queue or observer runs: the program leases from
// an address nothing listens on until SIGTERM stops it, and it must then
// exit 0.
func declaresOverTLS(ctx context.Context, t *testing.T, dir, root string) {
	t.Helper()
	run(ctx, t, dir, root, "go build -o foo .")
	etcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: framework.NewCerts(t)})
	nowhere := unusedAddr(t)
	args := append([]string{"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","),
		"--queue-addr", nowhere, "--observer-addr", nowhere}, etcd.ClientFlags()...)
	pctx, kill := context.WithCancel(ctx) // kills the program if the test ends first
	t.Cleanup(kill)
	cmd := exec.CommandContext(pctx, filepath.Join(dir, "foo"), args...)
	var stderr bytes.Buffer // read only once the program has exited
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	key := kinds.DeclarationPrefix + "foos"
	deadline := time.Now().Add(declareBound)
	var value []byte
	for {
		if resp, err := etcd.Client.Get(ctx, key); err == nil && len(resp.Kvs) == 1 {
			value = resp.Kvs[0].Value
			break
		}
		if time.Now().After(deadline) {
			kill()
			<-exited
			t.Fatalf("the program published nothing at %s within %v; its log:\n%s", key, declareBound, stderr.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("the program exited before it published %s: %v; its log:\n%s", key, err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	var d kinds.Declaration
	if err := json.Unmarshal(value, &d); err != nil || d.Queue != "foos" || d.For.Resource != "foos" || d.For.Kind != "Foo" {
		t.Errorf("%s holds %s (%v), want the declaration of queue foos, For Foo", key, value, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM the program exited with %v, want 0; its log:\n%s", err, stderr.String())
		}
	case <-time.After(stopBound):
		kill()
		<-exited
		t.Errorf("the program did not exit within %v of SIGTERM; its log:\n%s", stopBound, stderr.String())
	}
}

// unusedAddr returns a loopback address nothing listened on a moment ago.
func unusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
