//go:build !linux

package k8s

import "syscall"

// dieWithParent: only Linux has a parent-death signal; elsewhere the
// cleanups alone stop the processes.
func dieWithParent() *syscall.SysProcAttr { return nil }
