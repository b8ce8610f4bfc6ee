package framework

import (
	"os/exec"
	"syscall"
)

// setProcAttr has the kernel SIGKILL the child if the test process dies
// first (a test timeout's panic, a kill -9 of go test), so no child
// outlives it. Linux ties this to the thread that started the child; Go ends
// a thread only when a goroutine locked to it exits without unlocking,
// which nothing in a test does here.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
