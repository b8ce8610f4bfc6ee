package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/batonrun/baton/services/queue/internal/store/fsys"
)

// FS is the file system the store needs (fsys.FS). OS is the real one; the
// tests use faultfs's, which forgets everything not fsynced at a simulated
// power loss, and fails fsync or runs out of space on demand.
type FS = fsys.FS

// File is an open file (fsys.File).
type File = fsys.File

// OS is the operating system's file system.
type OS struct{}

var _ FS = OS{}

// Create implements FS.
func (OS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

// OpenAppend implements FS.
func (OS) OpenAppend(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f}, nil
}

// ReadFile implements FS.
func (OS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }

// Truncate implements FS.
func (OS) Truncate(name string, size int64) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Rename implements FS.
func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// List implements FS.
func (OS) List(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(es))
	for _, e := range es {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// MkdirAll implements FS.
func (OS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// SyncDir implements FS.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// Lock implements FS with an exclusive flock(2) on dir/lock, which the
// kernel drops when the process dies, so a SIGKILLed queue never leaves its
// directory locked.
func (OS) Lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

type osFile struct{ f *os.File }

func (o *osFile) Write(p []byte) (int, error) { return o.f.Write(p) }

// Sync uses fdatasync: the log needs its data and size durable, not its
// mtime, and fdatasync does about 45% more syncs a second than fsync on the
// project's machine (docs/benchmarks.md, "The machine, measured once").
func (o *osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(o.f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: o.f.Name(), Err: err}
			}
			return nil
		}
	}
}

// Truncate cuts the file and moves the write offset to its new end: a file
// made by Create is not in append mode, and writing on at the old offset
// would leave a hole of zeros in the log.
func (o *osFile) Truncate(size int64) error {
	if err := o.f.Truncate(size); err != nil {
		return err
	}
	_, err := o.f.Seek(size, io.SeekStart)
	return err
}
func (o *osFile) Close() error { return o.f.Close() }

// writeFileAtomic replaces dir/name with data: tmp, fsync, rename, fsync
// dir, so a reader finds the old file or the new one, whole. The Store and
// the RaftLog both write their small files (epoch, clean) with it.
func writeFileAtomic(fs FS, dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	_ = fs.Remove(tmp)
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fs.SyncDir(dir)
}
