package tlsfiles

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Errors a FileError wraps, to match with errors.Is. Their texts follow the
// file's name in the FileError's message.
var (
	// ErrNoCertificate is returned when a certificate or CA file holds no
	// complete PEM CERTIFICATE block.
	ErrNoCertificate = errors.New("no PEM certificate in it")
	// ErrNoKey is returned when a key file holds no PEM private key.
	ErrNoKey = errors.New("no PEM private key in it")
	// ErrKeyMismatch is returned when the key file's key is not the one of
	// the certificate file's certificate (as when a rotation has replaced
	// one of the two files but not yet the other).
	ErrKeyMismatch = errors.New("the key does not match the certificate")
	// ErrCutShort is returned when a file ends inside a PEM block (it may
	// be being written).
	ErrCutShort = errors.New("a PEM block is cut short")
	// ErrNotRegular is returned when a file is not a regular file (a
	// device, a FIFO, a directory …): it is not opened for reading.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is returned when a file holds more than MaxFileBytes.
	ErrTooLarge = fmt.Errorf("larger than %d bytes", MaxFileBytes)
	// ErrExpired is returned when the certificate of a pair is past its
	// NotAfter.
	ErrExpired = errors.New("the certificate has expired")
	// ErrNotYetValid is returned when the certificate of a pair is before
	// its NotBefore.
	ErrNotYetValid = errors.New("the certificate is not valid yet")
)

// MaxFileBytes is the most a certificate, key or CA file may hold. A
// certificate with its chain is a few kilobytes and a system's whole CA
// bundle a few hundred; more is not a PEM file of this kind, and is not
// read.
const MaxFileBytes = 1 << 20

// FileError is returned when one of the files cannot be used; it names the
// file and what kind of file it is meant to be.
type FileError struct {
	// Kind is "certificate", "key" or "CA".
	Kind string
	// Path is the file's name as configured.
	Path string
	// Err is why: an error of the file system (fs.ErrNotExist …), of
	// parsing, or one of the Err* above.
	Err error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("tlsfiles: %s file %s: %v", e.Kind, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Config names the files and says where their problems go.
type Config struct {
	// CertFile is this process's certificate in PEM, the leaf first and
	// then any intermediates; KeyFile its private key in PEM (PKCS8,
	// SEC1 or PKCS1). Both or neither: without them a server cannot be
	// built, and a client presents no certificate.
	CertFile, KeyFile string
	// CAFile is the PEM bundle of the CAs that verify the other side.
	// Without it a server asks for no client certificate, and a client
	// verifies servers against the system's roots.
	CAFile string
	// Logger logs each reload and each change that could not be used; nil
	// discards.
	Logger *slog.Logger
	// OnError, if set, is called with the error of each change of the files
	// that could not be used, once per change, while the last good files
	// stay in use. It runs on the goroutine of a handshake (or of Refresh),
	// after the reload, and may call the Source's methods.
	OnError func(error)
}

// Validate checks that the configuration names a usable set of files.
func (c Config) Validate() error {
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return fmt.Errorf("tlsfiles: certificate file %s is set without its key file", c.CertFile)
	case c.CertFile == "" && c.KeyFile != "":
		return fmt.Errorf("tlsfiles: key file %s is set without its certificate file", c.KeyFile)
	case c.CertFile == "" && c.CAFile == "":
		return errors.New("tlsfiles: no file is set (a certificate and key, a CA file, or both)")
	}
	return nil
}

// Attribute keys of the Source's log lines.
const (
	logKeyFile   = "file"
	logKeySerial = "serial"
	logKeyName   = "name"
	logKeyUntil  = "not_after"
	logKeyCerts  = "certificates"
	logKeyErr    = "err"
)

// racyWindow is how long after a file's modification time its stat is not
// trusted to show a further change: file systems stamp times with a coarse
// clock, so two writes of the same size within one tick (a replaced inode
// number may be reused) look the same to stat. Within it the file's bytes
// are compared instead.
const racyWindow = 2 * time.Second

// Source is the current certificate, key and CA bundle, re-read from the
// files when they change. It is safe for concurrent use.
type Source struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu  sync.Mutex // serializes reloads
	cur atomic.Pointer[state]
}

// Indexes of state.files.
const (
	fileCert = iota
	fileKey
	fileCA
)

// state is one immutable snapshot of what is in use and of the files as
// they were last read.
type state struct {
	pair    *tls.Certificate // nil without CertFile
	pool    *x509.CertPool   // nil without CAFile
	pairErr error            // why the certificate and key files as they are now are not in use
	caErr   error            // the same for the CA file
	files   [3]file
	// retryAt, when set, is the NotBefore of a pair refused as not valid
	// yet: the files are parsed again once it has passed, though they
	// have not changed.
	retryAt time.Time
}

// file is one file as last read: its stat and its bytes (or read error).
type file struct {
	path  string
	stamp stamp
	data  []byte
	err   error
}

// stamp is what a stat tells of a file's contents.
type stamp struct {
	exists bool
	size   int64
	mtime  int64 // nanoseconds since the epoch
	inode  uint64
}

func statFile(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	return stamp{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano(), inode: inode(fi)}
}

// racy reports whether the file was modified within racyWindow of now.
func (s stamp) racy(now time.Time) bool {
	return s.exists && now.UnixNano()-s.mtime < int64(racyWindow)
}

// Load reads the files of c and returns the Source that keeps them
// current. Any problem with them is an error naming the file (a
// *FileError).
func Load(c Config) (*Source, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: c, log: c.Logger, now: time.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	st := &state{}
	st.files[fileCert].path = c.CertFile
	st.files[fileKey].path = c.KeyFile
	st.files[fileCA].path = c.CAFile
	// Mark every configured file unread, so the first reload reads it.
	for i := range st.files {
		st.files[i].err = errUnread
	}
	s.cur.Store(st)
	s.mu.Lock()
	errs := s.reloadLocked()
	s.mu.Unlock()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// errUnread marks a file not read yet.
var errUnread = errors.New("not read yet")

// Config returns the configuration the Source was loaded with.
func (s *Source) Config() Config { return s.cfg }

// Certificate returns the certificate and key in use, after checking the
// files; nil without CertFile. The result must not be modified.
func (s *Source) Certificate() *tls.Certificate {
	s.check()
	return s.cur.Load().pair
}

// Pool returns the CA bundle in use, after checking the files; nil without
// CAFile. The result must not be modified.
func (s *Source) Pool() *x509.CertPool {
	s.check()
	return s.cur.Load().pool
}

// Refresh checks the files now, as a handshake does, and returns why the
// files as they are now are not in use (nil when they are): the last good
// ones then still are.
func (s *Source) Refresh() error {
	s.check()
	st := s.cur.Load()
	return errors.Join(st.pairErr, st.caErr)
}

// check reloads whatever changed. The common case, nothing changed, is a
// stat of each file without a lock.
func (s *Source) check() {
	st := s.cur.Load()
	now := s.now()
	changed := false
	for i := range st.files {
		f := &st.files[i]
		if f.path == "" {
			continue
		}
		if sp := statFile(f.path); sp != f.stamp || sp.racy(now) {
			changed = true
			break
		}
	}
	if !changed && (st.retryAt.IsZero() || now.Before(st.retryAt)) {
		return
	}
	s.mu.Lock()
	errs := s.reloadLocked()
	s.mu.Unlock()
	if s.cfg.OnError != nil {
		for _, err := range errs {
			s.cfg.OnError(err)
		}
	}
}

// reloadLocked reads the files whose stat changed (or is racy), reloads
// the certificate and key if either of their bytes changed and the CA
// bundle if its bytes changed, and stores the result. It returns the
// errors of the changes that could not be used. s.mu is held.
func (s *Source) reloadLocked() []error {
	old := s.cur.Load()
	next := *old
	now := s.now()
	var changed [3]bool
	for i := range next.files {
		f := &next.files[i]
		if f.path == "" {
			continue
		}
		sp := statFile(f.path)
		if sp == f.stamp && !sp.racy(now) && f.err != errUnread {
			continue
		}
		// Stat before reading: a write after the stat shows in the next
		// stat, and is read then.
		data, err := readFile(f.path)
		if err != nil {
			data = nil
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the FileError names the file
			}
		}
		same := err == nil && f.err == nil && bytes.Equal(data, f.data) ||
			err != nil && f.err != nil && err.Error() == f.err.Error()
		*f = file{path: f.path, stamp: sp, data: data, err: err}
		changed[i] = !same
	}
	var errs []error
	due := !old.retryAt.IsZero() && !now.Before(old.retryAt)
	if changed[fileCert] || changed[fileKey] || due {
		next.retryAt = time.Time{}
		pair, err := parsePair(next.files[fileCert], next.files[fileKey])
		if err == nil {
			if verr := s.validAt(pair, now); verr != nil {
				if old.pair != nil {
					// A rotation: the pair in use stays, and one not
					// valid yet is tried again when it is.
					err = verr
					if errors.Is(verr, ErrNotYetValid) {
						next.retryAt = pair.Leaf.NotBefore
					}
				} else {
					// The first load has no other pair to keep: a
					// client may present this one (its peer refuses
					// it); ServerConfig refuses to serve it.
					s.log.Warn("tls certificate is outside its validity period", logKeyErr, verr)
				}
			}
		}
		if err != nil {
			next.pairErr = err
			errs = append(errs, err)
			if old.pair != nil {
				s.log.Warn("tls certificate or key changed but cannot be used; the last good pair stays in use",
					logKeyErr, err, logKeySerial, serial(old.pair.Leaf))
			}
		} else {
			next.pair, next.pairErr = pair, nil
			s.log.Info("tls certificate loaded", logKeyFile, s.cfg.CertFile,
				logKeyName, Shown(pair.Leaf.Subject.CommonName), logKeySerial, serial(pair.Leaf),
				logKeyUntil, pair.Leaf.NotAfter)
		}
	}
	if changed[fileCA] {
		pool, n, err := parseCA(next.files[fileCA])
		if err != nil {
			next.caErr = err
			errs = append(errs, err)
			if old.pool != nil {
				s.log.Warn("tls CA file changed but cannot be used; the last good bundle stays in use", logKeyErr, err)
			}
		} else {
			next.pool, next.caErr = pool, nil
			s.log.Info("tls CA bundle loaded", logKeyFile, s.cfg.CAFile, logKeyCerts, n)
		}
	}
	s.cur.Store(&next)
	return errs
}

// readFile returns the contents of the regular file path, at most
// MaxFileBytes. Anything else (a device, a FIFO, a directory …) is
// refused before it is opened, and checked again once opened, since the
// path may have been replaced in between; a file that grows while it is
// read is read no further than the limit.
func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regularAndSmall(fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regularAndSmall(fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, ErrTooLarge
	}
	return data, nil
}

// regularAndSmall returns ErrNotRegular or ErrTooLarge for a file that is
// not to be read.
func regularAndSmall(fi fs.FileInfo) error {
	m := fi.Mode()
	if !m.IsRegular() {
		what := "an irregular file"
		switch {
		case m.IsDir():
			what = "a directory"
		case m&fs.ModeNamedPipe != 0:
			what = "a named pipe"
		case m&fs.ModeSocket != 0:
			what = "a socket"
		case m&fs.ModeDevice != 0:
			what = "a device"
		}
		return fmt.Errorf("%w (%s)", ErrNotRegular, what)
	}
	if fi.Size() > MaxFileBytes {
		return ErrTooLarge
	}
	return nil
}

// validAt returns why pair's certificate cannot be used at now (a
// *FileError wrapping ErrExpired or ErrNotYetValid), or nil.
func (s *Source) validAt(pair *tls.Certificate, now time.Time) error {
	leaf := pair.Leaf
	var err error
	switch {
	case now.Before(leaf.NotBefore):
		err = ErrNotYetValid
	case now.After(leaf.NotAfter):
		err = ErrExpired
	default:
		return nil
	}
	return &FileError{Kind: "certificate", Path: s.cfg.CertFile, Err: fmt.Errorf("%w (valid from %s until %s; it is %s)", err,
		leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
}

func serial(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	return c.SerialNumber.Text(16)
}

// parsePair parses a certificate file and its key file.
func parsePair(certFile, keyFile file) (*tls.Certificate, error) {
	if certFile.err != nil {
		return nil, &FileError{Kind: "certificate", Path: certFile.path, Err: certFile.err}
	}
	if keyFile.err != nil {
		return nil, &FileError{Kind: "key", Path: keyFile.path, Err: keyFile.err}
	}
	certs, err := parseCertificates(certFile.data)
	if err != nil {
		return nil, &FileError{Kind: "certificate", Path: certFile.path, Err: err}
	}
	key, err := parseKey(keyFile.data)
	if err != nil {
		return nil, &FileError{Kind: "key", Path: keyFile.path, Err: err}
	}
	leaf := certs[0]
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, &FileError{Kind: "key", Path: keyFile.path, Err: fmt.Errorf("%w in %s", ErrKeyMismatch, certFile.path)}
	}
	pair := &tls.Certificate{PrivateKey: key, Leaf: leaf}
	for _, c := range certs {
		pair.Certificate = append(pair.Certificate, c.Raw)
	}
	return pair, nil
}

// parseCA parses a CA bundle; it returns the pool and how many
// certificates it holds.
func parseCA(f file) (*x509.CertPool, int, error) {
	if f.err != nil {
		return nil, 0, &FileError{Kind: "CA", Path: f.path, Err: f.err}
	}
	certs, err := parseCertificates(f.data)
	if err != nil {
		return nil, 0, &FileError{Kind: "CA", Path: f.path, Err: err}
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, len(certs), nil
}

// parseCertificates returns the certificates of data's PEM CERTIFICATE
// blocks, in order; other blocks are skipped.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, ErrCutShort
	}
	if len(certs) == 0 {
		return nil, ErrNoCertificate
	}
	return certs, nil
}

// parseKey returns the first private key of data.
func parseKey(data []byte) (crypto.Signer, error) {
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if !strings.HasSuffix(block.Type, "PRIVATE KEY") {
			continue
		}
		if block.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, errors.New("the private key is encrypted (give it unencrypted, readable by this process only)")
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.ToLower(block.Type), err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", key)
		}
		return signer, nil
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, ErrCutShort
	}
	return nil, ErrNoKey
}
