package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/test/framework"
)

// TestTLSStack drives batonctl against a stack with mutual TLS on every
// link (etcd with client certificates and a user): with the admin's
// certificate, by flags or by BATONCTL_* variables, every command works,
// status probing over HTTPS; without one it is refused and says what to
// give; a viewer's certificate reads and may not forget.
func TestTLSStack(t *testing.T) {
	certs := framework.NewCerts(t)
	etcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: certs, User: "root", Password: "pw"})
	q := framework.StartQueue(t, framework.QueueOptions{TLS: certs})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, TLS: certs, Args: etcd.ClientFlags()})
	base := append([]string{"--etcd-endpoints", etcd.Endpoints()[0], "--queue-addr", q.Addr, "--observer-addr", o.Addr, "--timeout", "3s"}, etcd.ClientFlags()...)
	as := func(name string) []string {
		return append(append([]string(nil), base...), "--cacert", certs.CAFile(), "--cert", certs.CertFile(name), "--key", certs.KeyFile(name))
	}
	run := func(args ...string) result { return runCtx(t, t.Context(), "", args...) }

	const pod = `{"kind":"Pod","metadata":{"name":"p1","namespace":"default"},"spec":{"image":"x"}}`
	r := runCtx(t, t.Context(), pod, append(as("admin"), "apply", "-f", "-")...).mustSucceed(t)
	if !strings.Contains(r.stdout, "p1 created") {
		t.Errorf("apply: %q", r.stdout)
	}
	eventually(t, 30*time.Second, "the pod's key in the queue", func() bool {
		return run(append(as("admin"), "queue", "inspect", "pods", "default/p1")...).code == 0
	})
	run(append(as("admin"), "get", "pods")...).mustSucceed(t)
	run(append(as("admin"), "describe", "pod", "p1")...).mustSucceed(t)
	// The observer's gRPC health follows its readiness within a second.
	eventually(t, 30*time.Second, "status healthy", func() bool {
		r = run(append(as("admin"), "status", "--queue-http-addr", q.HTTPAddr, "--observer-http-addr", o.HTTPAddr, "--worker-http-addr", "")...)
		return r.code == 0
	})
	if !hasRow(r.stdout, "queue", q.Addr+",", "https://"+q.HTTPAddr, "OK") || !hasRow(r.stdout, "observer", o.Addr+",", "https://"+o.HTTPAddr, "OK") {
		t.Errorf("status over TLS:\n%s", r.stdout)
	}

	// The certificate flags from the environment, as etcdctl's ETCDCTL_*.
	var out, errb bytes.Buffer
	env := map[string]string{"BATONCTL_CACERT": certs.CAFile(), "BATONCTL_CERT": certs.CertFile("admin"), "BATONCTL_KEY": certs.KeyFile("admin")}
	code := Main(t.Context(), append(append([]string(nil), base...), "queue", "stats"), IO{
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if code != 0 || !strings.Contains(out.String(), "pods") {
		t.Errorf("queue stats with BATONCTL_CACERT, _CERT, _KEY: exit %d\n%s%s", code, out.String(), errb.String())
	}

	// Without a certificate, or plaintext: refused at the handshake.
	for name, args := range map[string][]string{
		"plaintext":             base,
		"no client certificate": append(append([]string(nil), base...), "--cacert", certs.CAFile()),
	} {
		r := run(append(args, "queue", "stats")...)
		if r.code != 1 || !strings.Contains(r.stderr, "the queue at "+q.Addr) || !strings.Contains(r.stderr, "give --cacert, --cert and --key") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("%s: queue stats: exit %d, stderr %q; want 1 and one line naming the queue and the flags", name, r.code, r.stderr)
		}
	}

	// A viewer reads, and may not forget.
	run(append(as("viewer"), "queue", "stats")...).mustSucceed(t)
	r = run(append(as("viewer"), "queue", "forget", "pods", "default/p1")...)
	if r.code != 1 || !strings.Contains(r.stderr, "PermissionDenied") && !strings.Contains(r.stderr, "may not call") {
		t.Errorf("a viewer's forget: exit %d, stderr %q; want a refusal", r.code, r.stderr)
	}

	// A certificate without its key is a usage error.
	if r := run(append(append([]string(nil), base...), "--cert", certs.CertFile("admin"), "queue", "stats")...); r.code != 2 || !strings.Contains(r.stderr, "--cert is set without --key") {
		t.Errorf("--cert alone: exit %d, stderr %q", r.code, r.stderr)
	}
}
