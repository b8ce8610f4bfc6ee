//go:build !linux

package refs

import "os"

func datasync(f *os.File) error { return f.Sync() }
