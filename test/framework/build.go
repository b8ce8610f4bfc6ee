package framework

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// buildTimeout bounds one `go build`: a cold build cache on two cores
// compiles gRPC, etcd's client and Baton in a few minutes.
const buildTimeout = 10 * time.Minute

// binDirEnv names a directory of prebuilt binaries to run instead of
// building them (e.g. bin/ after `make build`, or binaries built elsewhere).
const binDirEnv = "BATON_TEST_BIN_DIR"

var (
	// mainRunning is set by RunTests; Binary refuses to build without it,
	// since nothing else would remove what it built.
	mainRunning atomic.Bool

	binDirOnce sync.Once
	binDir     string
	binDirErr  error

	builds sync.Map // binary name → *build
)

// build is one binary, built once per test process.
type build struct {
	once sync.Once
	path string
	err  error
}

// RunTests runs the tests of m and then removes the binaries Binary built,
// returning the exit code for os.Exit. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }
func RunTests(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	return code
}

// Binary returns the path of the named Baton command (baton-queue,
// baton-observer, baton-worker, batonctl, or any other under a module's
// cmd/), building it on first use in this test process; parallel tests wait
// for the one build. It fails the test if the build fails.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv(binDirEnv); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("framework: %s=%s: %v", binDirEnv, dir, err)
		}
		return p
	}
	if !mainRunning.Load() {
		t.Fatal("framework: call framework.RunTests from TestMain (it removes the binaries built for the tests)")
	}
	v, _ := builds.LoadOrStore(name, &build{})
	b := v.(*build)
	b.once.Do(func() {
		start := time.Now()
		b.path, b.err = buildBinary(name)
		if b.err == nil {
			t.Logf("framework: built %s in %v", name, time.Since(start).Round(time.Millisecond))
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// buildBinary builds cmd/<name> of whichever module has it and returns a
// path to it in this process's directory.
//
// The build goes to a directory shared by every test process of this
// checkout (one per race mode), where `go build -o` finds the binary up to
// date and does nothing unless the sources changed: of the test packages of
// one `go test ./...`, only the first links it (seconds for a -race binary
// on two cores), and they would all run at once. A lock file serializes
// the builds across processes, and each process runs a hard link of its own
// to the result: go build replaces a binary by renaming or unlinking it,
// never by rewriting it in place, so a later rebuild (someone edited the
// sources meanwhile) cannot change what a running test executes.
func buildBinary(name string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	module, err := moduleOf(root, name)
	if err != nil {
		return "", err
	}
	binDirOnce.Do(func() { binDir, binDirErr = os.MkdirTemp("", "baton-test-bin-") })
	if binDirErr != nil {
		return "", fmt.Errorf("framework: %w", binDirErr)
	}
	shared := sharedBinDir(root)
	if err := os.MkdirAll(shared, 0o755); err != nil {
		return "", fmt.Errorf("framework: %w", err)
	}
	unlock, err := lockFile(filepath.Join(shared, name+".lock"))
	if err != nil {
		return "", fmt.Errorf("framework: lock the build of %s: %w", name, err)
	}
	defer unlock()
	built := filepath.Join(shared, name)
	// Plain `go build` flags (no -trimpath, no -ldflags), so the packages a
	// test binary already compiled come from the build cache.
	args := []string{"build", "-o", built}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/"+name)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	// Each module builds on its own, as scripts/lib.sh has it: in one
	// workspace graph etcd's old dependencies make a googleapis package
	// ambiguous (docs/notes.md). So the build runs in the module's
	// directory, found from the root go.work marks, with GOWORK=off.
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		rel, _ := filepath.Rel(root, module)
		return "", fmt.Errorf("framework: go %v (in %s): %v\n%s", args, rel, err, b)
	}
	out := filepath.Join(binDir, name)
	if err := linkOrCopy(built, out); err != nil {
		return "", fmt.Errorf("framework: %w", err)
	}
	return out, nil
}

// sharedBinDir is where the test processes of the checkout at root build
// their binaries, apart from other checkouts' and the other race mode's.
func sharedBinDir(root string) string {
	sum := sha256.Sum256([]byte(root))
	mode := "norace"
	if raceEnabled {
		mode = "race"
	}
	return filepath.Join(os.TempDir(), "baton-test-bin", fmt.Sprintf("%x-%s", sum[:6], mode))
}

// linkOrCopy makes dst a hard link to src, or a copy where links fail.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// repoRoot is the nearest directory at or above the working directory (a
// test's package directory) that holds go.work.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("framework: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("framework: no go.work above the working directory: run the tests inside the Baton repository")
		}
		dir = parent
	}
}

// moduleOf finds the module directory whose cmd/<name> is the command.
func moduleOf(root, name string) (string, error) {
	for _, pattern := range []string{"services/*/cmd/", "*/cmd/"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern, name))
		if err != nil {
			return "", err
		}
		for _, m := range matches {
			module := filepath.Dir(filepath.Dir(m))
			if _, err := os.Stat(filepath.Join(module, "go.mod")); err == nil {
				return module, nil
			}
		}
	}
	return "", fmt.Errorf("framework: no command %s under %s/services/*/cmd or %s/*/cmd", name, root, root)
}
