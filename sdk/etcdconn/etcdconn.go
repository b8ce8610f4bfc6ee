// Package etcdconn is how a process that talks to etcd takes etcd's TLS
// and authentication: etcdctl's flag names, registered once
// (--etcd-cacert, --etcd-cert, --etcd-key, --etcd-username, and
// --etcd-password-file, a file so the password is in no process listing),
// and the clientv3 configuration they make (docs/security.md).
//
// Every Baton binary that talks to etcd (the observer, the worker,
// batonctl, baton-dev, baton-experiment) uses it, and so can a controller
// written outside this repository: it is part of the SDK's module, which
// such a controller already requires, so it takes the same flags as
// baton-worker without depending on any service's module.
//
//	var ec etcdconn.Config
//	ec.RegisterFlags(fs)                          // after flag parsing:
//	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second}
//	if err := ec.Apply(&cfg, log); err != nil {
//		return err // names the flag or the file
//	}
//	cli, err := clientv3.New(cfg)
//
// The certificate and CA files are read through client/tlsfiles: re-read
// when they change, with each etcd member's certificate checked against
// the host of its endpoint.
package etcdconn

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/batonrun/baton/client/tlsfiles"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The flags' names: etcdctl's, prefixed with etcd-.
const (
	FlagCACert       = "etcd-cacert"
	FlagCert         = "etcd-cert"
	FlagKey          = "etcd-key"
	FlagUsername     = "etcd-username"
	FlagPasswordFile = "etcd-password-file"
)

// Config is how a process reaches etcd securely, as its flags give it.
type Config struct {
	// CACert verifies etcd's certificate (the system's roots without
	// it); Cert and Key are the client certificate presented to an etcd
	// that requires one.
	CACert, Cert, Key string
	// Username and PasswordFile authenticate to an etcd with
	// authentication on; the file holds the password (one trailing
	// newline is not part of it).
	Username, PasswordFile string
}

// RegisterFlags binds the flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CACert, FlagCACert, c.CACert, "CA bundle (PEM) that verifies etcd's certificate (https:// endpoints)")
	fs.StringVar(&c.Cert, FlagCert, c.Cert, "client certificate (PEM) presented to etcd")
	fs.StringVar(&c.Key, FlagKey, c.Key, "the key of --"+FlagCert+" (PEM)")
	fs.StringVar(&c.Username, FlagUsername, c.Username, "etcd user, for an etcd with authentication on")
	fs.StringVar(&c.PasswordFile, FlagPasswordFile, c.PasswordFile, "file holding the password of --"+FlagUsername)
}

// TLS reports whether any TLS flag is set.
func (c Config) TLS() bool { return c.CACert != "" || c.Cert != "" || c.Key != "" }

// Validate checks the flags against the endpoints they are for: a
// certificate with its key, a user with a password file, and TLS flags
// only with https:// endpoints (a plaintext endpoint would ignore them).
func (c Config) Validate(endpoints []string) error {
	switch {
	case c.Cert != "" && c.Key == "":
		return fmt.Errorf("--%s is set without --%s", FlagCert, FlagKey)
	case c.Cert == "" && c.Key != "":
		return fmt.Errorf("--%s is set without --%s", FlagKey, FlagCert)
	case c.Username != "" && c.PasswordFile == "":
		return fmt.Errorf("--%s is set without --%s", FlagUsername, FlagPasswordFile)
	case c.Username == "" && c.PasswordFile != "":
		return fmt.Errorf("--%s is set without --%s", FlagPasswordFile, FlagUsername)
	}
	if c.TLS() {
		for _, ep := range endpoints {
			if u, err := url.Parse(ep); err != nil || u.Scheme != "https" {
				return fmt.Errorf("--etcd-endpoints %s is not https://, but --%s, --%s or --%s is set: give etcd's https:// URLs", ep, FlagCACert, FlagCert, FlagKey)
			}
		}
	}
	return nil
}

// Apply sets cfg's TLS and credentials from c, after checking c against
// cfg.Endpoints. log receives the certificate files' reloads.
func (c Config) Apply(cfg *clientv3.Config, log *slog.Logger) error {
	if err := c.Validate(cfg.Endpoints); err != nil {
		return err
	}
	if c.TLS() {
		src, err := tlsfiles.Load(tlsfiles.Config{CertFile: c.Cert, KeyFile: c.Key, CAFile: c.CACert, Logger: log})
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		// clientv3 takes a fixed tls.Config, and grpc's TLS credentials
		// would check it against the handshake's SNI, which is empty for
		// an IP address. Its DialOptions come after its own credentials,
		// so these win: they re-read the files, and check each member
		// against the host its resolver gives each endpoint.
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithTransportCredentials(src.ClientCredentials("")))
	}
	if c.Username != "" {
		pw, err := ReadPassword(c.PasswordFile)
		if err != nil {
			return err
		}
		cfg.Username, cfg.Password = c.Username, pw
	}
	return nil
}

// ReadPassword reads a password file: its contents without one trailing
// newline. An empty password is an error.
func ReadPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", FlagPasswordFile, err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("--%s %s: %w", FlagPasswordFile, file, errEmptyPassword)
	}
	return pw, nil
}

var errEmptyPassword = errors.New("the file is empty")
