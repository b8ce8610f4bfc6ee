package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestPprof: /debug/pprof/ is served only when asked for (it exposes the
// command line and costs CPU when profiled).
func TestPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			addr := make(chan string, 1)
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Options{Name: "test", HTTPAddr: "127.0.0.1:0", Pprof: on, GracePeriod: time.Second,
					OnListen: func(_, h net.Addr) { addr <- h.String() }})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			var h string
			select {
			case h = <-addr:
			case err := <-done:
				t.Fatalf("Run: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("not listening after 10 s")
			}
			resp, err := http.Get("http://" + h + "/debug/pprof/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if resp.StatusCode != want {
				t.Errorf("Pprof %v: /debug/pprof/cmdline answered %d, want %d", on, resp.StatusCode, want)
			}
		})
	}
}
