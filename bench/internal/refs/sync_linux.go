package refs

import (
	"os"
	"syscall"
)

// datasync is fdatasync(2): what the queue's log does per group commit.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
