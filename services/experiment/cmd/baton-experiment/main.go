// Command baton-experiment runs the experiments that end Baton's founding
// investigations (burst, repeat, failure) against a running stack and prints
// the investigation's tables; `batonctl experiment` runs it. See
// docs/experiments.md.
//
//	baton-experiment [global flags] burst|repeat|failure|clean [flags] [-o json]
//
// The global flags can also be set as BATON_EXPERIMENT_<FLAG>, e.g.
// BATON_EXPERIMENT_QUEUE_ADDR.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/batonrun/baton/services/experiment/service"
)

func main() {
	// The first SIGINT or SIGTERM stops the experiment, which then cleans
	// up (bounded); later ones are swallowed until then, since batonctl
	// passes on the Ctrl-C the terminal also sent here.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := service.Main(ctx, os.Args[1:], service.IO{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
