package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive flock on the data directory itself for
// as long as the process runs in it (unlock releases it): a queue, a
// restore and a repair never work in one directory at once, whichever
// started first. The store and the Raft log lock files of their own
// inside it; this lock also covers the moments before those exist (a
// restore checks that the directory is empty, then writes; a queue starts
// while a restore writes), which theirs cannot.
func lockDataDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("--data-dir %s is in use by another process (a queue, a restore or a repair): stop it first", dir)
		}
		return nil, fmt.Errorf("lock the data directory %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// refuseReplicatedLog refuses a data directory that holds a replicated
// member's Raft log, for a single member (started without
// --initial-cluster) or a repair: the single member would ignore the log
// and serve an empty queue beside it, and a later start as the member it
// was would find a single member's store there too.
func refuseReplicatedLog(dir, what string) error {
	if _, err := os.Stat(filepath.Join(dir, raftDir)); err == nil {
		return fmt.Errorf("--data-dir %s holds a replicated member's log (%s/): %s; start it with its --name and --initial-cluster", dir, raftDir, what)
	}
	return nil
}
