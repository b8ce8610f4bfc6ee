package baton

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
)

// TLS is a mutual-TLS set-up for a Server: the queue's files (its
// --tls-cert-file, --tls-key-file and --tls-ca-file) and the Source the
// bench's client dials with.
type TLS struct {
	CertFile, KeyFile, CAFile string
	Client                    *tlsfiles.Source
}

// Names of the certificates WriteCerts issues: the files are NAME.crt and
// NAME.key in its directory.
const (
	CertQueue  = "queue"
	CertClient = "bench"
)

// ClientRoles are the roles of the bench client's certificate: the least
// the default role table needs for the cycle (Add is the observer's, Lease
// and Ack the worker's; health checks and Stats are allowed to both). One
// identity with both, not admin, so that each call is authorized by the
// table rows a deployment's observer and workers hit, and one certificate,
// so that the cycle over mTLS keeps the one connection its plaintext twin
// uses.
var ClientRoles = []string{tlsfiles.RoleObserver, tlsfiles.RoleWorker}

// WriteCerts writes a fresh CA, the queue's certificate (for 127.0.0.1 and
// localhost, where Start serves) and the bench client's (ClientRoles) into
// dir with client/certs, as `batonctl certs init` would, and loads the
// client's Source with client/tlsfiles.
func WriteCerts(dir string) (*TLS, error) {
	now := time.Now()
	ca, err := certs.NewCA(certs.DefaultCADays, now)
	if err != nil {
		return nil, err
	}
	hosts := []string{"127.0.0.1", "localhost"}
	leaves := []certs.Leaf{
		{Name: CertQueue, Roles: []string{tlsfiles.RoleQueuePeer}, Hosts: hosts, Days: certs.DefaultDays},
		{Name: CertClient, Roles: ClientRoles, Hosts: hosts, Days: certs.DefaultDays},
	}
	if _, err := certs.Init(dir, ca, leaves, false, now); err != nil {
		return nil, fmt.Errorf("write the certificates: %w", err)
	}
	file := func(name, ext string) string { return filepath.Join(dir, name+ext) }
	caFile := file(certs.CAName, ".crt")
	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: file(CertClient, ".crt"), KeyFile: file(CertClient, ".key"), CAFile: caFile})
	if err != nil {
		return nil, err
	}
	return &TLS{CertFile: file(CertQueue, ".crt"), KeyFile: file(CertQueue, ".key"), CAFile: caFile, Client: src}, nil
}
