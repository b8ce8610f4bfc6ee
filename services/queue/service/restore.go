package service

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/services/queue/internal/backup"
	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/idfile"
	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
)

// RestoreConfig is `baton-queue restore`'s.
type RestoreConfig struct {
	// From is the backup file (batonctl queue snapshot save's), or "-"
	// for In: a container whose user cannot read the host's file reads
	// it from its standard input.
	From string
	// In is read when From is "-".
	In io.Reader
	// DataDir is the new member's data directory: it must be empty or
	// not exist.
	DataDir string
	// Name and InitialCluster make it a member of a new replicated queue
	// (as baton-queue's flags of the same names); empty InitialCluster
	// makes a single member.
	Name, InitialCluster string
}

// restoringFile marks a data directory a restore is writing: it is made
// before anything else and removed last, so a restore killed half way
// leaves a directory the queue refuses to start on (checkNotRestoring),
// rather than one it would take for an empty queue.
const restoringFile = "restore-incomplete"

// claimPrefix names the files in which a restored member keeps, for each
// other member of its queue, the Raft id the seed gave it, until that
// member takes it (fileClaims): claim- and a hash of the member's name,
// since a name may be longer than a file name may.
const claimPrefix = "claim-"

// claimFile is the claim file of the member named name.
func claimFile(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s%016x", claimPrefix, h.Sum64())
}

// restoreTermMargin is how many terms the restored queue starts above the
// backup's fence epoch. The fence covers every token of the backup's
// queue up to the backup; a lease that queue granted after it, under a
// later leader, has a token of a later term, which the restored queue,
// starting just above the fence, would hand out again (same term, same
// count, often the same key). Starting this many terms above leaves room
// for that many changes of leader between the backup and the restore, as
// etcd's restore bumps revisions; it costs each restore as many of the
// 2^20 epochs a token has room for (MaxEpoch), about a thousand restores
// in all.
const restoreTermMargin = 1024

// maxEpoch is the highest token epoch: a token is the epoch in its top 20
// bits and a count below, and an epoch past this would wrap.
const maxEpoch = 1<<20 - 1

// Restore seeds a new queue in cfg.DataDir from the backup cfg.From. The
// file is read in one pass, its header first: what is not a backup is
// refused before anything is written, and a file damaged further on
// (every frame and the whole file are checked) leaves nothing behind,
// since what was written is removed. A single member's store is the
// backup's state as one snapshot, written as the file is read. A
// replicated member's Raft log is a member of the whole restored queue:
// every member of --initial-cluster a voter under a fresh random id, the
// queue under a fresh random cluster id (replica.SeedLog), so that it
// leads only once a majority of them has joined it, and no member of
// another queue (the one the backup came from, another restore) ever
// counts towards that majority. The others start on empty data
// directories and take the ids the seed gave them (fileClaims).
//
// Either way the restored queue hands out only tokens of an epoch above
// the backup's fence: an Ack of a lease from before the backup is refused.
func Restore(cfg RestoreConfig, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		peers []replicaPeer
		err   error
	)
	if cfg.InitialCluster != "" {
		if peers, err = restorePeers(cfg); err != nil {
			return err
		}
	}
	in, name, closeIn, err := openBackup(cfg.From, cfg.In)
	if err != nil {
		return err
	}
	defer closeIn()
	// The header before anything is made: /dev/zero or a log segment is
	// refused here, having read eight bytes.
	br := bufio.NewReaderSize(in, 64<<10)
	h, err := br.Peek(format.HeaderLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("restore: read %s: %w", name, err)
	}
	if err := backup.CheckHeader(name, h); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	made, err := makeDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	unlockDir, err := lockDataDir(cfg.DataDir)
	if err != nil {
		if made {
			_ = os.Remove(cfg.DataDir)
		}
		return fmt.Errorf("restore: %w", err)
	}
	defer unlockDir()
	if err := emptyDataDir(cfg.DataDir); err != nil {
		return err
	}
	var info backup.Info
	err = writeMarker(cfg.DataDir)
	if err == nil {
		if peers == nil {
			info, err = restoreSingle(cfg.DataDir, name, br, log)
		} else {
			info, err = restoreMember(cfg, peers, name, br, log)
		}
	}
	if err == nil {
		err = idfile.Remove(cfg.DataDir, restoringFile)
	}
	if err != nil {
		// Nothing of a refused restore stays: the directory was empty.
		if rerr := clearDir(cfg.DataDir, made); rerr != nil {
			log.Error("restore: could not remove what the refused restore wrote: empty the data directory before the queue starts on it", "dir", cfg.DataDir, "error", rerr)
		}
		return err
	}
	if !info.Fenced {
		log.Warn("restore: this backup is of format version 1, which does not record the tokens its queue issued: an Ack of a lease taken before it may be accepted by the restored queue; take a new backup with this release", "file", name)
	}
	fmt.Fprintf(out, "restored %d queues and %d keys from %s into %s\n", info.Queues, info.Keys, name, cfg.DataDir)
	return nil
}

// openBackup opens the backup file p, a regular file, or with p "-" in,
// and returns it with its name for messages.
func openBackup(p string, in io.Reader) (io.Reader, string, func(), error) {
	if p == "-" {
		if in == nil {
			return nil, "", nil, errors.New("restore: --from - reads the standard input, and there is none")
		}
		return in, "the standard input", func() {}, nil
	}
	// Stat first: opening a FIFO waits for a writer, for good.
	if st, err := os.Stat(p); err != nil {
		return nil, "", nil, fmt.Errorf("restore: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, "", nil, fmt.Errorf("restore: %s is not a regular file (give a pipe's contents with --from - on the standard input)", p)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", nil, fmt.Errorf("restore: %w", err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, "", nil, fmt.Errorf("restore: %w", err)
	case !st.Mode().IsRegular():
		f.Close()
		return nil, "", nil, fmt.Errorf("restore: %s is not a regular file (give a pipe's contents with --from - on the standard input)", p)
	case st.Size() > backup.MaxFileBytes:
		f.Close()
		return nil, "", nil, fmt.Errorf("restore: %s is %d bytes, over the %d a backup may be", p, st.Size(), int64(backup.MaxFileBytes))
	}
	return f, p, func() { f.Close() }, nil
}

// makeDataDir makes dir if it does not exist (made is then true).
func makeDataDir(dir string) (made bool, err error) {
	switch _, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return false, fmt.Errorf("restore: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("restore: %w", err)
	}
	return false, nil
}

// emptyDataDir refuses a data directory that holds anything: a restore
// never writes over a queue. The caller holds its lock (lockDataDir).
func emptyDataDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if slices.ContainsFunc(ents, func(e fs.DirEntry) bool { return e.Name() == restoringFile }) {
		return fmt.Errorf("restore: --data-dir %s holds %s: a restore into it did not finish; empty the directory and restore again", dir, restoringFile)
	}
	for _, e := range ents {
		if e.Name() == lostFound {
			continue // a file system's own, in a volume mounted at the data directory
		}
		return fmt.Errorf("restore: --data-dir %s is not empty (it holds %s): a restore seeds a new queue, never one that exists", dir, e.Name())
	}
	return nil
}

// lostFound is what mkfs leaves at the root of an ext file system: a
// volume mounted at the data directory holds it from the start, and it is
// not the queue's.
const lostFound = "lost+found"

// writeMarker makes restoringFile in dir, durably, before the restore
// writes anything else.
func writeMarker(dir string) error {
	if err := idfile.Write(dir, restoringFile, 1); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// clearDir removes what a refused restore wrote in dir, which was empty,
// and dir itself if the restore made it.
func clearDir(dir string, made bool) error {
	if made {
		return os.RemoveAll(dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.Name() != lostFound {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// checkNotRestoring refuses a data directory a restore did not finish
// writing.
func checkNotRestoring(dir string) error {
	_, err := os.Stat(filepath.Join(dir, restoringFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("data directory: %w", err)
	}
	return fmt.Errorf("--data-dir %s holds %s: a restore into it did not finish (it was stopped, or failed and could not clean up); empty the directory and run the restore again", dir, restoringFile)
}

// checkRestored refuses a record the queue's API would never have let in
// (a queue name that is no DNS label, a key that is not one the API
// takes): a backup whose checksums hold but whose records do not is
// forged or written by a broken build, and a key of it could never be
// leased, acked or forgotten.
func checkRestored(file string, r *record.Record) error {
	if err := limits.CheckQueueName(r.Queue); err != nil {
		return fmt.Errorf("restore: %s holds a queue name the queue refuses: %w", file, err)
	}
	if r.Kind != record.KindQueue && !limits.ValidKey(r.Key) {
		return fmt.Errorf("restore: %s holds a key of queue %s the queue refuses: %w", file, r.Queue, limits.CheckKey("key", r.Key))
	}
	return nil
}

// restoreSingle writes the backup from r as a single member's store: one
// snapshot, written as the file is read (the store installs it only once
// it is whole), and an epoch at the backup's fence, so that the queue's
// first run hands out tokens above it.
func restoreSingle(dir, name string, r io.Reader, log *slog.Logger) (backup.Info, error) {
	st, err := store.Open(store.Options{Dir: dir, Logger: log}, func(*record.Record) {})
	if err != nil {
		return backup.Info{}, fmt.Errorf("restore: %w", err)
	}
	var info backup.Info
	var buf []byte
	err = st.Snapshot(func(emit func([]byte) error) error {
		var err error
		info, err = backup.Stream(name, r, func(rec *record.Record) error {
			if err := checkRestored(name, rec); err != nil {
				return err
			}
			buf = record.Append(buf[:0], rec, st.RecordVersion())
			return emit(buf)
		})
		return err
	})
	var epoch uint64
	if err == nil {
		epoch, err = restoredTerm(info)
	}
	if err == nil {
		err = st.RaiseEpoch(epoch)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return backup.Info{}, fmt.Errorf("restore: %w", err)
	}
	return info, nil
}

// restoredTerm is the term (the token epoch) a restored queue starts at:
// restoreTermMargin above the backup's fence. A fence so high that no
// token above it fits is refused: tokens would wrap into the epochs of the
// backup's queue.
func restoredTerm(info backup.Info) (uint64, error) {
	if info.Fence.Epoch > maxEpoch-restoreTermMargin-1 {
		return 0, fmt.Errorf("restore: the backup's fence epoch %d leaves no room for the restored queue's tokens (at most %d, with %d terms of room): the backup is damaged or forged", info.Fence.Epoch, maxEpoch, restoreTermMargin)
	}
	return info.Fence.Epoch + restoreTermMargin, nil
}

// replicaPeer is one member of a restored queue: its name and peer
// address from --initial-cluster, and the fresh id the restore gives it.
type replicaPeer struct {
	name, addr string
	id         uint64
}

// restorePeers checks --initial-cluster and --name before anything is
// read, and gives every member a fresh random id.
func restorePeers(cfg RestoreConfig) ([]replicaPeer, error) {
	peers, err := parseInitialCluster(cfg.InitialCluster)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	var out []replicaPeer
	self := false
	for _, p := range peers {
		self = self || p.Name == cfg.Name
		id, err := freshID(func(id uint64) bool {
			for _, q := range out {
				if q.id == id {
					return true
				}
			}
			return false
		})
		if err != nil {
			return nil, err
		}
		out = append(out, replicaPeer{name: p.Name, addr: p.PeerAddr, id: id})
	}
	if !self {
		return nil, fmt.Errorf("restore: --initial-cluster does not name this member, --name %q", cfg.Name)
	}
	return out, nil
}

// freshID is a random id, not zero and not taken.
func freshID(taken func(uint64) bool) (uint64, error) {
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("restore: a fresh id: %w", err)
		}
		if id := binary.BigEndian.Uint64(b[:]); id != 0 && !taken(id) {
			return id, nil
		}
	}
}

// restoreMember seeds a replicated member's Raft log with the backup from
// r: the whole restored queue's configuration (replica.SeedLog), in a
// term at the backup's fence, under a fresh cluster id; then the id files
// and a claim file for each other member. The state is held in memory
// (a Raft snapshot is one value), as the member holds it once it runs.
func restoreMember(cfg RestoreConfig, peers []replicaPeer, name string, r io.Reader, log *slog.Logger) (backup.Info, error) {
	// The state at this build's record version, which the seed's
	// snapshot holds (replica.SeedLog writes it at the version holding
	// it): a member of this build, at any level, reads it.
	recordVersion := format.Records.Current
	var state []byte
	info, err := backup.Stream(name, r, func(rec *record.Record) error {
		if err := checkRestored(name, rec); err != nil {
			return err
		}
		state = record.Append(state, rec, recordVersion)
		return nil
	})
	if err != nil {
		return backup.Info{}, fmt.Errorf("restore: %w", err)
	}
	dir, err := mkdirRaft(cfg.DataDir)
	if err != nil {
		return backup.Info{}, err
	}
	term, err := restoredTerm(info)
	if err != nil {
		return backup.Info{}, err
	}
	seed := replica.Seed{Term: term, State: state, Version: recordVersion}
	for _, p := range peers {
		seed.Members = append(seed.Members, replica.Member{ID: p.id, Name: p.name, Addr: p.addr})
		if p.name == cfg.Name {
			seed.Self = p.id
		}
	}
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: dir, Logger: log})
	if err != nil {
		return backup.Info{}, fmt.Errorf("restore: %w", err)
	}
	err = replica.SeedLog(rlog, seed)
	if cerr := rlog.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return backup.Info{}, fmt.Errorf("restore: %w", err)
	}
	cluster, err := freshID(func(uint64) bool { return false })
	if err != nil {
		return backup.Info{}, err
	}
	if err := writeID(dir, clusterIDFile, cluster); err != nil {
		return backup.Info{}, err
	}
	if err := writeID(dir, memberIDFile, seed.Self); err != nil {
		return backup.Info{}, err
	}
	for _, p := range peers {
		if p.name != cfg.Name {
			if err := writeID(dir, claimFile(p.name), p.id); err != nil {
				return backup.Info{}, err
			}
		}
	}
	return info, nil
}

// fileClaims is replica.Claims over the claim files restoreMember wrote
// in a restored member's raft directory: each is taken, removed durably,
// once.
type fileClaims struct {
	dir string
	mu  sync.Mutex
}

func (c *fileClaims) Holds(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok, err := readID(c.dir, claimFile(name))
	return ok && err == nil
}

func (c *fileClaims) Claim(name string) (uint64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok, err := readID(c.dir, claimFile(name))
	if err != nil || !ok {
		return 0, false, err
	}
	if err := idfile.Remove(c.dir, claimFile(name)); err != nil {
		return 0, false, err
	}
	return id, true, nil
}
