package cli

// Why a server cannot be reached. A call that fails says "context deadline
// exceeded" or "connection closed before server preface received"; a probe
// of the address says why, in a second at most: nothing listens (refused),
// nothing answers (the connection times out), the name does not resolve,
// or the server speaks TLS where batonctl spoke plaintext, or the reverse,
// which the first bytes of a TLS handshake tell: a TLS server answers a
// ClientHello with a handshake record or an alert, a plaintext one with
// bytes that are no TLS record (gRPC's HTTP/2 SETTINGS frame) or by
// closing the connection (etcd's port, which matches the first bytes of a
// connection against the protocols it serves). A TLS server may also
// refuse batonctl's certificate, or present one batonctl's CA does not
// verify. Each error names the server, the address and the flag to set.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
)

// probeTimeout bounds each step of a probe: the connection, then the
// handshake.
const probeTimeout = time.Second

// alertWait is how long a probe that completed a TLS handshake waits for
// the alert a TLS 1.3 server sends after it when it refuses the client's
// certificate (the client's side of the handshake ends before the server
// has checked it).
const alertWait = 300 * time.Millisecond

// diagnoseAfter is how long a call to etcd may take before batonctl probes
// the endpoints meanwhile: etcd's client retries a connection that fails
// until the call's deadline, so without a probe a mismatch would cost the
// whole --timeout; a healthy call is over long before.
const diagnoseAfter = 250 * time.Millisecond

// finding is what a probe of one address found.
type finding int

const (
	// foundNothing: it answers as batonctl speaks to it, or the probe
	// could not tell.
	foundNothing finding = iota
	foundRefused
	foundNoAnswer
	foundNoHost
	// foundTLS: it speaks TLS, and batonctl spoke plaintext.
	foundTLS
	// foundPlaintext: it does not speak TLS, and batonctl spoke TLS.
	foundPlaintext
	// foundBadCert: its certificate does not verify against batonctl's CA.
	foundBadCert
	// foundCertRefused: it asks for a client certificate batonctl did
	// not give, or refused the one it gave.
	foundCertRefused
)

// endpoint is one address of a server, and how batonctl speaks to it.
type endpoint struct {
	what  string // "etcd", "the queue", "the observer"
	flag  string // the flag that gives the address
	shown string // the address as the flag has it (an etcd URL)
	addr  string // host:port
	// tls is the configuration batonctl's handshake uses; nil when it
	// speaks plaintext.
	tls *tls.Config
	// withCert: batonctl presents a client certificate.
	withCert bool
}

// probeResult is a finding and the error that showed it.
type probeResult struct {
	found finding
	err   error
}

// probeEndpoint connects to e and, for the findings about TLS, starts a handshake.
func probeEndpoint(ctx context.Context, e endpoint) probeResult {
	d := net.Dialer{Timeout: probeTimeout}
	conn, err := d.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		var dnsErr *net.DNSError
		var ne net.Error
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return probeResult{foundRefused, err}
		case errors.As(err, &dnsErr):
			return probeResult{foundNoHost, err}
		case errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil:
			return probeResult{foundNoAnswer, err}
		}
		return probeResult{foundNothing, err}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	host, _, _ := net.SplitHostPort(e.addr)
	if e.tls == nil {
		// Would a TLS client have been answered?
		err := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true}).HandshakeContext(ctx)
		if err == nil || isRemoteAlert(err) {
			return probeResult{foundTLS, err}
		}
		return probeResult{foundNothing, err}
	}
	cfg := e.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	err = tc.HandshakeContext(ctx)
	var (
		rh         tls.RecordHeaderError
		unknownCA  x509.UnknownAuthorityError
		badHost    x509.HostnameError
		invalid    x509.CertificateInvalidError
		verifyFail *tls.CertificateVerificationError
	)
	switch {
	case err == nil:
		// A server that refuses the certificate (or its absence) says so
		// right after the handshake.
		_ = conn.SetReadDeadline(time.Now().Add(alertWait))
		if _, rerr := tc.Read(make([]byte, 1)); isCertAlert(rerr) {
			return probeResult{foundCertRefused, rerr}
		}
		return probeResult{foundNothing, nil}
	case errors.As(err, &rh), errors.Is(err, io.EOF):
		return probeResult{foundPlaintext, err}
	case isCertAlert(err):
		return probeResult{foundCertRefused, err}
	case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &invalid), errors.As(err, &verifyFail):
		return probeResult{foundBadCert, err}
	}
	return probeResult{foundNothing, err}
}

// isRemoteAlert reports whether err is a TLS alert the server sent.
func isRemoteAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// isCertAlert reports whether err is a server's alert about the client's
// certificate: none given where one is required, or one it does not
// accept.
func isCertAlert(err error) bool {
	if !isRemoteAlert(err) {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "certificate required") || strings.Contains(s, "bad certificate") ||
		strings.Contains(s, "unknown certificate authority") || strings.Contains(s, "certificate expired") ||
		strings.Contains(s, "certificate unknown") || strings.Contains(s, "certificate revoked")
}

// explain words a finding: the server, the address, what is wrong and the
// flag to set. nil for foundNothing.
func (e endpoint) explain(r probeResult) error {
	at := fmt.Sprintf("%s at %s", e.what, e.shown)
	var msg string
	etcd := e.flag == "--etcd-endpoints"
	switch r.found {
	case foundNothing:
		return nil
	case foundRefused:
		return refusedError(e.what, e.shown, e.flag, r.err)
	case foundNoAnswer:
		msg = fmt.Sprintf("no answer from %s within %s (set %s): is the host up? A firewall may be dropping the connection", at, probeTimeout, e.flag)
	case foundNoHost:
		msg = fmt.Sprintf("cannot reach %s (set %s): %s", at, e.flag, flatten(r.err))
	case foundTLS:
		if etcd {
			msg = fmt.Sprintf("%s speaks TLS, and batonctl spoke plaintext: write it https://%s in --etcd-endpoints, with --etcd-cacert (and --etcd-cert, --etcd-key if it asks for a client certificate)", at, e.addr)
		} else {
			msg = fmt.Sprintf("%s speaks TLS, and batonctl spoke plaintext: give --cacert, --cert and --key (set %s if this is not %s)", at, e.flag, e.what)
		}
	case foundPlaintext:
		if etcd {
			msg = fmt.Sprintf("%s speaks plaintext, not TLS: write it http://%s in --etcd-endpoints, without --etcd-cacert, --etcd-cert and --etcd-key", at, e.addr)
		} else {
			msg = fmt.Sprintf("%s speaks plaintext, and batonctl spoke TLS: leave out --cacert, --cert and --key, or set %s to a server that serves TLS", at, e.flag)
		}
	case foundBadCert:
		ca := "--cacert"
		if etcd {
			ca = "--etcd-cacert"
		}
		msg = fmt.Sprintf("%s presents a certificate batonctl does not trust (%s): give the CA that signed it in %s", at, flatten(r.err), ca)
	case foundCertRefused:
		flags := "--cacert, --cert and --key"
		if etcd {
			flags = "--etcd-cert and --etcd-key"
		}
		if e.withCert {
			msg = fmt.Sprintf("%s refused batonctl's client certificate (%s): give one its CA signed, in %s", at, flatten(r.err), flags)
		} else {
			msg = fmt.Sprintf("%s asks for a client certificate, and batonctl gave none: give %s", at, flags)
		}
	}
	return &unreachableError{msg: msg, err: r.err}
}

// diagnose probes the endpoints, all at once. A finding about TLS, or a
// name that does not resolve, is definite: no call can succeed as things
// are. So is a refusal by every endpoint, but not by one of several (a
// member of a replicated queue that is down). No answer is not definite,
// but explains a call that times out. It returns nil when the probes find
// nothing.
func diagnose(ctx context.Context, eps []endpoint) (err error, definite bool) {
	results := make([]probeResult, len(eps))
	done := make(chan struct{})
	for i, e := range eps {
		go func() {
			defer func() { done <- struct{}{} }()
			results[i] = probeEndpoint(ctx, e)
		}()
	}
	for range eps {
		<-done
	}
	refused := 0
	var other error
	for i, r := range results {
		switch r.found {
		case foundTLS, foundPlaintext, foundBadCert, foundCertRefused, foundNoHost:
			return eps[i].explain(r), true
		case foundRefused:
			refused++
		case foundNoAnswer:
			if other == nil {
				other = eps[i].explain(r)
			}
		}
	}
	if len(eps) > 0 && refused == len(eps) {
		shown := make([]string, len(eps))
		for i, e := range eps {
			shown[i] = e.shown
		}
		return refusedError(eps[0].what, strings.Join(shown, ","), eps[0].flag, results[0].err), true
	}
	return other, false
}

// callDiagnosed runs call; when it has not returned after diagnoseAfter,
// the endpoints are probed meanwhile, and a definite finding ends the call
// at once with the finding's error. A call that fails otherwise returns
// its own error, or the probes' finding that explains it (no answer).
func callDiagnosed(ctx context.Context, eps []endpoint, call func(context.Context) error) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(cctx) }()
	timer := time.NewTimer(diagnoseAfter)
	defer timer.Stop()
	type verdict struct {
		err      error
		definite bool
	}
	var (
		diag    chan verdict
		finding error
	)
	for {
		select {
		case err := <-done:
			if err != nil && finding != nil {
				return finding
			}
			return err
		case <-timer.C:
			diag = make(chan verdict, 1)
			go func() {
				err, definite := diagnose(cctx, eps)
				diag <- verdict{err, definite}
			}()
		case v := <-diag:
			diag = nil
			if v.definite {
				cancel()
				<-done
				return v.err
			}
			finding = v.err
		}
	}
}

// etcdProbes are --etcd-endpoints as probes reach them: TLS for an
// https:// URL, with --etcd-cacert's CA (else the system's roots) and
// --etcd-cert's certificate.
func (a *app) etcdProbes() []endpoint {
	var src *tlsfiles.Source
	if a.etcdConn.TLS() {
		src, _ = tlsfiles.Load(tlsfiles.Config{CertFile: a.etcdConn.Cert, KeyFile: a.etcdConn.Key, CAFile: a.etcdConn.CACert})
	}
	var out []endpoint
	for _, ep := range a.endpoints() {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			continue
		}
		e := endpoint{what: "etcd", flag: "--etcd-endpoints", shown: ep, addr: u.Host}
		if u.Scheme == "https" {
			host := u.Hostname()
			e.tls = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
			if src != nil {
				e.tls = src.ClientConfig(host)
				e.withCert = a.etcdConn.Cert != ""
			}
		}
		out = append(out, e)
	}
	return out
}

// grpcProbes are the addresses of a Baton service (the queue's members,
// or the observer), as batonctl speaks to them: TLS with --cacert and
// --cert when they are given.
func (a *app) grpcProbes(what, flagName string, addrs ...string) []endpoint {
	src, _ := a.tls()
	out := make([]endpoint, 0, len(addrs))
	for _, addr := range addrs {
		e := endpoint{what: what, flag: flagName, shown: addr, addr: addr}
		if src != nil {
			host, _, _ := net.SplitHostPort(addr)
			e.tls, e.withCert = src.ClientConfig(host), a.tlsFiles.CertFile != ""
		}
		out = append(out, e)
	}
	return out
}
