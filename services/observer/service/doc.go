// Package service runs baton-observer, Baton's shared informer: one etcd
// watch per prefix for every controller, all on one etcd watch stream
// (internal/watchmux), an indexed cache served over
// baton.observer.v1.ObserverService, and a coalescing outbox per queue that
// hands keys to baton-queue without ever making the watch wait. The
// baton-observer binary and the embedded dev stack both call Run.
//
//	cfg := service.DefaultConfig()
//	cfg.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
//	err := service.Run(ctx, cfg, log) // blocks until ctx is cancelled
//
// # Rules
//
// Which prefixes feed which queues is set by rules (see docs/observer.md for
// the file format). Without --rules the built-in rules of the reference
// controllers and of the garbage collector apply. A bad rules file makes Run
// fail at once, naming the line and the reason. To these the observer adds,
// while it runs, the rules of every controller's declaration published under
// /baton/rules/ (package declarations; client/kinds): a new declaration
// starts the watches it needs and announces its backlog, a deleted one stops
// them, and one it refuses changes nothing and is shown in Status. With the
// built-in rules, every kind of a declaration in force is also fed to the
// garbage collector's one queue (rules.Collector), which learns them from
// Status asked for that queue.
//
// # Parts
//
// internal/informer keeps the cache in step with etcd, one informer per
// prefix, each watching through internal/watchmux; internal/announcer
// turns the changes into queue keys and priorities; internal/outbox hands
// them to the queue; internal/checkpoint is the delivery guarantee across
// restarts and compactions, its story in its doc.go. What declarations may
// make the observer watch is bounded by the limits in client/kinds.
//
// # Never missing a change
//
// Each prefix is listed once at start (every key announced at PRIORITY_LOW)
// and then watched from the list's revision + 1. After a break the watch
// resumes at the last observed revision + 1; if etcd has compacted that
// revision, the prefix is listed again and diffed with the cache, and every
// key created, changed or deleted meanwhile is announced. Keys wait in the
// outbox until the queue accepts them. If the observer itself dies, the
// outbox is lost with it, and the full list at its next start announces
// everything again (the queue collapses keys it already holds). Deletes made
// while no observer ran come from replaying etcd's history after the
// checkpoint stored in etcd (CheckpointKey) or, when etcd has compacted
// that history, from the known-key record stored beside it (RecordKey):
// every recorded key the list no longer has is announced as deleted.
//
// # Two observers at once
//
// Running two observers against the same etcd and queue is harmless and is
// how the observer gets high availability without leader election: both see
// the same changes and announce the same keys, and the queue collapses an
// Add of a key that is already pending (or leased and dirty) into nothing, so
// a worker reconciles a key once per change either way. Each observer serves
// reads from its own cache, with the same min_revision guarantee. The cost is
// twice the watch traffic on etcd and twice the Add calls on the queue.
package service
