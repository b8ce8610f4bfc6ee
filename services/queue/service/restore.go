package service

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"

	"github.com/batonrun/baton/services/queue/internal/backup"
	"github.com/batonrun/baton/services/queue/internal/record"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
)

// MaxBackupBytes bounds a backup file restore reads: it is read whole into
// memory before anything is made of it. 16 GiB is some tens of millions of
// keys, far past what one queue holds in memory anyway.
const MaxBackupBytes = 16 << 30

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
	// Name, InitialCluster and PeerAddr make it a member of a new
	// replicated queue (as baton-queue's flags of the same names); empty
	// InitialCluster makes a single member.
	Name, InitialCluster string
}

// Restore seeds a new queue in cfg.DataDir from the backup cfg.From, after
// checking the whole file (a damaged or cut one is refused by name, and
// nothing is written). A single member's store is the backup's state as
// one snapshot. A replicated member's Raft log is a queue of one member,
// this one, holding the state (replica.SeedLog), under a new cluster id:
// started, it leads alone, and the other members named in
// --initial-cluster join it when started on empty data directories. Only
// the member restored holds the state; run restore once.
func Restore(cfg RestoreConfig, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := readBackup(cfg.From, cfg.In)
	if err != nil {
		return err
	}
	if cfg.From == "-" {
		cfg.From = "the standard input" // its name in what follows
	}
	info, err := backup.Read(cfg.From, b, nil)
	if err != nil {
		return err
	}
	if err := emptyDataDir(cfg.DataDir); err != nil {
		return err
	}
	// The state as a snapshot's records: the file's, in file order.
	var state []byte
	if _, err := backup.Read(cfg.From, b, func(r *record.Record) error {
		state = record.Append(state, r)
		return nil
	}); err != nil {
		return err
	}
	if cfg.InitialCluster == "" {
		err = restoreSingle(cfg.DataDir, state, log)
	} else {
		err = restoreMember(cfg, state, info, log)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "restored %d queues and %d keys from %s into %s\n", info.Queues, info.Keys, cfg.From, cfg.DataDir)
	return nil
}

// readBackup reads the backup file, a regular file of at most
// MaxBackupBytes, or with p "-" as much from in.
func readBackup(p string, in io.Reader) ([]byte, error) {
	if p == "-" {
		if in == nil {
			return nil, errors.New("restore: --from - reads the standard input, and there is none")
		}
		b, err := io.ReadAll(io.LimitReader(in, MaxBackupBytes+1))
		switch {
		case err != nil:
			return nil, fmt.Errorf("restore: the standard input: %w", err)
		case len(b) > MaxBackupBytes:
			return nil, fmt.Errorf("restore: the standard input holds over the %d bytes a backup may be", int64(MaxBackupBytes))
		}
		return b, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("restore: %s is not a regular file", p)
	case st.Size() > MaxBackupBytes:
		return nil, fmt.Errorf("restore: %s is %d bytes, over the %d a backup may be", p, st.Size(), int64(MaxBackupBytes))
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return b, nil
}

// emptyDataDir makes dir if it does not exist and refuses one that holds
// anything: a restore never writes over a queue.
func emptyDataDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o750)
	case err != nil:
		return fmt.Errorf("restore: %w", err)
	case len(ents) > 0:
		return fmt.Errorf("restore: --data-dir %s is not empty: a restore seeds a new queue, never one that exists", dir)
	}
	return nil
}

// restoreSingle writes state as a single member's store: one snapshot.
func restoreSingle(dir string, state []byte, log *slog.Logger) error {
	st, err := store.Open(store.Options{Dir: dir, Logger: log}, func(*record.Record) {})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	err = st.Snapshot(func(emit func([]byte) error) error { return emit(state) })
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore: write the snapshot: %w", err)
	}
	return nil
}

// restoreMember seeds a replicated member's Raft log with state, under a
// cluster id of its own: the FNV hash of the initial cluster's and of the
// backup's checksum, which no queue started from the same flags without
// this backup has.
func restoreMember(cfg RestoreConfig, state []byte, info backup.Info, log *slog.Logger) error {
	peers, err := parseInitialCluster(cfg.InitialCluster)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	var self *server.Peer
	for i := range peers {
		if peers[i].Name == cfg.Name {
			self = &peers[i]
		}
	}
	if self == nil {
		return fmt.Errorf("restore: --initial-cluster does not name this member, --name %q", cfg.Name)
	}
	dir, err := mkdirRaft(cfg.DataDir)
	if err != nil {
		return err
	}
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: dir, Logger: log})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	err = replica.SeedLog(rlog, self.ID, self.Name, self.PeerAddr, state)
	if cerr := rlog.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%016x restored from %08x", clusterID(peers), info.Checksum)
	cluster := h.Sum64() | 1
	if err := writeID(dir, clusterIDFile, cluster); err != nil {
		return err
	}
	return writeID(dir, memberIDFile, self.ID)
}
