package stack

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/sdk/etcdconn"
	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/services/runtime/trust"
)

// certsDirName is where, under the data directory, --tls keeps the
// stack's certificates.
const certsDirName = "certs"

// stackCerts are the files of a TLS stack: a deployment's certificates as
// `batonctl certs init` writes them (client/certs).
type stackCerts struct{ dir string }

func (c stackCerts) file(name string) string { return filepath.Join(c.dir, name) }
func (c stackCerts) ca() string              { return c.file(certs.CAName + ".crt") }

// service is a part's trust flags for the pair name.
func (c stackCerts) service(name string) trust.Config {
	return trust.Config{CertFile: c.file(name + ".crt"), KeyFile: c.file(name + ".key"), CAFile: c.ca()}
}

// etcdClient is how a part dials the stack's etcd.
func (c stackCerts) etcdClient() etcdconn.Config {
	return etcdconn.Config{CACert: c.ca(), Cert: c.file("etcd-client.crt"), Key: c.file("etcd-client.key")}
}

func (c stackCerts) etcdServer() *etcdembed.TLS {
	return &etcdembed.TLS{CertFile: c.file("etcd-server.crt"), KeyFile: c.file("etcd-server.key"), ClientCAFile: c.ca()}
}

// ensureCerts makes the stack's certificates under dataDir/certs on the
// first TLS start, valid for loopback and the hosts the stack listens on;
// a later start keeps them (the parts re-read them if they are replaced,
// e.g. by batonctl certs issue --dir DATA/certs --force).
func ensureCerts(dataDir string, listen []string, now time.Time) (stackCerts, error) {
	c := stackCerts{dir: filepath.Join(dataDir, certsDirName)}
	if _, err := os.Stat(c.ca()); err == nil {
		return c, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	for _, a := range listen {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	ca, err := certs.NewCA(certs.DefaultCADays, now)
	if err != nil {
		return c, err
	}
	if _, err := certs.Init(c.dir, ca, certs.Defaults(hosts, certs.DefaultDays), false, now); err != nil {
		return c, fmt.Errorf("certificates in %s: %w", c.dir, err)
	}
	return c, nil
}

// httpsURL turns etcd's http:// client URL into https:// for a TLS stack.
func httpsURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("--etcd-client-url: %w", err)
	}
	if u.Scheme == "http" {
		u.Scheme = "https"
	}
	return u.String(), nil
}

// BatonctlFlags returns the flags batonctl needs to reach a TLS stack as
// admin, besides the addresses (BatonctlAddrs): the CA, the admin's
// certificate, and etcd's CA and client certificate; none for a plaintext
// stack.
func (e Endpoints) BatonctlFlags() []string {
	if e.Certs == "" {
		return nil
	}
	c := stackCerts{dir: e.Certs}
	ec := c.etcdClient()
	return []string{
		"--cacert", c.ca(), "--cert", c.file("admin.crt"), "--key", c.file("admin.key"),
		"--etcd-cacert", ec.CACert, "--etcd-cert", ec.Cert, "--etcd-key", ec.Key,
	}
}

// BatonctlAddrs returns batonctl's address flags for the stack: none for
// those at batonctl's defaults (the stack's on the default ports, plaintext).
func (e Endpoints) BatonctlAddrs() []string {
	var out []string
	for _, f := range []struct{ flag, value, def string }{
		{"--etcd-endpoints", e.Etcd, "http://127.0.0.1:2379"},
		{"--queue-addr", e.QueueGRPC, "127.0.0.1:7070"},
		{"--observer-addr", e.ObserverGRPC, "127.0.0.1:7071"},
	} {
		if f.value != f.def {
			out = append(out, f.flag, f.value)
		}
	}
	return out
}
