// Package client is the root of Baton's client packages: what every program
// that calls a Baton service shares with the service itself. Package queue
// holds the contract of baton.queue.v1 beyond its wire types: the limit of
// every field and the checks that enforce them, used by the queue server, its
// write-ahead log and its clients alike, so a value one of them accepts the
// others accept too.
package client
