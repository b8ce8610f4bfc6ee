// Package certs makes the certificates of a Baton deployment, in pure Go
// (ECDSA P-256, no openssl): a CA, and certificates it issues whose
// subject CN is the name and whose subject O values are the roles, written
// "baton:<role>" (docs/design.md, "Trust"; docs/security.md,
// "Certificates"). Every certificate it issues is good for both ends of a
// connection (server and client authentication), since a Baton process
// serves with the same certificate it dials with.
//
// A directory holds ca.crt and ca.key, and NAME.crt and NAME.key for each
// certificate issued. Keys are written readable by their owner only
// (0600), certificates 0644; an existing file is replaced only when asked
// (force), each by a rename, so a process reading it (client/tlsfiles)
// never sees half a file.
//
// `batonctl certs init|issue` and `baton-dev --tls` make their
// certificates with it, and tests make theirs; it lives beside
// client/tlsfiles, which reads what it writes.
//
//	ca, err := certs.NewCA(certs.DefaultCADays, time.Now())
//	written, err := certs.Init(dir, ca, certs.Defaults(certs.DefaultHosts(), certs.DefaultDays), false, time.Now())
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
)

// Defaults of a deployment's certificates.
const (
	// DefaultDays is how long an issued certificate is valid.
	DefaultDays = 365
	// DefaultCADays is how long the CA is valid (10 years).
	DefaultCADays = 3650
	// MaxDays bounds every validity (100 years).
	MaxDays = 36500
)

// CAName is the base name of the CA's files: ca.crt, ca.key.
const CAName = "ca"

// caCommonName is the subject CN of the CA init makes.
const caCommonName = "Baton CA"

// backdate is how far before now a certificate's validity starts, so that
// a peer whose clock is a little behind accepts it.
const backdate = 5 * time.Minute

// DefaultHosts returns the names and addresses service certificates carry
// unless told otherwise: compose's service names (queue-2 and queue-3 are
// the members docker-compose.ha.yml adds) and loopback.
func DefaultHosts() []string {
	return []string{"queue", "queue-2", "queue-3", "observer", "worker", "etcd", "localhost", "127.0.0.1", "::1"}
}

// Leaf is a certificate to issue.
type Leaf struct {
	// Name is the subject CN, the identity's name, and the files' base
	// name (NAME.crt, NAME.key).
	Name string
	// Roles are written as subject O values "baton:<role>".
	Roles []string
	// Hosts are the DNS names and IP addresses the certificate is valid
	// for as a server (its subject alternative names).
	Hosts []string
	// Days is how long it is valid, from now.
	Days int
}

// Defaults returns the certificates of a deployment: one for each service
// with its role, one for each kind of user of batonctl, and etcd's server
// and client (no role: etcd knows no Baton role), all for hosts.
func Defaults(hosts []string, days int) []Leaf {
	leaf := func(name string, roles ...string) Leaf {
		return Leaf{Name: name, Roles: roles, Hosts: hosts, Days: days}
	}
	return []Leaf{
		leaf("queue", tlsfiles.RoleQueuePeer),
		leaf("observer", tlsfiles.RoleObserver),
		leaf("worker", tlsfiles.RoleWorker),
		leaf("viewer", tlsfiles.RoleViewer),
		leaf("admin", tlsfiles.RoleAdmin),
		leaf("etcd-server"),
		leaf("etcd-client"),
	}
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	roleRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	// A DNS name of letters, digits, '-' and '_' labels, the first
	// possibly "*".
	hostRE = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*$`)
)

// ValidateName checks a certificate's name, which is also a file name.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("the name is empty")
	case name == CAName:
		return fmt.Errorf("the name %q is the CA's", name)
	case len(name) > 64: // RFC 5280's upper bound of a CN
		return fmt.Errorf("the name %q is longer than 64 characters", name)
	case !nameRE.MatchString(name):
		return fmt.Errorf("the name %q is not letters, digits, '.', '_' and '-' (it names the files NAME.crt and NAME.key)", name)
	}
	return nil
}

// ValidateRole checks a role as written in a command line, without its
// "baton:" prefix.
func ValidateRole(role string) error {
	switch {
	case strings.HasPrefix(role, tlsfiles.RolePrefix):
		return fmt.Errorf("role %q: give it without the %q prefix, which is added", role, tlsfiles.RolePrefix)
	case !roleRE.MatchString(role):
		return fmt.Errorf("role %q is not lower-case letters, digits, '.', '_' and '-'", role)
	}
	return nil
}

// ValidateHost checks a subject alternative name: a DNS name (perhaps
// "*.example.com") or an IP address.
func ValidateHost(host string) error {
	if net.ParseIP(host) != nil {
		return nil
	}
	if strings.Contains(host, "://") {
		return fmt.Errorf("host %q is a URL: give its host only", host)
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		return fmt.Errorf("host %q has a port: give %q", host, h)
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		return fmt.Errorf("host %q: give the IPv6 address without brackets", host)
	}
	if len(host) > 253 || !hostRE.MatchString(host) {
		return fmt.Errorf("host %q is not a DNS name or an IP address", host)
	}
	return nil
}

// ValidateDays checks a validity in days.
func ValidateDays(days int) error {
	if days < 1 || days > MaxDays {
		return fmt.Errorf("%d days is not between 1 and %d", days, MaxDays)
	}
	return nil
}

// Validate checks l, naming the bad field.
func (l Leaf) Validate() error {
	if err := ValidateName(l.Name); err != nil {
		return err
	}
	for _, r := range l.Roles {
		if err := ValidateRole(r); err != nil {
			return err
		}
	}
	for _, h := range l.Hosts {
		if err := ValidateHost(h); err != nil {
			return err
		}
	}
	return ValidateDays(l.Days)
}

// CA is a certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a CA valid for days from now.
func NewCA(days int, now time.Time) (*CA, error) {
	if err := ValidateDays(days); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the CA's key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(0, 0, days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make the CA's certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads the CA of dir (ca.crt and ca.key), with errors naming the
// file (client/tlsfiles's).
func LoadCA(dir string) (*CA, error) {
	certFile, keyFile := filepath.Join(dir, CAName+".crt"), filepath.Join(dir, CAName+".key")
	src, err := tlsfiles.Load(tlsfiles.Config{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (batonctl certs init %s makes a CA)", err, dir)
		}
		return nil, err
	}
	pair := src.Certificate()
	if !pair.Leaf.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", certFile)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: the key cannot sign", keyFile)
	}
	return &CA{Cert: pair.Leaf, Key: signer}, nil
}

// Issue makes the certificate of l, signed by ca, and its new key, both in
// PEM. A certificate may not outlive its CA.
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	if err := l.Validate(); err != nil {
		return nil, nil, nil, err
	}
	notAfter := now.AddDate(0, 0, l.Days)
	if notAfter.After(ca.Cert.NotAfter) {
		return nil, nil, nil, fmt.Errorf("%s: %d days would outlive the CA, valid until %s", l.Name, l.Days, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate the key of %s: %w", l.Name, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.Name},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// One certificate serves and dials.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, r := range l.Roles {
		tmpl.Subject.Organization = append(tmpl.Subject.Organization, tlsfiles.RolePrefix+r)
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("make the certificate of %s: %w", l.Name, err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return encodeCert(der), keyPEM, cert, nil
}

// newSerial returns a random 128-bit serial number (RFC 5280 allows up to
// 20 octets; CA/Browser forum rules ask for 64 random bits at least).
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("make a serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // positive, never 0
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ErrExist is returned when a file to write exists and force is not set.
var ErrExist = errors.New("certs: file exists")

// Written is one certificate written, and its key.
type Written struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
}

// Init writes ca and the certificates of leaves, which it issues, into dir
// (made if missing). Unless force, it writes nothing if any of the files
// exists.
func Init(dir string, ca *CA, leaves []Leaf, force bool, now time.Time) ([]Written, error) {
	caKey, err := encodeKey(ca.Key)
	if err != nil {
		return nil, err
	}
	// Each key before its certificate, as Issue writes them.
	out := []output{
		{name: CAName + ".key", data: caKey, mode: 0o600},
		{name: CAName + ".crt", data: encodeCert(ca.Cert.Raw), mode: 0o644},
	}
	written := []Written{{CertFile: filepath.Join(dir, CAName+".crt"), KeyFile: filepath.Join(dir, CAName+".key"), Cert: ca.Cert}}
	for _, l := range leaves {
		certPEM, keyPEM, cert, err := ca.Issue(l, now)
		if err != nil {
			return nil, err
		}
		out = append(out, output{name: l.Name + ".key", data: keyPEM, mode: 0o600}, output{name: l.Name + ".crt", data: certPEM, mode: 0o644})
		written = append(written, Written{CertFile: filepath.Join(dir, l.Name+".crt"), KeyFile: filepath.Join(dir, l.Name+".key"), Cert: cert})
	}
	if err := writeAll(dir, out, force); err != nil {
		return nil, err
	}
	return written, nil
}

// Issue issues l from the CA of dir and writes it there. Unless force, it
// writes nothing if NAME.crt or NAME.key exists.
func Issue(dir string, l Leaf, force bool, now time.Time) (Written, error) {
	if err := l.Validate(); err != nil {
		return Written{}, err
	}
	ca, err := LoadCA(dir)
	if err != nil {
		return Written{}, err
	}
	certPEM, keyPEM, cert, err := ca.Issue(l, now)
	if err != nil {
		return Written{}, err
	}
	// The key first: a process that reloads between the two renames
	// sees a pair that does not match and keeps its old one
	// (client/tlsfiles).
	err = writeAll(dir, []output{
		{name: l.Name + ".key", data: keyPEM, mode: 0o600},
		{name: l.Name + ".crt", data: certPEM, mode: 0o644},
	}, force)
	if err != nil {
		return Written{}, err
	}
	return Written{CertFile: filepath.Join(dir, l.Name+".crt"), KeyFile: filepath.Join(dir, l.Name+".key"), Cert: cert}, nil
}

// output is one file to write.
type output struct {
	name string
	data []byte
	mode os.FileMode
}

// writeAll writes out into dir, each file synced, and then syncs the
// directory. Unless force, it first checks that none exists and writes
// nothing if one does, and then makes each anew; with force, each file
// replaces its old one by a rename.
func writeAll(dir string, out []output, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	if !force {
		var exist []string
		for _, o := range out {
			p := filepath.Join(dir, o.name)
			if _, err := os.Lstat(p); err == nil {
				exist = append(exist, p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if len(exist) > 0 {
			return &ExistError{Paths: exist}
		}
	}
	for _, o := range out {
		if err := writeFile(dir, o, force); err != nil {
			return err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// ExistError is returned when files to write exist and force is not set;
// it matches ErrExist.
type ExistError struct{ Paths []string }

func (e *ExistError) Error() string {
	what := e.Paths[0]
	if len(e.Paths) > 1 {
		what = fmt.Sprintf("%s and %d more", what, len(e.Paths)-1)
	}
	verb := "exists"
	if len(e.Paths) > 1 {
		verb = "exist"
	}
	return fmt.Sprintf("%s %s: nothing written (--force replaces them)", what, verb)
}

func (e *ExistError) Is(target error) bool { return target == ErrExist }

func writeFile(dir string, o output, force bool) error {
	path := filepath.Join(dir, o.name)
	if !force {
		// A new file: O_EXCL, so one made since the check is not replaced.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, o.mode)
		if errors.Is(err, fs.ErrExist) {
			return &ExistError{Paths: []string{path}}
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return finish(f, path, o)
	}
	// A replacement: whole by a rename, so a reader never sees half.
	tmp, err := os.CreateTemp(dir, "."+o.name+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := finish(tmp, path, o); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// finish writes o's bytes to f, sets its mode (whatever the umask), syncs
// and closes it.
func finish(f *os.File, path string, o output) error {
	_, err := f.Write(o.data)
	if err == nil {
		err = f.Chmod(o.mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ServiceNames are the certificates of Defaults that services (rather
// than people) use: the ones a deployment may share with the services'
// user, where the CA's key and the users' (viewer, admin) stay the
// writer's alone.
func ServiceNames() []string {
	return []string{"queue", "observer", "worker", "etcd-server", "etcd-client"}
}

// Complete brings dir to hold the CA and every certificate of leaves
// without replacing a file: it uses the CA of dir, making one valid for
// caDays if there is none, and issues each leaf whose two files are both
// missing. It returns what it wrote, nothing when dir was complete. A pair
// with one file of two, or a CA with its key missing, is an error that
// names it: half a pair is a mistake a person should look at, not one to
// paper over. It is what a one-shot that runs at every start of a
// deployment calls (compose's certs service).
func Complete(dir string, caDays int, leaves []Leaf, now time.Time) ([]Written, error) {
	state := func(name string) (bool, error) {
		crt, err := exists(filepath.Join(dir, name+".crt"))
		if err != nil {
			return false, err
		}
		key, err := exists(filepath.Join(dir, name+".key"))
		if err != nil {
			return false, err
		}
		if crt != key {
			missing := name + ".key"
			if key {
				missing = name + ".crt"
			}
			return false, fmt.Errorf("%s is missing beside its pair: remove the other file to issue both again, or init --force to replace every file", filepath.Join(dir, missing))
		}
		return crt, nil
	}
	haveCA, err := state(CAName)
	if err != nil {
		return nil, err
	}
	if !haveCA {
		ca, err := NewCA(caDays, now)
		if err != nil {
			return nil, err
		}
		var todo []Leaf
		for _, l := range leaves {
			have, err := state(l.Name)
			if err != nil {
				return nil, err
			}
			if have {
				return nil, fmt.Errorf("%s exists but %s does not: a certificate of another CA would not verify; remove it, or init --force", filepath.Join(dir, l.Name+".crt"), filepath.Join(dir, CAName+".crt"))
			}
			todo = append(todo, l)
		}
		return Init(dir, ca, todo, false, now)
	}
	var written []Written
	for _, l := range leaves {
		have, err := state(l.Name)
		if err != nil {
			return written, err
		}
		if have {
			continue
		}
		w, err := Issue(dir, l, false, now)
		if err != nil {
			return written, err
		}
		written = append(written, w)
	}
	return written, nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// Share gives the files of written to uid:gid (-1 keeps either), and makes
// the keys of the certificates named in groupKeys readable by their group
// (0640), for a directory that processes of another user read: compose's
// ./certs is written by a one-shot as root, belongs to the user whose
// checkout it is, and is read by services that run as 65532.
func Share(written []Written, uid, gid int, groupKeys []string) error {
	for _, w := range written {
		if slices.Contains(groupKeys, strings.TrimSuffix(filepath.Base(w.KeyFile), ".key")) {
			if err := os.Chmod(w.KeyFile, 0o640); err != nil {
				return fmt.Errorf("share %s: %w", w.KeyFile, err)
			}
		}
		for _, p := range []string{w.KeyFile, w.CertFile} {
			if err := os.Lchown(p, uid, gid); err != nil {
				return fmt.Errorf("share %s: %w", p, err)
			}
		}
	}
	return nil
}
