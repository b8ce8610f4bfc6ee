//go:build unix

package certs

import (
	"io/fs"
	"syscall"
)

func statOwner(fi fs.FileInfo) [2]int {
	st := fi.Sys().(*syscall.Stat_t)
	return [2]int{int(st.Uid), int(st.Gid)}
}
