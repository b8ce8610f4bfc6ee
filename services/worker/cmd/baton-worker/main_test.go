package main

import (
	"fmt"
	"net"
	"net/http"
	"testing"
)

func TestHealthcheck(t *testing.T) {
	ok := http.NewServeMux()
	ok.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	bad := http.NewServeMux()
	bad.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	})
	serveOn := func(h http.Handler) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return l.Addr().String()
	}
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"ready", []string{"healthcheck", "--http-addr", serveOn(ok)}, 0},
		{"not ready", []string{"healthcheck", "--http-addr", serveOn(bad)}, 1},
		{"bad flag", []string{"healthcheck", "--no-such-flag"}, 2},
	}
	for _, tt := range tests {
		if got := run(tt.args); got != tt.want {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.want)
		}
	}
	// Flags can come from the environment, BATON_WORKER_<FLAG>.
	t.Setenv("BATON_WORKER_HTTP_ADDR", serveOn(ok))
	if got := run([]string{"healthcheck"}); got != 0 {
		t.Errorf("healthcheck with BATON_WORKER_HTTP_ADDR: exit %d, want 0", got)
	}
}
