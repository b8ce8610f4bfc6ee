// Package garbagecollector is baton-worker's garbage collector: one
// controller for every kind, which keeps one invariant, no object outlives
// its owners (docs/design.md, "Deleting, finalizers and the garbage
// collector").
//
// An object whose every owner reference is dangling (it names, by uid, no
// live object of that kind, name and namespace) is deleted, and a
// reference that dangles beside a live owner is taken out. The collector
// also carries out what a delete asked for: it deletes the dependents of an
// object being deleted in the foreground (foregroundDeletion), then takes
// its finalizer off, so the owner goes last; it takes an orphaned object's
// references out of its dependents (orphan), then the finalizer; and it
// removes objects being deleted whose finalizers are all gone.
//
// # One queue, every kind
//
// As Kubernetes' garbage collector has one graph and one queue, Baton's has
// one queue, kinds.GarbageCollectorQueue, whose keys name the kind's
// resource first (kinds.CollectorKey: <resource>/<namespace>/<name>), and
// one work stream on it. It declares nothing: with its built-in rules the
// observer feeds that queue every object of every kind its rules in force
// name (the reference kinds, and the kinds of every declaration it
// executes; never those of a declaration it refused), ignoring status-only
// changes. The observer's owner index is the graph: the dependents of an
// object are one List of /registry/ by owner. So what the collector costs
// the queue, etcd and the observer does not grow with the number of kinds,
// and no declaration of its own can be refused or outlive its kind.
//
// # Which kinds it knows
//
// An owner reference names a kind; to look the owner up, the collector maps
// the kind's name to its resource. It knows the reference kinds from the
// start and follows the kinds the observer feeds it (KindSource, the
// observer's Status for its queue): it watches the declarations in etcd
// and, after each change, asks the observer again until the observer has
// weighed it (Status's declarations_revision). A reference to a kind it
// does not know is left alone (the object stays, unless another owner
// lives) and judged again at once when it learns the kind. A key of a kind
// the observer no longer feeds, once asked again, is dropped: the observer
// announces every object of a kind again when it feeds it again.
//
// # A stale cache
//
// A stale cache must never make it delete a live owner's dependents: an
// owner the cache does not show, or shows with another uid, is looked up in
// etcd before a reference to it counts as dangling, and every delete is
// conditional on the dependent's uid and on its mod revision as read. A
// dependent changed since it was read is read again from etcd and judged
// again at once: the change may be one of status alone, which the
// collector's queue does not hear of.
//
// # Earlier versions
//
// Earlier versions ran a controller per kind, each on a queue
// garbagecollector-<resource> with a declaration of its own at
// /baton/rules/garbagecollector-<resource>. Run deletes those
// declarations when it starts, so an upgrade leaves none behind.
package garbagecollector
