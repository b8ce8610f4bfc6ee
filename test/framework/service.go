package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
)

// A Baton binary logs, at info level, one line once its listeners are
// bound (services/runtime/serve):
//
//	{"level":"INFO","msg":"serving","service":"baton-queue","grpc":"127.0.0.1:40321","http":"127.0.0.1:40322"}
//
// so the framework starts it on 127.0.0.1:0, reads the ports the kernel
// chose from that line, and passes them explicitly to every later start:
// no port is picked free and then raced for, and a restart comes up where
// the clients already dial.
type servingLine struct {
	Msg     string `json:"msg"`
	Service string `json:"service"`
	GRPC    string `json:"grpc"`
	HTTP    string `json:"http"`
}

// service is a Baton binary's process with its bound addresses.
type service struct {
	*Process
	mu                 sync.Mutex
	grpcAddr, httpAddr string // from the first run's serving line, then fixed
	served             bool   // this run has logged its serving line
}

// serviceSpec describes how to start one Baton binary.
type serviceSpec struct {
	name string
	// flags returns the listen flags for the addresses ("127.0.0.1:0" on
	// the first start).
	flags func(grpcAddr, httpAddr string) []string
	// args are the other flags, options' and callers'.
	args []string
	// noWaitReady returns once the listeners are bound, before /readyz
	// answers 200.
	noWaitReady bool
	// tls, if set, is what /readyz is probed with, over HTTPS: the
	// service's own certificate.
	tls *tlsfiles.Source
}

// httpClient probes /readyz; each probe is bounded by its context.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// startService builds and starts a Baton binary and waits until it is
// ready. It fails the test if it cannot.
func startService(t testing.TB, spec serviceSpec) *service {
	t.Helper()
	s := newService(t, spec)
	s.Start()
	return s
}

// newService builds a Baton binary and prepares its process.
func newService(t testing.TB, spec serviceSpec) *service {
	t.Helper()
	if err := checkArgs(spec.args); err != nil {
		t.Fatalf("framework: %s: %v", spec.name, err)
	}
	bin := Binary(t, spec.name)
	s := &service{grpcAddr: "127.0.0.1:0", httpAddr: "127.0.0.1:0"}
	s.Process = newProcess(t, spec.name, bin, func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.served = false
		// --log-level first: the serving line is an info line; callers'
		// flags come last, so they win.
		args := append([]string{"--log-level", "info"}, spec.flags(s.grpcAddr, s.httpAddr)...)
		return append(args, spec.args...)
	})
	s.out.onLine = s.line
	s.ready = func(ctx context.Context) error {
		s.mu.Lock()
		served, httpAddr := s.served, s.httpAddr
		s.mu.Unlock()
		if !served {
			return fmt.Errorf("no serving line logged yet")
		}
		if spec.noWaitReady {
			return nil
		}
		return probeReady(ctx, httpAddr, spec.tls)
	}
	return s
}

// line learns the bound addresses from the serving line.
func (s *service) line(b []byte) {
	if !strings.Contains(string(b), `"msg":"serving"`) {
		return
	}
	var l servingLine
	if json.Unmarshal(b, &l) != nil || l.Msg != "serving" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.GRPC != "" {
		s.grpcAddr = l.GRPC
	}
	s.httpAddr = l.HTTP
	s.served = true
}

// addrs returns the bound gRPC and HTTP addresses.
func (s *service) addrs() (grpcAddr, httpAddr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grpcAddr, s.httpAddr
}

// probeReady returns nil when GET /readyz answers 200; over HTTPS with
// src, verifying the service's certificate for 127.0.0.1.
func probeReady(ctx context.Context, httpAddr string, src *tlsfiles.Source) error {
	scheme, client := "http", httpClient
	if src != nil {
		scheme = "https"
		client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: src.ClientConfig("127.0.0.1")}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+httpAddr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// checkArgs refuses a --log-level that would hide the serving line.
func checkArgs(args []string) error {
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "log-level" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		if v := strings.ToLower(value); v != "debug" && v != "info" {
			return fmt.Errorf("--log-level %s would hide the info line the framework reads the bound addresses from (use debug or info)", value)
		}
	}
	return nil
}

// durationFlag appends --name d when d is set.
func durationFlag(args []string, name string, d time.Duration) []string {
	if d == 0 {
		return args
	}
	return append(args, "--"+name, d.String())
}

// testGracePeriod is every service's --grace-period unless options say
// otherwise: the binaries' 10 s would only slow a test's cleanup.
const testGracePeriod = time.Second
