// Command batonctl controls a Baton stack from the command line: it applies
// manifests to etcd, lists and describes objects, inspects and edits the
// queue, watches it live, and reports each service's health. See
// docs/batonctl.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/batonrun/baton/services/batonctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
