package authz

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/prometheus/client_golang/prometheus"
)

// startHTTPS serves h over TLS on 127.0.0.1:0, verifying the client
// certificates that are sent (probes send none), until the test ends.
func startHTTPS(t *testing.T, p *pki, h http.Handler) string {
	t.Helper()
	cfg, err := p.source(t, "dashboard").ServerConfig(tlsfiles.VerifyClientCertIfGiven)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(lis, "", ""); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { srv.Close(); <-done })
	return "https://" + lis.Addr().String()
}

func httpClient(t *testing.T, src *tlsfiles.Source) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: src.ClientConfig("127.0.0.1"), ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestHTTPRules checks the default HTTP rules over real HTTPS: probes for
// anyone, /metrics and the dashboard for viewer and admin, pprof for admin,
// anything else mounted for viewer and admin; a refused request reaches no
// handler, says who and what, and is logged once and counted.
func TestHTTPRules(t *testing.T) {
	p := newPKI(t)
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	a, err := New(Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	mux := http.NewServeMux()
	for _, pattern := range []string{"/healthz", "/readyz", "/metrics", "/", "/api/queues", "/debug/pprof/", "/other/thing"} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			fmt.Fprintln(w, "ok")
		})
	}
	url := startHTTPS(t, p, a.HTTP(mux))

	clients := map[string]*http.Client{"": httpClient(t, p.anonymous(t))}
	for _, ti := range testIdentities {
		clients[ti.name] = httpClient(t, p.source(t, ti.name, ti.orgs...))
	}
	viewers := []string{viewerName, adminName}
	admins := []string{adminName}
	cases := []struct {
		path    string
		allowed []string // nil: everyone, with or without a certificate
	}{
		{"/healthz", nil},
		{"/readyz", nil},
		{"/metrics", viewers},
		{"/", viewers},
		{"/api/queues", viewers},
		{"/other/thing", viewers},
		{"/debug/pprof/", admins},
		{"/debug/pprof/heap", admins},
		// Decided as the mux routes it (it redirects to the clean path,
		// which the client follows).
		{"/healthz/../debug/pprof/heap", admins},
	}
	for _, tc := range cases {
		for who, c := range clients {
			before := served.Load()
			res, err := c.Get(url + tc.path)
			if err != nil {
				t.Fatalf("%s GET %s: %v", who, tc.path, err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			ran := served.Load() - before
			want := http.StatusOK
			switch {
			case tc.allowed == nil:
			case who == "":
				want = http.StatusUnauthorized
			case !contains(tc.allowed, who):
				want = http.StatusForbidden
			}
			if res.StatusCode != want {
				t.Errorf("%q GET %s: %d %s, want %d", who, tc.path, res.StatusCode, body, want)
				continue
			}
			if want == http.StatusOK {
				if ran != 1 {
					t.Errorf("%q GET %s: %d handlers ran, want 1", who, tc.path, ran)
				}
				continue
			}
			if ran != 0 {
				t.Errorf("%q GET %s was refused but reached a handler", who, tc.path)
			}
			msg := string(body)
			if !strings.Contains(msg, cleanPath(tc.path)) || who != "" && !strings.Contains(msg, fmt.Sprintf("%q", who)) {
				t.Errorf("%q GET %s: message %q does not name the identity and the path", who, tc.path, msg)
			}
		}
	}
	// Each refusal once in the log and in the counter: viewer-1 was refused
	// the three pprof requests, the anonymous client every request but the
	// probes.
	if got := deniedCount(t, reg, "HTTP /debug/pprof/", viewerName); got != 3 {
		t.Errorf(`%s{method="HTTP /debug/pprof/",identity=viewer-1} = %v, want 3`, DeniedMetric, got)
	}
	if got := deniedCount(t, reg, "HTTP /", ""); got != 3 {
		t.Errorf(`%s{method="HTTP /",identity=""} = %v, want 3`, DeniedMetric, got)
	}
	if got := logs.lines(`"level":"WARN"`, `"identity":"viewer-1"`); len(got) != 3 {
		t.Errorf("viewer-1's refusals logged %d lines, want 3: %q", len(got), got)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestHTTPPlaintext checks that over plaintext only the probes are served.
func TestHTTPPlaintext(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := a.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Shutdown(context.Background()); <-done }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401, "/": 401} {
		res, err := c.Get("http://" + lis.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s over plaintext: %d, want %d", path, res.StatusCode, want)
		}
	}
}

// TestHTTPPolicy checks that a policy's paths replace the default's, the
// most specific path deciding, and that a path no rule covers is refused.
func TestHTTPPolicy(t *testing.T) {
	policy := mustParse(t, `allow:
  - roles: [viewer]
    paths: [/api/]
  - roles: [admin]
    paths: [/api/admin/, /metrics]
`)
	cases := []struct {
		id   tlsfiles.Identity
		path string
		want string
	}{
		{ident("v", "viewer"), "/api/queues", ""},
		{ident("v", "viewer"), "/api/admin/x", `authz: "v" (roles viewer) may not request /api/admin/x: it needs one of the roles admin`},
		{ident("a", "admin"), "/api/queues", `authz: "a" (roles admin) may not request /api/queues: it needs one of the roles viewer`},
		{ident("a", "admin"), "/metrics", ""},
		{ident("a", "admin"), "/metrics/x", `authz: "a" (roles admin) may not request /metrics/x: no rule of the policy covers it`},
		{ident("a", "admin"), "/", `authz: "a" (roles admin) may not request /: no rule of the policy covers it`},
		{ident("n"), "/healthz", ""},
		{ident("n"), "//readyz", ""},
	}
	for _, tc := range cases {
		err := policy.AuthorizePath(tc.id, tc.path)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s %s:\n got %q\nwant %q", tc.id, tc.path, got, tc.want)
		}
	}
}
