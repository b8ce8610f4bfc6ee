package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	observerclient "github.com/batonrun/baton/client/observer"
)

// ObserverOptions configures StartObserver.
type ObserverOptions struct {
	// EtcdEndpoints and QueueAddr are what it watches and where it adds
	// keys; both required.
	EtcdEndpoints []string
	QueueAddr     string
	// Rules is the text of a rules file (YAML, as docs/observer.md
	// describes); empty means the built-in rules of the reference
	// controllers.
	Rules string
	// GracePeriod is --grace-period; 0 means 1 s.
	GracePeriod time.Duration
	// Resync is --resync; 0 keeps the binary's (off).
	Resync time.Duration
	// NoWaitReady returns once it listens, before /readyz answers 200
	// (etcd answers and every prefix is listed), e.g. with etcd down.
	NoWaitReady bool
	// TLS, if set, serves mutual TLS with its observer certificate (which
	// it also dials the queue with), and Client dials as admin.
	TLS *Certs
	// Args are further flags, e.g. Etcd.ClientFlags().
	Args []string
}

// Observer is a baton-observer process. Addr and HTTPAddr stay the same
// across restarts, and Client reconnects to it.
type Observer struct {
	*Process
	// Addr is the gRPC address, HTTPAddr the HTTP one, on 127.0.0.1.
	Addr, HTTPAddr string
	// RulesFile is the rules file written from ObserverOptions.Rules ("" for
	// the built-in rules); a test may rewrite it before a restart.
	RulesFile string
	// Client is a client of this observer's cache, closed when the test
	// ends.
	Client *observerclient.Client
}

// StartObserver builds and starts baton-observer and waits until its
// /readyz answers 200, unless NoWaitReady. It fails the test if it cannot.
func StartObserver(t testing.TB, o ObserverOptions) *Observer {
	t.Helper()
	if len(o.EtcdEndpoints) == 0 || o.QueueAddr == "" {
		t.Fatal("framework: StartObserver needs EtcdEndpoints and QueueAddr")
	}
	if o.GracePeriod == 0 {
		o.GracePeriod = testGracePeriod
	}
	args := []string{"--etcd-endpoints", strings.Join(o.EtcdEndpoints, ","), "--queue-addr", o.QueueAddr}
	var rulesFile string
	if o.Rules != "" {
		rulesFile = filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(rulesFile, []byte(o.Rules), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--rules", rulesFile)
	}
	args = durationFlag(args, "grace-period", o.GracePeriod)
	args = durationFlag(args, "resync", o.Resync)
	spec := serviceSpec{
		name:        "baton-observer",
		flags:       func(g, h string) []string { return []string{"--grpc-addr", g, "--http-addr", h} },
		noWaitReady: o.NoWaitReady,
	}
	var dial []observerclient.Option
	if o.TLS != nil {
		args = append(args, o.TLS.Flags("observer")...)
		spec.tls = o.TLS.Source(t, "observer")
		dial = append(dial, observerclient.WithTLS(o.TLS.Source(t, "admin")))
	}
	spec.args = append(args, o.Args...)
	s := startService(t, spec)
	ob := &Observer{Process: s.Process, RulesFile: rulesFile}
	ob.Addr, ob.HTTPAddr = s.addrs()
	c, err := observerclient.Dial(ob.Addr, dial...)
	if err != nil {
		t.Fatalf("framework: dial baton-observer: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ob.Client = c
	return ob
}
