// Package objects gives reconcilers typed access to the objects Baton keeps
// in etcd (/registry/<resource>/<namespace>/<name>, one JSON object each):
// ReplicaSets, Deployments, Jobs, StatefulSets and Pods.
//
// # Reads
//
// A Client reads through the observer's cache (ObserverService Get and List),
// never loading etcd with the reads of every worker. Each read asks for
// min_revision = the highest of the revision of its own writes (so a
// worker sees its own writes, though the cache lags etcd by a few
// milliseconds) and the revision on the read's context (AtLeast: a
// reconcile puts its lease's min_revision there, so it sees the change that
// announced its key, whichever observer announced it). A reconcile reads
// under Scope, which makes "its own writes" those of its reconciles of its
// key, not every write of the process. A Client built
// without an observer reads etcd itself; GetDirect and ListDirect always
// do. Reads counts both kinds.
//
// A cache read can be stale in one way that matters: it may not yet show an
// object that etcd has (deleted and created again under its name, say).
// Acting on a stale "not found" could delete a live object's children, so
// OwnerGone asks etcd itself before a controller deletes children for an
// owner it did not find, or whose uid is not the one the cache shows.
//
// # Deletes and finalizers
//
// Every delete follows Kubernetes' protocol (DeleteWith): an object that
// holds finalizers (metadata.finalizers), or is deleted with Foreground or
// Orphan propagation, gets metadata.deletionTimestamp and stays until its
// finalizers are gone; whoever removes the last one removes it
// (RemoveFinalizer). Baton's garbage collector deletes the dependents of
// deleted objects (their ownerReferences, by uid), so a controller deletes
// no children of its own when its object goes.
//
// # Writes
//
// Every write goes to etcd as a compare-and-swap: Create succeeds only if the
// key does not exist, Update and Delete only if the key's mod_revision is the
// one read. Modify and UpdateStatus read the object, apply a change and
// write it back, and on a conflict (someone wrote in between, or the read
// was a stale cache's) read again from etcd and retry instead of failing
// the reconcile; ModifyFrom and UpdateStatusFrom start from an object the
// caller has read already, from the cache. A Create that finds no uid sets
// metadata.uid.
//
// The Client owns metadata.generation, as the API server does: a create
// sets it to 1, a write that changes spec (the stored and the new spec
// compared as JSON values) raises the stored one by one, and any other
// write, a status write above all, keeps the stored one, whatever the
// object written says. A controller reports the generation it acted on as
// status.observedGeneration and never raises it itself.
//
// Before every create, update and status write of a kind whose schema it
// knows (a reference kind's, or one a declaration in etcd carries, read
// again when older than SchemaMaxAge), the Client fills in the schema's
// defaults and checks the object (client/schema); an invalid object is
// not written, and the error, ErrInvalid, names every bad field as the API
// server would. An object of a kind whose schema it does not know is
// written as it is; so is anything put into etcd by other means (etcdctl),
// which nothing checks.
//
//	st := objects.NewClient(etcdClient, observerClient)
//	rs, rev, err := objects.Get[objects.ReplicaSet](ctx, st, objects.Key("replicasets", "default", "web"))
//	pods, err := objects.List[objects.Pod](ctx, st, objects.Prefix("pods", "default"),
//		objects.OwnedBy{Namespace: "default", Kind: "ReplicaSet", Name: "web"})
//
// # Files
//
// One concern a file, as controller-runtime's client has them:
//
//	doc.go        this documentation
//	client.go     the Client, NewClient, SetOpTimeout, ErrNotFound and
//	              ErrConflict, the types every call takes (Raw, OwnedBy,
//	              Metaobject)
//	keys.go       Key, Prefix, SplitKey, NewUID, RandomSuffix
//	cache.go      Cache, and the observer's cache as one
//	scope.go      read-your-writes: AtLeast, Scope, MinRevision, and the
//	              revision each cache read waits for
//	reads.go      Get, GetDirect, List, ListDirect, OwnerGone, Reads, and
//	              the typed Get, List, Decode and Item
//	pages.go      ListPages
//	writes.go     the compare-and-swap writes: Create, CreateAll, Modify,
//	              ModifyFrom, Delete
//	status.go     UpdateStatus, UpdateStatusFrom, CreateAllWithStatus
//	merge.go      writing back fields a type does not know; JSON equality
//	admit.go      a kind's schema on every write (defaults, validation,
//	              ErrInvalid) and metadata.generation
//	deletion.go   DeleteWith and DeleteFrom, propagation, finalizers
//	types.go      ObjectMeta, owner references, the reference kinds'
//	              types
//	reference.go  ObjectReference
//
// A new call goes in the file of its concern; one that reads or writes
// etcd takes the Client's opTimeout and notes what it wrote (scope.go).
package objects
