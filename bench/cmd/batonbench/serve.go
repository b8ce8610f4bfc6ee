package main

import (
	"fmt"
	"os"

	"github.com/batonrun/baton/bench/internal/peers"
)

// serveCmd is the hidden subcommand that runs one peer's server (NATS
// JetStream or etcd) in a child process, so that the crash workload can
// SIGKILL it apart from the bench:
//
//	batonbench serve -kind nats|nats-sync|etcd -dir D -addr 127.0.0.1:P [-peer-addr 127.0.0.1:Q]
//
// The bench starts it itself (peers.StartProc); it serves until its
// standard input ends.
const serveCmd = "serve"

// init dispatches the subcommand before main parses the bench's flags.
func init() {
	if len(os.Args) > 1 && os.Args[1] == serveCmd {
		os.Exit(peers.ServeMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// serveCommand is how to start a peer's server: this very binary with
// serveCmd (under `go run`, the binary go built, which lives as long as the
// run).
func serveCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the bench binary to run peers' servers: %w", err)
	}
	return []string{exe, serveCmd}, nil
}
