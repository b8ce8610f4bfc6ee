// Package client is the root of Baton's client packages: what every program
// that calls a Baton service shares with the service itself, in a module
// without server code, so a consumer never requires a server's module.
// Package queue is the Go client of baton.queue.v1 with its contract beyond
// the wire types: the limit of every field and the checks that enforce them
// (used by the queue server and its write-ahead log as well), and the
// server's reasons for a refusal as errors.
package client
