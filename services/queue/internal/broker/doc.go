// Package broker runs the queues: it serialises each queue's state machine
// (internal/workqueue) behind a mutex, writes the records it produces to the
// write-ahead log (internal/store) and waits for them to be durable before a
// change is answered, fires timers for backoff and lease expiry, wakes
// long-polling Leases, and compacts the log with snapshots.
//
// Ordering is what makes it correct: a queue's records are appended to the
// log while its mutex is held, so the log holds each key's changes in the
// order they happened, and a caller waits for the group commit that holds
// its records. A caller whose Add collapsed onto a key another caller has
// just added (and whose record is still in flight) waits for that group too:
// an empty Append returns the latest unfinished group.
//
// An error means nothing changed. Each operation runs in a workqueue
// transaction, and its records are written to the log before the queue's
// mutex is released; if the write is refused (a full disk), the
// transaction is rolled back, so no one ever sees a change that is not in
// the log, and a refused Ack leaves the lease as it was for the retry. Only
// a failed fsync (the store stops, and the process restarts to recover) or
// a deadline that ends while the caller waits leaves the outcome unknown.
//
// # Files
//
// One concern a file, as client-go's util/workqueue has them:
//
//	broker.go      Config, the Broker, Open (a single member's store), and
//	               its lifecycle: Ready, Drain, Close
//	registry.go    the queues that exist, their creation, locking
//	               and forgetting, and MaxQueues
//	commit.go      the protocol every change follows: begin, lock, make
//	               the change, put its records in line, unlock, wait
//	timers.go      each queue's one timer: delayed keys and lapsed leases
//	add.go         Add
//	lease.go       Lease (and the long poll), LeaseStream, Extend
//	ack.go         Ack, AckNoWait, Release, Forget
//	reads.go       Inspect, List, Stats, and what makes them linearizable
//	compact.go     the snapshot walk, compaction, housekeeping
//	tokens.go      fencing tokens
//	journal.go     where records go: a single member's store, or the Raft
//	               log of a replicated member
//	replicated.go  a replicated member: the broker as the replica's
//	               StateMachine, leadership, its compaction
//	backup.go      Backup: every queue, each as it was at one moment, as a
//	               backup file (package backup)
//	metrics.go     the queue's Prometheus metrics
//	safe_ack.go    the journal a replicated member answers through; with
//	unsafe_ack.go  the baton_unsafe_ack tag, one that answers before the
//	               commit (the robustness suite's negative control)
//
// A new operation goes in a file of its own, follows commit.go's protocol
// for a change or reads.go's for a read, and is exposed by the gRPC server
// (internal/server).
package broker
