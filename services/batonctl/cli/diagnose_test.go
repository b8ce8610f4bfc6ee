package cli

import (
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/test/framework"
)

// TestTLSMismatch: TLS forgotten, or given to a server that speaks none, is
// named for what it is, with the endpoint and the flags to set, at once
// rather than after --timeout (a minute here), for etcd, the queue (one
// address or a replicated queue's list) and the observer; and status says
// the same on each service's row instead of a bare DOWN.
func TestTLSMismatch(t *testing.T) {
	certs := framework.NewCerts(t)
	tlsEtcd := framework.StartEtcdWith(t, framework.EtcdOptions{TLS: certs})
	plainEtcd := framework.StartEtcd(t)
	tlsQueue := framework.StartQueue(t, framework.QueueOptions{TLS: certs})
	plainQueue := framework.StartQueue(t, framework.QueueOptions{})
	tlsObserver := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: tlsEtcd.Endpoints(), QueueAddr: tlsQueue.Addr, TLS: certs, Args: tlsEtcd.ClientFlags()})

	etcdURL, _ := url.Parse(tlsEtcd.Endpoints()[0])
	asHTTP := "http://" + etcdURL.Host
	plainURL, _ := url.Parse(plainEtcd.Endpoints()[0])
	asHTTPS := "https://" + plainURL.Host
	clientCert := []string{"--cacert", certs.CAFile(), "--cert", certs.CertFile("admin"), "--key", certs.KeyFile("admin")}
	run := func(args ...string) result {
		return runCtx(t, t.Context(), "", append([]string{"--timeout", "1m"}, args...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"etcd speaks TLS, written http://", []string{"--etcd-endpoints", asHTTP, "get", "pods"},
			[]string{"etcd at " + asHTTP + " speaks TLS, and batonctl spoke plaintext: write it https://" + etcdURL.Host + " in --etcd-endpoints, with --etcd-cacert"}},
		{"etcd's CA not given", []string{"--etcd-endpoints", tlsEtcd.Endpoints()[0], "get", "pods"},
			[]string{"etcd at " + tlsEtcd.Endpoints()[0] + " presents a certificate batonctl does not trust", "give the CA that signed it in --etcd-cacert"}},
		{"etcd asks for a client certificate", []string{"--etcd-endpoints", tlsEtcd.Endpoints()[0], "--etcd-cacert", certs.CAFile(), "get", "pods"},
			[]string{"etcd at " + tlsEtcd.Endpoints()[0] + " asks for a client certificate, and batonctl gave none: give --etcd-cert and --etcd-key"}},
		{"etcd speaks plaintext, written https://", []string{"--etcd-endpoints", asHTTPS, "--etcd-cacert", certs.CAFile(), "delete", "pod", "p"},
			[]string{"etcd at " + asHTTPS + " speaks plaintext, not TLS: write it http://" + plainURL.Host + " in --etcd-endpoints"}},
		{"the queue speaks TLS", []string{"--queue-addr", tlsQueue.Addr, "queue", "stats"},
			[]string{"the queue at " + tlsQueue.Addr + " speaks TLS, and batonctl spoke plaintext: give --cacert, --cert and --key"}},
		{"a replicated queue speaks TLS", []string{"--queue-addr", deadAddr + "," + tlsQueue.Addr, "queue", "stats"},
			[]string{"the queue at " + tlsQueue.Addr + " speaks TLS, and batonctl spoke plaintext"}},
		{"the queue speaks plaintext", append(clientCert, "--queue-addr", plainQueue.Addr, "queue", "stats"),
			[]string{"the queue at " + plainQueue.Addr + " speaks plaintext, and batonctl spoke TLS: leave out --cacert, --cert and --key"}},
		{"the queue asks for a client certificate", []string{"--cacert", certs.CAFile(), "--queue-addr", tlsQueue.Addr, "queue", "members"},
			[]string{"the queue at " + tlsQueue.Addr + " asks for a client certificate, and batonctl gave none: give --cacert, --cert and --key"}},
		{"the observer speaks TLS", []string{"--observer-addr", tlsObserver.Addr, "--queue-addr", deadAddr, "version"},
			[]string{"the observer at " + tlsObserver.Addr + " speaks TLS, and batonctl spoke plaintext"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := run(tc.args...)
			t.Logf("batonctl %q:\n%s%s", tc.args, r.stdout, r.stderr)
			if time.Since(start) >= time.Minute {
				t.Errorf("waited out --timeout 1m")
			}
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr+r.stdout, w) {
					t.Errorf("stderr lacks %q:\n%s%s", w, r.stdout, r.stderr)
				}
			}
			if strings.Contains(r.stderr, "deadline exceeded") {
				t.Errorf("stderr says a deadline passed:\n%s", r.stderr)
			}
		})
	}

	// status, TLS forgotten: each row says why it is down.
	r := run("--etcd-endpoints", asHTTP, "--queue-addr", tlsQueue.Addr, "--observer-addr", tlsObserver.Addr, "status", "--worker-http-addr", "")
	t.Logf("status:\n%s%s", r.stdout, r.stderr)
	for _, want := range [][]string{
		{"etcd", asHTTP, "DOWN", "etcd", "at", asHTTP, "speaks", "TLS,"},
		{"queue", tlsQueue.Addr + ",", "http://127.0.0.1:9090", "DOWN", "the", "queue", "at", tlsQueue.Addr, "speaks", "TLS,"},
		{"observer", tlsObserver.Addr + ",", "http://127.0.0.1:9091", "DOWN", "the", "observer", "at", tlsObserver.Addr, "speaks", "TLS,"},
	} {
		if !hasRow(r.stdout, want...) {
			t.Errorf("status with TLS forgotten lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 1 || r.stderr != "error: not healthy: etcd, queue, observer\n" {
		t.Errorf("status: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestNoAnswer: a server that accepts connections and never answers is
// reported as not answering within --timeout, with the flag, not as
// "context deadline exceeded"; one that is not there at all as refused.
func TestNoAnswer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn // held open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	addr := silent.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd-endpoints", "http://" + addr, "get", "pods"}, "etcd at http://" + addr + " did not answer within 2s (--timeout; set --etcd-endpoints if it runs elsewhere)"},
		{[]string{"--queue-addr", addr, "queue", "stats"}, "the queue at " + addr + " did not answer within 2s (--timeout; set --queue-addr if it runs elsewhere)"},
		{[]string{"--queue-addr", deadAddr, "queue", "stats"}, "connection refused: is the queue running at " + deadAddr + "? (set --queue-addr)"},
	} {
		r := runCtx(t, t.Context(), "", append([]string{"--timeout", "2s"}, tc.args...)...)
		if r.code != 1 || strings.TrimSpace(r.stderr) != "error: "+tc.want {
			t.Errorf("batonctl %q: exit %d, stderr %q; want 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
