// Package queue is the root of baton-queue, the owner of unfinished work.
// The server lives under internal/ (the domain state machine in
// internal/workqueue, the write-ahead log in internal/store, the gRPC surface
// in internal/server); service runs it all and client is the Go client other
// services use. See docs/design.md for the contract.
package queue
