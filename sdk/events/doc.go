// Package events records Events, as Kubernetes controllers do: what a
// controller did to an object (created its pods, scaled it), or why it
// could not, for the people who look at the object with `batonctl
// describe` and `batonctl get events`.
//
//	rec, err := events.NewRecorder(etcdClient, events.Options{Component: "greeter", Registerer: reg, Logger: log})
//	go rec.Run(ctx)
//	rec.Event(greeting, events.Normal, "Greeted", "Said hello to %s", name)
//
// # Events in etcd
//
// An Event is an object of the kind Event (client/kinds), stored as every
// object is, at /registry/events/<namespace>/<name> in the namespace of the
// object it is about, with kubectl's fields: involvedObject {kind,
// namespace, name, uid}, reason, message, type (Normal or Warning), count,
// firstTimestamp, lastTimestamp, source {component, host} and
// reportingController. Its name is the object's name, a dot and 16 hex
// digits of a hash of what makes it one event (the object, type, reason,
// message and component), so every process that records the same event
// finds the same key.
//
// Each Event is written with an etcd lease, and etcd deletes it by itself
// once it has not been recorded again for its lifetime (Options.TTL, an
// hour by default): nothing has to clean events up. Writes share leases,
// one per Options.LeaseBucket (a minute by default), each granted for the
// lifetime and one bucket more; a busy worker grants one lease a minute,
// not one per write, and an event lives between one lifetime and one
// lifetime and a bucket after its last write.
//
// No reference controller watches events, and no built-in rule of the
// observer routes them to a queue: recording an event wakes no
// reconciler. The observer does not cache them either, since no reader on
// the reconcile path needs them. batonctl reads them from etcd, as it
// reads everything. A controller that wants to react to events declares
// the kind Event (For), and the observer then watches and caches them as
// it does any declared kind.
//
// # Recording
//
// Event never blocks a reconcile and never fails it. It hands the event to
// a bounded buffer (Options.Buffer) that Run writes out in the background,
// and when the buffer is full the event is dropped and counted. An event
// that repeats one already in etcd (the same object, type, reason, message
// and component) is not written again: its count is raised and its
// lastTimestamp moved, by a compare-and-swap on the stored event's
// revision. Repeats waiting in the buffer together become one write.
//
// Similar events, which differ in their message alone, are combined as
// client-go combines them (aggregate.go): after AggregateMax different
// messages within AggregateWindow, they are recorded as one event whose
// message is "(combined from similar events): " and the latest one, and
// whose count rises with each.
//
// A controller in a hot loop cannot flood etcd: each object (per
// component) has a token bucket of Options.Burst events (25), refilled
// one event per Options.Refill (five minutes), as client-go's
// EventCorrelator's spam filter has; events beyond it are dropped and
// counted.
//
// # Metrics
//
// With Options.Registerer the Recorder registers
// baton_worker_events_written_total{op="create"|"update"} and
// baton_worker_events_dropped_total{reason="buffer_full"|"rate_limited"|
// "invalid"|"write_failed"}; Stats returns the same counts.
package events
