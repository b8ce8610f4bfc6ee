// Package queue is the Go side of baton.queue.v1 beyond its wire types: the
// reasons the server gives for a refusal, as errors, and the client. The
// limit of every field, and the checks that apply them, are package
// limits' (client/queue/limits), which the server uses too.
//
// # The client
//
// The client splits large requests into the server's batches (at most
// 10,000 items and 1.5 MiB a call), retries calls refused with Unavailable
// (the queue restarting or draining) with capped exponential backoff inside
// the caller's deadline, returns a typed result per key, and wraps the
// server's refusals in ErrNoSpace, ErrTooManyQueues and ErrStopped.
//
//	c, err := queue.Dial("127.0.0.1:7070")
//	res, err := c.Add(ctx, "replicasets", []string{"default/web"}, queue.AddOptions{})
//	leases, err := c.Lease(ctx, "replicasets", queue.LeaseOptions{Worker: "w1", MaxItems: 100, Wait: 10 * time.Second})
//	results, err := c.Ack(ctx, "replicasets", []queue.Ack{{Key: l.Key, Token: l.Token, Outcome: queue.Success()}})
//	if errors.Is(err, queue.ErrNoSpace) { … }
//
// Every call is safe to retry: Add and Forget are idempotent, a repeated Ack
// of a lease already acknowledged answers LeaseLost and changes nothing, and a
// Lease whose answer was lost simply lapses.
//
// Client.Cluster calls baton.queue.v1.ClusterService on the same
// connection: MemberList, Status, and MemberAdd and MemberRemove, which a
// queue of one member refuses with ErrNotReplicated.
//
//	members, err := c.Cluster().MemberList(ctx)
package queue
