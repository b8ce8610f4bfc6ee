package manager

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when the tests leave a goroutine running Baton's
// code or gRPC's behind: Run must end every goroutine it starts, and a test
// must close every connection it opens. The SDK's module requires nothing
// for its tests alone, so the check is this one, not a library's.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if left := leftBehind(10 * time.Second); left != "" {
			fmt.Fprintf(os.Stderr, "goroutines left behind by the tests:\n\n%s\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

// leftBehind waits up to d for every goroutine with a frame of Baton's or
// gRPC's code to end (a closed connection's goroutines end shortly after
// Close returns), and returns the stacks of those that did not.
func leftBehind(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		var left []string
		// The first stack is this goroutine's, in TestMain.
		for _, g := range strings.Split(allStacks(), "\n\n")[1:] {
			if strings.Contains(g, "github.com/batonrun/baton/") || strings.Contains(g, "google.golang.org/grpc") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func allStacks() string {
	for n := 1 << 16; ; n *= 2 {
		buf := make([]byte, n)
		if k := runtime.Stack(buf, true); k < n {
			return string(buf[:k])
		}
	}
}
