// Package fsys defines the file system the queue's store and Raft log
// write through: store.OS is the operating system's, and package faultfs,
// for tests, an in-memory one that forgets at a simulated power loss what
// was never synced. It is a package of its own, with nothing but the two
// interfaces, so that faultfs can implement them without importing the
// store, whose own tests use faultfs.
package fsys

// FS is the file system the store needs.
type FS interface {
	// Create creates a new file for writing; it fails if name exists.
	Create(name string) (File, error)
	// OpenAppend opens an existing file for appending.
	OpenAppend(name string) (File, error)
	ReadFile(name string) ([]byte, error)
	// Truncate cuts a closed file to size and makes that durable.
	Truncate(name string, size int64) error
	Rename(oldname, newname string) error
	Remove(name string) error
	// List returns the names (not paths) of the files in dir.
	List(dir string) ([]string, error)
	MkdirAll(dir string) error
	// SyncDir makes the directory's entries (creations, renames, removals)
	// durable.
	SyncDir(dir string) error
	// Lock takes dir for this process alone, or fails with store.ErrLocked if
	// another process has it; unlock gives it back.
	Lock(dir string) (unlock func(), err error)
}

// File is an open file.
type File interface {
	Write(p []byte) (int, error)
	// Sync makes the file's data durable (fdatasync).
	Sync() error
	// Truncate cuts the file to size; the next Write appends there.
	Truncate(size int64) error
	Close() error
}
