//go:build !linux

package framework

import "os/exec"

// setProcAttr does nothing here: only Linux can tie a child's life to its
// parent's; t.Cleanup still stops every child of a test that ends normally.
func setProcAttr(*exec.Cmd) {}
