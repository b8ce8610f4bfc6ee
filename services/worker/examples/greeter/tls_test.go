package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/test/framework"
)

func noEnv(string) (string, bool) { return "", false }

// syncBuffer is a log the greeter writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tlsStack is etcd, the queue and the observer serving mutual TLS, as
// make run TLS=1 runs them, with etcd's authentication on too. The
// observer has no rules file: it learns the greetings queue from the
// greeter's declaration, which the greeter writes to etcd over TLS.
type tlsStack struct {
	certs *framework.Certs
	etcd  *framework.Etcd
	q     *framework.Queue
	o     *framework.Observer
}

func startTLSStack(t *testing.T) *tlsStack {
	t.Helper()
	certs := framework.NewCerts(t)
	etcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: certs, User: "baton", Password: "greeter pw"})
	q := framework.StartQueue(t, framework.QueueOptions{TLS: certs})
	o := framework.StartObserver(t, framework.ObserverOptions{
		EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, TLS: certs, Args: etcd.ClientFlags(),
	})
	return &tlsStack{certs: certs, etcd: etcd, q: q, o: o}
}

// args are the greeter's flags that reach s: the addresses and etcd's TLS
// and authentication flags, without the greeter's own certificate.
func (s *tlsStack) args() []string {
	return append([]string{"--queue-addr", s.q.Addr, "--observer-addr", s.o.Addr, "--etcd-endpoints", s.etcd.Endpoints()[0]},
		s.etcd.ClientFlags()...)
}

// startGreeter runs the greeter as cfg says until the test ends. done
// receives run's result once; log is what it logged.
func startGreeter(t *testing.T, cfg config) (log *syncBuffer, done <-chan error) {
	t.Helper()
	log = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- run(ctx, cfg, slog.New(slog.NewTextHandler(log, nil))) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Error("the greeter did not stop within 30s")
		}
		if t.Failed() {
			t.Logf("the greeter's log:\n%s", log)
		}
	})
	return log, ch
}

func mustParse(t *testing.T, args []string, env map[string]string) config {
	t.Helper()
	cfg, err := parseFlags(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	return cfg
}

func putGreeting(t *testing.T, s *tlsStack, name, who string) string {
	t.Helper()
	key := GreetingKind.Key("default", name)
	obj := fmt.Sprintf(`{"kind":"Greeting","metadata":{"name":%q,"namespace":"default","uid":"u-%s","generation":1},"spec":{"name":%q}}`, name, name, who)
	if _, err := s.etcd.Client.Put(t.Context(), key, obj); err != nil {
		t.Fatal(err)
	}
	return key
}

func greetingStatus(t *testing.T, s *tlsStack, key string) (GreetingStatus, error) {
	resp, err := s.etcd.Client.Get(t.Context(), key)
	if err != nil {
		return GreetingStatus{}, err
	}
	if len(resp.Kvs) == 0 {
		return GreetingStatus{}, errors.New("no such key")
	}
	var g Greeting
	if err := json.Unmarshal(resp.Kvs[0].Value, &g); err != nil {
		return GreetingStatus{}, err
	}
	return g.Status, nil
}

// TestGreeterMutualTLS runs the greeter against a stack that serves
// mutual TLS everywhere, with the worker certificate (given through the
// environment, as BATON_GREETER_*) and etcd's flags: it declares the
// greetings queue in etcd, leases over mutual TLS, reads through the
// observer and writes the status.
func TestGreeterMutualTLS(t *testing.T) {
	s := startTLSStack(t)
	cfg := mustParse(t, s.args(), map[string]string{
		"BATON_GREETER_TLS_CERT_FILE": s.certs.CertFile("worker"),
		"BATON_GREETER_TLS_KEY_FILE":  s.certs.KeyFile("worker"),
		"BATON_GREETER_TLS_CA_FILE":   s.certs.CAFile(),
	})
	_, done := startGreeter(t, cfg)

	key := putGreeting(t, s, "hi", "world")
	framework.WaitForNoError(t, 30*time.Second, "the greeting's status over mutual TLS", func() error {
		select {
		case err := <-done:
			return fmt.Errorf("the greeter stopped: %v", err)
		default:
		}
		st, err := greetingStatus(t, s, key)
		if err != nil {
			return err
		}
		if st != (GreetingStatus{Message: "hello, world", ObservedGeneration: 1}) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	// The queue saw the worker's identity lease and ack it: nothing left.
	framework.WaitForNoError(t, 10*time.Second, "the greetings queue drained", func() error {
		st, err := s.q.Client.Stats(t.Context(), "greetings")
		if err != nil || len(st) != 1 {
			return fmt.Errorf("stats: %v %v", st, err)
		}
		if n := st[0].GetPending() + st[0].GetLeased() + st[0].GetDelayed() + st[0].GetParked(); n != 0 {
			return fmt.Errorf("greetings holds %d keys", n)
		}
		return nil
	})
}

// TestGreeterRefusedWithoutCertificates: against the same stack, a greeter
// without a certificate (plaintext, or TLS with the CA alone) is refused
// by the queue and exits with the refusal; one whose certificate lacks the
// worker role connects, and every Lease is refused with PERMISSION_DENIED,
// so the greeting stays pending and unreconciled.
func TestGreeterRefusedWithoutCertificates(t *testing.T) {
	s := startTLSStack(t)
	key := putGreeting(t, s, "hi", "world")

	for _, c := range []struct {
		name string
		args []string
		want []string // in the error
	}{
		{"plaintext", nil, []string{"did not accept the greeter", "Unavailable", "needs --tls-cert-file, --tls-key-file and --tls-ca-file"}},
		{"no client certificate", []string{"--tls-ca-file", s.certs.CAFile()}, []string{"did not accept the greeter", "Unavailable"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := mustParse(t, append(s.args(), c.args...), nil)
			cfg.QueueWait = 2 * time.Second
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := run(ctx, cfg, nil)
			if err == nil {
				t.Fatal("the greeter ran without a certificate")
			}
			t.Logf("refused: %v", err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if ctx.Err() != nil {
				t.Errorf("refused only after %v", ctx.Err())
			}
		})
	}

	// The viewer may read the queue and the observer, not lease.
	cfg := mustParse(t, append(s.args(), s.certs.Flags("viewer")...), nil)
	log, done := startGreeter(t, cfg)
	framework.WaitForNoError(t, 30*time.Second, "the viewer's work stream refused and the greeting pending", func() error {
		select {
		case err := <-done:
			return fmt.Errorf("the greeter stopped: %v", err)
		default:
		}
		// The manager takes keys from the work stream, whose open the
		// queue refuses for the viewer as it would refuse its Lease.
		if l := log.String(); !strings.Contains(l, "opening the work stream failed") || !strings.Contains(l, "PermissionDenied") {
			return errors.New("no refused work stream in the log yet")
		}
		// Announced (the declaration was written), never leased.
		item, err := s.q.Client.Inspect(t.Context(), "greetings", "default/hi")
		if err != nil {
			return err
		}
		if got := item.GetState().String(); got != "ITEM_STATE_PENDING" || item.GetAttempts() != 0 {
			return fmt.Errorf("default/hi is %s after %d attempts", got, item.GetAttempts())
		}
		return nil
	})
	if st, err := greetingStatus(t, s, key); err != nil || st != (GreetingStatus{}) {
		t.Errorf("the greeting's status is %+v (%v), want none", st, err)
	}
}

// TestFlags: every flag has its BATON_GREETER_ mirror, the command line
// wins, and what cannot work is refused before anything is dialed.
func TestFlags(t *testing.T) {
	cfg := mustParse(t, []string{"--tls-ca-file", "cmd.crt"}, map[string]string{
		"BATON_GREETER_TLS_CA_FILE":    "env.crt",
		"BATON_GREETER_TLS_CERT_FILE":  "w.crt",
		"BATON_GREETER_TLS_KEY_FILE":   "w.key",
		"BATON_GREETER_ETCD_ENDPOINTS": "https://a:2379, https://b:2379",
		"BATON_GREETER_ETCD_CACERT":    "etcd-ca.crt",
		"BATON_GREETER_QUEUE_ADDR":     "q:7070",
	})
	if cfg.TLS.CAFile != "cmd.crt" || cfg.TLS.CertFile != "w.crt" || cfg.TLS.KeyFile != "w.key" ||
		strings.Join(cfg.EtcdEndpoints, " ") != "https://a:2379 https://b:2379" || cfg.Etcd.CACert != "etcd-ca.crt" ||
		cfg.QueueAddr != "q:7070" || cfg.ObserverAddr != "127.0.0.1:7071" || cfg.QueueWait != defaultQueueWait {
		t.Errorf("config = %+v", cfg)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", "w.crt"}, "--tls-cert-file is set without --tls-key-file"},
		{[]string{"--etcd-cacert", "ca.crt"}, "is not https://"},
		{[]string{"--etcd-username", "u"}, "--etcd-username is set without --etcd-password-file"},
		{[]string{"stray"}, `unknown argument "stray"`},
		{[]string{"--insecure"}, "flag provided but not defined: -insecure"},
	} {
		if _, err := parseFlags(c.args, noEnv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFlags(%q) = %v, want %q", c.args, err, c.want)
		}
	}
}
