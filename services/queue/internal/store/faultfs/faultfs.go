// Package faultfs is an in-memory file system for tests only (no program
// of the queue imports it): a Disk that remembers, apart from what the
// running system sees, what would survive a power loss, and forgets the
// rest when a test cuts the power. It implements fsys.FS, the file
// system the store and the Raft log write through, so that the store's
// tests and the replicated queue's robustness tests run them on it.
package faultfs

import (
	"bytes"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/batonrun/baton/services/queue/internal/store/fsys"
)

// Disk is an in-memory disk that remembers, apart from what the running
// system sees, what would survive a power loss: for every file the bytes up
// to its last Sync, and for every directory the entries as of its last
// SyncDir. Crash throws the rest away, the way a machine that loses power
// does. It also injects the failures the store must survive: fsync errors,
// a full disk, and a crash at an arbitrary file-system operation.
//
// A crash starts a new generation: the FS handles (mounts) and open files of
// the old one fail every call with EIO, so a store abandoned at the crash can
// neither see nor change what the next Open recovers.
type Disk struct {
	mu      sync.Mutex
	gen     int
	dirs    map[string]bool
	live    map[string]*inode // what the running system sees
	durable map[string]*inode // directory entries that survive a crash
	pending []dirOp           // entry changes not yet made durable by SyncDir
	open    map[*file]bool

	// Faults.
	capacity     int64 // total bytes the disk holds; < 0 means unlimited
	syncFailAt   int64 // the sync call (counted by syncs) that starts failing; 0 = never
	syncFailOnce bool  // only the syncFailAt-th call fails
	writeFailAt  int64 // the write call (counted by writes) from which writes fail with EIO; 0 = never
	crashAt      int64 // the operation (counted by ops) that crashes first; 0 = never
	tornCrash    bool  // a crash at crashAt keeps a random part of what was not synced
	// writeBack makes the bytes of a write cut short by a full disk durable
	// at once, as the kernel's writeback may before anyone truncates them.
	writeBack   bool
	rng         *rand.Rand
	beforeWrite func(name string)
	beforeSync  func(name string)
	// lag delays what every Sync and SyncDir makes durable (LagSyncs);
	// lagged holds those answered and not yet done, oldest first.
	lag    time.Duration
	lagged []laggedSync

	// Counters.
	syncs  int64 // File.Sync and SyncDir calls
	writes int64 // File.Write calls
	ops    int64 // every call
}

type inode struct {
	data   []byte // as the running system reads it
	synced []byte // as a crash leaves it
}

// laggedSync is a Sync or SyncDir that a lagging disk answered and has
// not yet done: a file's data as of the call, or the entry changes of a
// directory.
type laggedSync struct {
	due  time.Time
	ino  *inode
	data []byte
	ops  []dirOp
}

type dirOp struct {
	kind     byte // 'c'reate, 'r'ename, 'd'elete
	name, to string
	ino      *inode
}

// New returns an empty disk; seed drives the random choices of CrashTorn.
func New(seed uint64) *Disk {
	return &Disk{
		gen:      1,
		dirs:     map[string]bool{"/": true},
		live:     map[string]*inode{},
		durable:  map[string]*inode{},
		open:     map[*file]bool{},
		capacity: -1,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// Mount returns an FS for the current generation.
func (d *Disk) Mount() *FS {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &FS{d: d, gen: d.gen}
}

// Crash loses everything that was not made durable and ends the generation.
func (d *Disk) Crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashLocked(false)
}

// CrashTorn is Crash, except that a random prefix of the unsynced entry
// changes and of each file's unsynced appended bytes survives (sometimes as
// zeros, as when a file's size reached the disk but its data did not): the
// states a real disk may be left in, not only the tidiest one.
func (d *Disk) CrashTorn() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashLocked(true)
}

func (d *Disk) crashLocked(torn bool) {
	d.flushLocked(time.Now())
	d.lagged = nil
	if torn && len(d.pending) > 0 {
		for _, op := range d.pending[:d.rng.IntN(len(d.pending)+1)] {
			op.apply(d.durable)
		}
	}
	d.pending = nil
	d.live = map[string]*inode{}
	for name, ino := range d.durable {
		keep := ino.synced
		if torn && len(ino.data) > len(ino.synced) && bytes.HasPrefix(ino.data, ino.synced) {
			extra := bytes.Clone(ino.data[len(ino.synced) : len(ino.synced)+d.rng.IntN(len(ino.data)-len(ino.synced)+1)])
			if d.rng.IntN(4) == 0 {
				clear(extra)
			}
			keep = append(bytes.Clone(ino.synced), extra...)
		}
		ino.data = bytes.Clone(keep)
		ino.synced = bytes.Clone(keep)
		d.live[name] = ino
	}
	d.open = map[*file]bool{}
	d.crashAt = 0
	d.gen++
}

func (op dirOp) apply(m map[string]*inode) {
	switch op.kind {
	case 'c':
		m[op.name] = op.ino
	case 'r':
		delete(m, op.name)
		m[op.to] = op.ino
	case 'd':
		delete(m, op.name)
	}
}

// CrashAll cuts the power of every disk (each one once) at one instant,
// as of machines on one supply: no operation on any of them runs between
// the first crash and the last. It returns what they lost in all: bytes
// written to files and not synced, and directory entry changes not synced.
func CrashAll(disks ...*Disk) (lostBytes int64, lostEntries int) {
	for _, d := range disks {
		d.mu.Lock()
	}
	for _, d := range disks {
		b, e := d.unsyncedLocked()
		lostBytes, lostEntries = lostBytes+b, lostEntries+e
		d.crashLocked(false)
	}
	for _, d := range disks {
		d.mu.Unlock()
	}
	return lostBytes, lostEntries
}

// unsyncedLocked counts what a crash now would lose (a torn one, at
// most): the bytes of live files past what survives, and the entry
// changes not synced; d.mu is held.
func (d *Disk) unsyncedLocked() (n int64, entries int) {
	d.flushLocked(time.Now())
	for _, ino := range d.live {
		if extra := len(ino.data) - len(ino.synced); extra > 0 {
			n += int64(extra)
		}
	}
	entries = len(d.pending)
	for _, l := range d.lagged {
		entries += len(l.ops)
	}
	return n, entries
}

// LagSyncs makes every Sync and SyncDir from now on return at once and
// take effect only lag later, in the order they were called: a disk whose
// cache acknowledges a flush before the data is kept. A power loss in
// between loses what they covered. It is the broken disk of a negative
// control, on which code that waits for its fsyncs before it answers must
// lose acknowledged data. LagSyncs(0) makes syncs honest again, and does
// what lags at once.
func (d *Disk) LagSyncs(lag time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lag = lag
	if lag == 0 {
		for _, l := range d.lagged {
			l.do(d)
		}
		d.lagged = nil
	}
}

// flushLocked does the lagged syncs due by now; d.mu is held.
func (d *Disk) flushLocked(now time.Time) {
	n := 0
	for _, l := range d.lagged {
		if l.due.After(now) {
			break
		}
		l.do(d)
		n++
	}
	d.lagged = d.lagged[n:]
}

func (l laggedSync) do(d *Disk) {
	if l.ino != nil {
		l.ino.synced = l.data
	}
	for _, op := range l.ops {
		op.apply(d.durable)
	}
}

// CrashAfter makes the n-th file-system operation from now crash the disk
// (and fail) instead of running; torn picks crashTorn.
func (d *Disk) CrashAfter(n int64, torn bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashAt = d.ops + n
	d.tornCrash = torn
}

// FailSyncFrom makes the n-th sync from now (File.Sync or SyncDir) and every
// later one fail with EIO; once, only the n-th. n == 0 ends the failures.
func (d *Disk) FailSyncFrom(n int64, once bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncFailAt, d.syncFailOnce = 0, once
	if n > 0 {
		d.syncFailAt = d.syncs + n
	}
}

// SetWriteBack makes the bytes of a write cut short by a full disk durable
// at once (on), as the kernel's writeback may before anyone truncates
// them, or not (off, the default).
func (d *Disk) SetWriteBack(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeBack = on
}

// CancelCrash withdraws a crash CrashAfter set that has not happened.
func (d *Disk) CancelCrash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.crashAt = 0
}

// FailWriteFrom makes the n-th File.Write from now and every later one fail
// with EIO. n == 0 ends the failures.
func (d *Disk) FailWriteFrom(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeFailAt = 0
	if n > 0 {
		d.writeFailAt = d.writes + n
	}
}

// syncFails counts one sync and tells whether it must fail; d.mu is held.
func (d *Disk) syncFails() bool {
	d.syncs++
	if d.syncFailAt == 0 || d.syncs < d.syncFailAt {
		return false
	}
	if d.syncFailOnce {
		d.syncFailAt = 0
	}
	return true
}

// OnWrite sets a function that runs before every File.Write, outside the
// disk's lock, so a test can hold the store's writer inside a write.
func (d *Disk) OnWrite(hook func(name string)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.beforeWrite = hook
}

// OnSync sets a function that runs before every File.Sync, outside the
// disk's lock, so a test can hold the store's writer inside a sync.
func (d *Disk) OnSync(hook func(name string)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.beforeSync = hook
}

// SetFree limits the disk to what it holds now plus n bytes; n < 0 lifts the
// limit.
func (d *Disk) SetFree(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n < 0 {
		d.capacity = -1
		return
	}
	d.capacity = d.usedLocked() + n
}

func (d *Disk) usedLocked() int64 {
	seen := map[*inode]bool{}
	var n int64
	add := func(ino *inode) {
		if !seen[ino] {
			seen[ino] = true
			n += int64(len(ino.data))
		}
	}
	for _, ino := range d.live {
		add(ino)
	}
	for f := range d.open {
		add(f.ino)
	}
	return n
}

// Counts returns how many syncs (File.Sync and SyncDir) and writes were
// called so far.
func (d *Disk) Counts() (syncs, writes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncs, d.writes
}

// Contents returns what the running system reads in name, or nil.
func (d *Disk) Contents(name string) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ino, ok := d.live[name]; ok {
		return bytes.Clone(ino.data)
	}
	return nil
}

// Unsynced returns how many bytes of name a crash now would lose: those
// written since its last Sync (0 for a name that does not exist).
func (d *Disk) Unsynced(name string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	ino, ok := d.live[name]
	if !ok {
		return 0
	}
	return max(0, int64(len(ino.data)-len(ino.synced)))
}

// Names returns the live names in dir, sorted.
func (d *Disk) Names(dir string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for name := range d.live {
		if filepath.Dir(name) == dir {
			out = append(out, filepath.Base(name))
		}
	}
	sort.Strings(out)
	return out
}

// enter starts one operation of generation gen: it counts it, crashes the
// disk when the operation is the one CrashAfter named, and fails it if its
// generation is over. It returns with d.mu held when err is nil.
func (d *Disk) enter(op, name string, gen int) error {
	d.mu.Lock()
	d.ops++
	if d.crashAt != 0 && d.ops >= d.crashAt {
		d.crashLocked(d.tornCrash)
	}
	if gen != d.gen {
		d.mu.Unlock()
		return &fs.PathError{Op: op, Path: name, Err: syscall.EIO}
	}
	if len(d.lagged) > 0 {
		d.flushLocked(time.Now())
	}
	return nil
}

// FS is one generation's view of a Disk.
type FS struct {
	d   *Disk
	gen int
}

var _ fsys.FS = (*FS)(nil)

func perr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// Create implements fsys.FS.
func (m *FS) Create(name string) (fsys.File, error) {
	d := m.d
	if err := d.enter("create", name, m.gen); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if !d.dirs[filepath.Dir(name)] {
		return nil, perr("create", name, syscall.ENOENT)
	}
	if _, ok := d.live[name]; ok {
		return nil, perr("create", name, syscall.EEXIST)
	}
	ino := &inode{}
	d.live[name] = ino
	d.pending = append(d.pending, dirOp{kind: 'c', name: name, ino: ino})
	f := &file{d: d, gen: m.gen, name: name, ino: ino}
	d.open[f] = true
	return f, nil
}

// OpenAppend implements fsys.FS.
func (m *FS) OpenAppend(name string) (fsys.File, error) {
	d := m.d
	if err := d.enter("open", name, m.gen); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	ino, ok := d.live[name]
	if !ok {
		return nil, perr("open", name, syscall.ENOENT)
	}
	f := &file{d: d, gen: m.gen, name: name, ino: ino}
	d.open[f] = true
	return f, nil
}

// ReadFile implements fsys.FS.
func (m *FS) ReadFile(name string) ([]byte, error) {
	d := m.d
	if err := d.enter("read", name, m.gen); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	ino, ok := d.live[name]
	if !ok {
		return nil, perr("read", name, syscall.ENOENT)
	}
	return bytes.Clone(ino.data), nil
}

// Truncate implements fsys.FS.
func (m *FS) Truncate(name string, size int64) error {
	d := m.d
	if err := d.enter("truncate", name, m.gen); err != nil {
		return err
	}
	defer d.mu.Unlock()
	ino, ok := d.live[name]
	if !ok {
		return perr("truncate", name, syscall.ENOENT)
	}
	if size > int64(len(ino.data)) {
		return perr("truncate", name, syscall.EINVAL)
	}
	// Truncate is durable (the OS version syncs the file).
	ino.data = ino.data[:size:size]
	ino.synced = bytes.Clone(ino.data)
	return nil
}

// Rename implements fsys.FS.
func (m *FS) Rename(oldname, newname string) error {
	d := m.d
	if err := d.enter("rename", oldname, m.gen); err != nil {
		return err
	}
	defer d.mu.Unlock()
	ino, ok := d.live[oldname]
	if !ok {
		return perr("rename", oldname, syscall.ENOENT)
	}
	delete(d.live, oldname)
	d.live[newname] = ino
	d.pending = append(d.pending, dirOp{kind: 'r', name: oldname, to: newname, ino: ino})
	return nil
}

// Remove implements fsys.FS.
func (m *FS) Remove(name string) error {
	d := m.d
	if err := d.enter("remove", name, m.gen); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if _, ok := d.live[name]; !ok {
		return perr("remove", name, syscall.ENOENT)
	}
	delete(d.live, name)
	d.pending = append(d.pending, dirOp{kind: 'd', name: name})
	return nil
}

// List implements fsys.FS.
func (m *FS) List(dir string) ([]string, error) {
	d := m.d
	dir = filepath.Clean(dir)
	if err := d.enter("list", dir, m.gen); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if !d.dirs[dir] {
		return nil, perr("list", dir, syscall.ENOENT)
	}
	var out []string
	for name := range d.live {
		if filepath.Dir(name) == dir {
			out = append(out, filepath.Base(name))
		}
	}
	return out, nil
}

// MkdirAll creates directories durably at once: the store's data directory
// is made before any file in it, and the tests crash only inside it.
func (m *FS) MkdirAll(dir string) error {
	d := m.d
	dir = filepath.Clean(dir)
	if err := d.enter("mkdir", dir, m.gen); err != nil {
		return err
	}
	defer d.mu.Unlock()
	for p := dir; !d.dirs[p]; p = filepath.Dir(p) {
		d.dirs[p] = true
	}
	return nil
}

// Lock implements fsys.FS: one process (the test) uses the disk.
func (m *FS) Lock(string) (func(), error) { return func() {}, nil }

// SyncDir implements fsys.FS.
func (m *FS) SyncDir(dir string) error {
	d := m.d
	dir = filepath.Clean(dir)
	if err := d.enter("syncdir", dir, m.gen); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if d.syncFails() {
		return perr("syncdir", dir, syscall.EIO)
	}
	var covered []dirOp
	rest := d.pending[:0]
	for _, op := range d.pending {
		if filepath.Dir(op.name) == dir {
			covered = append(covered, op)
		} else {
			rest = append(rest, op)
		}
	}
	d.pending = rest
	l := laggedSync{ops: covered}
	if d.lag > 0 {
		l.due = time.Now().Add(d.lag)
		d.lagged = append(d.lagged, l)
		return nil
	}
	l.do(d)
	return nil
}

// file is an open file of one generation. Every write appends.
type file struct {
	d      *Disk
	gen    int
	name   string
	ino    *inode
	closed bool
}

func (f *file) enter(op string) error {
	if err := f.d.enter(op, f.name, f.gen); err != nil {
		return err
	}
	if f.closed {
		f.d.mu.Unlock()
		return perr(op, f.name, fs.ErrClosed)
	}
	return nil
}

// Write implements fsys.File.
func (f *file) Write(p []byte) (int, error) {
	f.d.mu.Lock()
	hook := f.d.beforeWrite
	f.d.mu.Unlock()
	if hook != nil {
		hook(f.name)
	}
	if err := f.enter("write"); err != nil {
		return 0, err
	}
	d := f.d
	defer d.mu.Unlock()
	d.writes++
	if d.writeFailAt != 0 && d.writes >= d.writeFailAt {
		return 0, perr("write", f.name, syscall.EIO)
	}
	n := len(p)
	if d.capacity >= 0 {
		n = int(min(int64(n), max(0, d.capacity-d.usedLocked())))
	}
	f.ino.data = append(f.ino.data, p[:n]...)
	if n < len(p) {
		if d.writeBack {
			f.ino.synced = bytes.Clone(f.ino.data)
		}
		return n, perr("write", f.name, syscall.ENOSPC)
	}
	return n, nil
}

// Sync implements fsys.File.
func (f *file) Sync() error {
	f.d.mu.Lock()
	hook := f.d.beforeSync
	f.d.mu.Unlock()
	if hook != nil {
		hook(f.name)
	}
	if err := f.enter("sync"); err != nil {
		return err
	}
	d := f.d
	defer d.mu.Unlock()
	if d.syncFails() {
		// What the kernel does with the dirty pages is unknown; keep them
		// unsynced, so a crash loses them.
		return perr("sync", f.name, syscall.EIO)
	}
	l := laggedSync{ino: f.ino, data: bytes.Clone(f.ino.data)}
	if d.lag > 0 {
		l.due = time.Now().Add(d.lag)
		d.lagged = append(d.lagged, l)
		return nil
	}
	l.do(d)
	return nil
}

// Truncate implements fsys.File.
func (f *file) Truncate(size int64) error {
	if err := f.enter("truncate"); err != nil {
		return err
	}
	defer f.d.mu.Unlock()
	if size > int64(len(f.ino.data)) {
		return perr("truncate", f.name, syscall.EINVAL)
	}
	f.ino.data = f.ino.data[:size:size]
	return nil
}

// Close implements fsys.File.
func (f *file) Close() error {
	if err := f.enter("close"); err != nil {
		return err
	}
	defer f.d.mu.Unlock()
	f.closed = true
	delete(f.d.open, f)
	return nil
}

// Files returns the contents of every live file in dir, by name.
func (d *Disk) Files(dir string) map[string][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]byte{}
	for name, ino := range d.live {
		if filepath.Dir(name) == dir {
			out[filepath.Base(name)] = bytes.Clone(ino.data)
		}
	}
	return out
}

// NewWith returns a disk holding files in dir, all durable.
func NewWith(dir string, files map[string][]byte) *Disk {
	d := New(1)
	for p := dir; !d.dirs[p]; p = filepath.Dir(p) {
		d.dirs[p] = true
	}
	for name, data := range files {
		ino := &inode{data: bytes.Clone(data), synced: bytes.Clone(data)}
		d.live[filepath.Join(dir, name)] = ino
		d.durable[filepath.Join(dir, name)] = ino
	}
	return d
}
