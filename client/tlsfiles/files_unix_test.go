//go:build unix

package tlsfiles

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadBounded is Load, failing the test when it has not returned within
// 10 s (as a blocking read of a FIFO never does).
func loadBounded(t *testing.T, c Config) (*Source, error) {
	t.Helper()
	type result struct {
		s   *Source
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Load(c)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		return r.s, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Load did not return within 10 s")
		return nil, nil
	}
}

// padded returns data followed by newlines up to n bytes.
func padded(data []byte, n int) []byte {
	return append(bytes.Clone(data), bytes.Repeat([]byte("\n"), n-len(data))...)
}

// TestFilesThatAreNotRegularOrTooLarge: a certificate, key or CA file
// that is a device, a FIFO or a directory, or holds more than
// MaxFileBytes, is refused at Load, without blocking and naming the file;
// one of exactly MaxFileBytes is read.
func TestFilesThatAreNotRegularOrTooLarge(t *testing.T) {
	ca := newTestCA(t, "ca")
	p := ca.issue(t, leaf{})
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		writeAtomic(t, path, data)
		return path
	}
	cert, key := write("a.crt", p.certPEM), write("a.key", p.keyPEM)
	zero := filepath.Join(dir, "zero.crt")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.key")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	subdir := filepath.Join(dir, "ca.d")
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	big := write("big.crt", padded(ca.pem, MaxFileBytes+1))
	for _, tc := range []struct {
		name   string
		cfg    Config
		target error
		want   string
	}{
		{"a link to /dev/zero as certificate", Config{CertFile: zero, KeyFile: key}, ErrNotRegular, "certificate file " + zero + ": not a regular file (a device)"},
		{"a FIFO as key", Config{CertFile: cert, KeyFile: fifo}, ErrNotRegular, "key file " + fifo + ": not a regular file (a named pipe)"},
		{"a directory as CA", Config{CAFile: subdir}, ErrNotRegular, "CA file " + subdir + ": not a regular file (a directory)"},
		{"a CA file over the limit", Config{CAFile: big}, ErrTooLarge, "CA file " + big + ": larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadBounded(t, tc.cfg)
			if !errors.Is(err, tc.target) {
				t.Fatalf("Load = %v, want %v", err, tc.target)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q lacks %q", err, tc.want)
			}
		})
	}
	t.Run("at the limit", func(t *testing.T) {
		atLimit := write("limit.crt", padded(ca.pem, MaxFileBytes))
		if _, err := loadBounded(t, Config{CAFile: atLimit, CertFile: cert, KeyFile: key}); err != nil {
			t.Errorf("a CA file of exactly MaxFileBytes: %v", err)
		}
	})
}

// TestRotationToFilesThatCannotBeRead: a certificate replaced by a link to
// /dev/zero, by a FIFO or by a file over the limit keeps the last good
// pair in use, and each such state is reported and logged once, however
// many handshakes see it.
func TestRotationToFilesThatCannotBeRead(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cfg := e.client.ClientConfig("localhost")
	good := serverSerial(t, e.srv.addr, cfg)
	dir := t.TempDir()
	replace := func(make func(tmp string) error) {
		t.Helper()
		tmp := filepath.Join(dir, "next")
		os.Remove(tmp)
		if err := make(tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, e.serverFiles.cert); err != nil {
			t.Fatal(err)
		}
	}
	next := e.ca.issue(t, leaf{name: "queue"})
	for i, tc := range []struct {
		name   string
		make   func(tmp string) error
		target error
	}{
		{"link to /dev/zero", func(tmp string) error { return os.Symlink("/dev/zero", tmp) }, ErrNotRegular},
		{"FIFO", func(tmp string) error { return syscall.Mkfifo(tmp, 0o600) }, ErrNotRegular},
		{"over the limit", func(tmp string) error { return os.WriteFile(tmp, padded(next.certPEM, MaxFileBytes+1), 0o600) }, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.serverErrs.count(tc.target)
			replace(tc.make)
			for range 3 {
				// dialTLS gives up after 5 s: a server stuck reading
				// the file fails the handshake.
				cs, _, err := dialTLS(e.srv.addr, cfg)
				if err != nil {
					t.Fatalf("handshake: %v", err)
				}
				if got := cs.PeerCertificates[0].SerialNumber; got.Cmp(good) != 0 {
					t.Fatalf("the server presents %x, want the last good %x", got, good)
				}
			}
			if n := e.serverErrs.count(tc.target) - before; n != 1 {
				t.Errorf("reported %d times, want once: %v", n, e.serverErrs.all())
			}
			if warns := e.serverLog.warnings(); len(warns) != i+1 || !strings.Contains(warns[i], e.serverFiles.cert) {
				t.Errorf("WARN lines %q, want %d, the last naming %s", warns, i+1, e.serverFiles.cert)
			}
		})
	}
	writeAtomic(t, e.serverFiles.cert, next.certPEM)
	writeAtomic(t, e.serverFiles.key, next.keyPEM)
	if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(next.cert.SerialNumber) != 0 {
		t.Fatalf("after a good rotation the server presents %x, want %x", got, next.cert.SerialNumber)
	}
}

// TestRotationOutsideTheValidityPeriod: an expired pair is refused on
// rotation (logged and reported once) and never becomes the last good
// pair.
func TestRotationOutsideTheValidityPeriod(t *testing.T) {
	e := newEndpoints(t, RequireClientCert)
	cfg := e.client.ClientConfig("localhost")
	good := serverSerial(t, e.srv.addr, cfg)

	expired := e.ca.issue(t, leaf{name: "queue", notAfter: time.Now().Add(-time.Minute)})
	e.serverFiles.write(t, expired)
	for range 3 {
		if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(good) != 0 {
			t.Fatalf("after an expired pair was written the server presents %x, want the last good %x", got, good)
		}
	}
	if n := e.serverErrs.count(ErrExpired); n != 1 {
		t.Errorf("the expired pair was reported %d times, want once: %v", n, e.serverErrs.all())
	}
	if err := e.server.Refresh(); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), e.serverFiles.cert) {
		t.Errorf("Refresh = %v, want ErrExpired naming %s", err, e.serverFiles.cert)
	}
	warns := e.serverLog.warnings()
	if len(warns) != 1 || !strings.Contains(warns[0], "expired") {
		t.Errorf("WARN lines %q, want one saying expired", warns)
	}

	// A bad file after the expired pair: the pair in use is still the
	// first one, not the expired one.
	writeAtomic(t, e.serverFiles.key, expired.keyPEM[:len(expired.keyPEM)/2])
	if got := serverSerial(t, e.srv.addr, cfg); got.Cmp(good) != 0 {
		t.Fatalf("after a key cut short the server presents %x, want %x (never the expired one)", got, good)
	}
}

// TestRotationNotValidYet: a pair not valid yet is refused on rotation,
// and taken once the clock reaches its start, though its files have not
// changed since.
func TestRotationNotValidYet(t *testing.T) {
	ca := newTestCA(t, "ca")
	f := newFiles(t, "queue")
	good := ca.issue(t, leaf{name: "queue"})
	f.write(t, good, ca)
	start := time.Now()
	clock := &fakeClock{now: start}
	errs := &errorLog{}
	c := f.config()
	c.OnError = errs.add
	s := mustLoad(t, c)
	s.now = clock.Now

	future := ca.issue(t, leaf{name: "queue", notAfter: start.Add(3 * time.Hour)}) // valid from start+1h
	f.write(t, future)
	if got := s.Certificate().Leaf.SerialNumber; got.Cmp(good.cert.SerialNumber) != 0 {
		t.Fatalf("a pair not valid yet is in use: %x, want %x", got, good.cert.SerialNumber)
	}
	if err := s.Refresh(); !errors.Is(err, ErrNotYetValid) || !strings.Contains(err.Error(), f.cert) {
		t.Errorf("Refresh = %v, want ErrNotYetValid naming %s", err, f.cert)
	}
	clock.Set(start.Add(30 * time.Minute))
	if got := s.Certificate().Leaf.SerialNumber; got.Cmp(good.cert.SerialNumber) != 0 {
		t.Fatalf("a pair not valid yet is in use half an hour early: %x", got)
	}
	if n := errs.count(ErrNotYetValid); n != 1 {
		t.Errorf("reported %d times, want once: %v", n, errs.all())
	}
	clock.Set(start.Add(90 * time.Minute))
	if got := s.Certificate().Leaf.SerialNumber; got.Cmp(future.cert.SerialNumber) != 0 {
		t.Fatalf("once valid the new pair is not in use: %x, want %x", got, future.cert.SerialNumber)
	}
	if err := s.Refresh(); err != nil {
		t.Errorf("Refresh once the pair is valid = %v", err)
	}
}

// TestServerOutsideTheValidityPeriod: Load takes a pair outside its
// validity period (a client may present it; its peer refuses it), with a
// WARN, and a server is not built with it.
func TestServerOutsideTheValidityPeriod(t *testing.T) {
	ca := newTestCA(t, "ca")
	for _, tc := range []struct {
		name   string
		p      pair
		target error
	}{
		{"expired", ca.issue(t, leaf{notAfter: time.Now().Add(-time.Minute)}), ErrExpired},
		{"not valid yet", ca.issue(t, leaf{notAfter: time.Now().Add(3 * time.Hour)}), ErrNotYetValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFiles(t, "server")
			f.write(t, tc.p, ca)
			log := &logLines{}
			c := f.config()
			c.Logger = log.logger()
			s := mustLoad(t, c)
			if warns := log.warnings(); len(warns) != 1 || !strings.Contains(warns[0], f.cert) {
				t.Errorf("WARN lines %q, want one naming %s", warns, f.cert)
			}
			_, err := s.ServerConfig(RequireClientCert)
			if !errors.Is(err, tc.target) || !strings.Contains(err.Error(), "certificate file "+f.cert) {
				t.Errorf("ServerConfig = %v, want %v naming %s", err, tc.target, f.cert)
			}
		})
	}
}
