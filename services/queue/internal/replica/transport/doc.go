// Package transport carries Raft's messages (go.etcd.io/raft/v3's
// raftpb.Message) between the members of a replicated queue, over the
// internal gRPC service baton.queue.v1.RaftService (proto/baton/queue/v1/
// raft.proto) and the members' mutual TLS.
//
// It is the network etcd raft leaves to its user, and it promises what
// Raft asks of a network and no more: a message may be lost, never
// corrupted or delivered to the wrong member. So it never blocks the Ready
// loop that hands it messages:
//
//   - Sending: each peer has one long-lived client stream, opened lazily,
//     reopened with backoff when it breaks, and a bounded queue in front of
//     it. Send puts each message on its peer's queue and returns; a full
//     queue, a peer whose stream is down, and a message larger than the
//     receiver accepts drop the message, count it and (for the first two)
//     tell the caller the peer is unreachable, so that the leader probes it
//     instead of pipelining appends into the void. The stream's writer puts
//     every message waiting at that moment into one request, up to the
//     receiver's message size: under load one frame carries many appends,
//     as group commit does for the log.
//   - Receiving: Register adds RaftService to the member's gRPC server. A
//     stream's batches are checked (this queue's cluster id, a sender this
//     member's configuration holds, or a leader it does not know yet that
//     says where it listens, addressed to this member) and each
//     message handed to the caller's recv in order: one that is not a
//     raft message, whose type raft does not have or sends only to
//     itself, or whose To or From disagrees with its batch is dropped.
//     Every drop is counted, and logged at WARN at most once a minute for
//     each peer and reason (droplog.go). Who may open a stream at all is
//     the server's authorization (services/runtime/authz: the role
//     queue-peer only), not this package's.
//
// The caller owns the Raft node: the transport reports through the hooks of
// Config (ReportUnreachable, ReportSnapshot), which raft.Node's and
// raft.RawNode's methods of the same names fit, and calls them from its own
// goroutines, never from Send.
//
// Snapshots travel inline while one fits in a request (a small queue's
// does). A larger one goes by SendSnapshot, a call of its own in chunks of
// a megabyte (snapshot.go), so that appends and heartbeats never queue
// behind it, as rafthttp sends snapshots on a request of their own; the
// receiver hands it to the node only once every chunk has arrived, and the
// call's outcome is the ReportSnapshot owed.
package transport
