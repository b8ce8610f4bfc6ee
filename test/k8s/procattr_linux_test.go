package k8s

import "syscall"

// dieWithParent has the kernel SIGKILL a child when the test binary dies
// without running its cleanups (go test's -timeout panics).
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
