// Package trust is how every Baton binary takes its TLS identity and the
// choice to go without one: the flags of docs/design.md, "Trust"
// (--tls-cert-file, --tls-key-file, --tls-ca-file, --insecure,
// --authz-policy), registered once here, and the rule that makes a service
// secure by default: without a certificate it serves plaintext on loopback
// addresses only, unless --insecure says plaintext anywhere is meant.
//
//	var tc trust.Config
//	tc.RegisterFlags(fs)                        // after flag parsing:
//	if err := tc.CheckServe(":7070", ":9090"); err != nil {
//		return err // one line naming the flags to use
//	}
//	src, err := tc.Load(log)                    // nil without TLS flags
//	policy, err := tc.Policy()                  // the role table, or --authz-policy's
//
// One certificate serves and dials: a service presents it on its
// listeners and as its client certificate when it calls another service,
// and verifies the other side against the CA bundle both ways
// (docs/security.md).
package trust

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/runtime/authz"
)

// The flags' names (docs/design.md, "Trust").
const (
	FlagCertFile    = "tls-cert-file"
	FlagKeyFile     = "tls-key-file"
	FlagCAFile      = "tls-ca-file"
	FlagInsecure    = "insecure"
	FlagAuthzPolicy = "authz-policy"
)

// Config is a process's TLS settings, as its flags give them.
type Config struct {
	// CertFile and KeyFile are this process's certificate and key: served
	// on its listeners and presented when it dials another service.
	CertFile, KeyFile string
	// CAFile is the CA bundle that verifies the other side, both ways: a
	// server with one requires client certificates on gRPC (mutual TLS)
	// and authorizes every call by the client's roles.
	CAFile string
	// Insecure allows plaintext on an address that is not loopback.
	Insecure bool
	// AuthzPolicy is a policy file replacing the default role table
	// (services/runtime/authz); it needs CAFile.
	AuthzPolicy string
}

// RegisterFlags binds every trust flag of a service to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.RegisterClientFlags(fs)
	fs.BoolVar(&c.Insecure, FlagInsecure, c.Insecure, "serve plaintext even on an address that is not loopback (without TLS flags a service refuses to)")
	fs.StringVar(&c.AuthzPolicy, FlagAuthzPolicy, c.AuthzPolicy, "a YAML policy file replacing the default role table (needs --"+FlagCAFile+")")
}

// RegisterClientFlags binds the certificate flags only, for a program
// that dials and does not serve (baton-experiment).
func (c *Config) RegisterClientFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, FlagCertFile, c.CertFile, "this process's certificate (PEM): served, and presented when it dials another Baton service")
	fs.StringVar(&c.KeyFile, FlagKeyFile, c.KeyFile, "the key of --"+FlagCertFile+" (PEM)")
	fs.StringVar(&c.CAFile, FlagCAFile, c.CAFile, "the CA bundle (PEM) that verifies the other side: servers require client certificates from it (mutual TLS)")
}

// Enabled reports whether TLS is configured (a certificate or a CA).
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Mutual reports whether a server with this configuration requires and
// verifies client certificates (and so authorizes calls by their roles).
func (c Config) Mutual() bool { return c.CAFile != "" }

// Validate checks the flags of a program that dials only: a certificate
// with its key, or neither.
func (c Config) Validate() error {
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return fmt.Errorf("--%s is set without --%s", FlagCertFile, FlagKeyFile)
	case c.CertFile == "" && c.KeyFile != "":
		return fmt.Errorf("--%s is set without --%s", FlagKeyFile, FlagCertFile)
	}
	return nil
}

// ValidateServe checks the flags of a service: Validate's rules, a CA
// only beside a certificate (a server serves with its certificate),
// --insecure only without TLS flags, and --authz-policy only with a CA
// (authorization is by client certificate).
func (c Config) ValidateServe() error {
	if err := c.Validate(); err != nil {
		return err
	}
	switch {
	case c.Insecure && c.Enabled():
		return fmt.Errorf("--%s and the TLS flags (--%s, --%s, --%s) exclude each other", FlagInsecure, FlagCertFile, FlagKeyFile, FlagCAFile)
	case c.CAFile != "" && c.CertFile == "":
		return fmt.Errorf("--%s is set without --%s and --%s: a service serves TLS with its own certificate", FlagCAFile, FlagCertFile, FlagKeyFile)
	case c.AuthzPolicy != "" && c.CAFile == "":
		return fmt.Errorf("--%s needs --%s: calls are authorized by the roles of verified client certificates", FlagAuthzPolicy, FlagCAFile)
	}
	return nil
}

// PlaintextError is returned by CheckListen for a plaintext listener on
// an address that is not loopback; its message names the address and the
// flags to use, on one line.
type PlaintextError struct{ Addr string }

func (e *PlaintextError) Error() string {
	return fmt.Sprintf("refusing to serve plaintext on %s, which is not a loopback address: give --%s, --%s and --%s (mutual TLS), or --%s to serve plaintext anyway",
		e.Addr, FlagCertFile, FlagKeyFile, FlagCAFile, FlagInsecure)
}

// CheckListen refuses, with a *PlaintextError, the first of addrs (listen
// addresses; "" skipped) that is not loopback, unless TLS is configured
// or Insecure is set.
func (c Config) CheckListen(addrs ...string) error {
	if c.Enabled() || c.Insecure {
		return nil
	}
	for _, a := range addrs {
		if a != "" && !IsLoopback(a) {
			return &PlaintextError{Addr: a}
		}
	}
	return nil
}

// CheckServe is ValidateServe, then CheckListen of addrs: everything a
// service checks of its trust flags before it starts.
func (c Config) CheckServe(addrs ...string) error {
	if err := c.ValidateServe(); err != nil {
		return err
	}
	return c.CheckListen(addrs...)
}

// IsLoopback reports whether the listen address host:port binds loopback
// only: 127.0.0.0/8, ::1 or localhost. An empty host (":7070"), 0.0.0.0,
// :: and every other name or address are not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Load returns the Source of the configured files, which re-reads them
// when they change, with errors naming the file; nil and no error without
// TLS flags. log receives the reloads.
func (c Config) Load(log *slog.Logger) (*tlsfiles.Source, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return tlsfiles.Load(tlsfiles.Config{CertFile: c.CertFile, KeyFile: c.KeyFile, CAFile: c.CAFile, Logger: log})
}

// Policy returns the policy a mutual-TLS server enforces: the file of
// --authz-policy, or the default role table.
func (c Config) Policy() (*authz.Policy, error) {
	if c.AuthzPolicy == "" {
		return authz.Default(), nil
	}
	return authz.Load(c.AuthzPolicy)
}
