package transport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonrun/baton/services/queue/internal/metricset"
)

// Directions of the dropped metric.
const (
	outbound = "out"
	inbound  = "in"
)

// Reasons a message is dropped: the dropped metric's reason label.
const (
	// Sending.
	reasonUnknownPeer = "unknown_peer" // To is not a peer (a removed member)
	reasonOversize    = "oversize"     // larger than a peer's server accepts
	reasonQueueFull   = "queue_full"   // the peer's send queue was full
	reasonUnreachable = "unreachable"  // queued while the peer's stream was down
	reasonStream      = "stream_error" // in a write that failed
	// Receiving.
	reasonOtherCluster  = "other_cluster"  // the batch's cluster id is not this queue's
	reasonUnknownSender = "unknown_sender" // its sender is not in this member's configuration, nor a leader it may learn
	reasonWrongMember   = "wrong_member"   // the batch was for another member
	reasonWrongTo       = "wrong_to"       // a message's To is not this member
	reasonWrongFrom     = "wrong_from"     // a message's From is not the batch's sender
	reasonMalformed     = "malformed"      // not a raftpb.Message
	reasonLocalType     = "local_type"     // a type raft keeps to itself (raft.IsLocalMsg: MsgHup, MsgBeat …)
	reasonUnknownType   = "unknown_type"   // a type raftpb does not have
)

// Metric names.
const (
	SentMetric     = "baton_queue_raft_messages_sent_total"
	ReceivedMetric = "baton_queue_raft_messages_received_total"
	DroppedMetric  = "baton_queue_raft_messages_dropped_total"
	ConnectsMetric = "baton_queue_raft_stream_connects_total"
	ActiveMetric   = "baton_queue_raft_active_peers"
)

// metrics are the transport's; peer labels are Raft ids in decimal.
type metrics struct {
	set      *metricset.Set
	sent     *prometheus.CounterVec
	received *prometheus.CounterVec
	drops    *prometheus.CounterVec
	connects *prometheus.CounterVec
	active   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SentMetric,
			Help: "Raft messages written to a peer's stream."}, []string{"peer"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ReceivedMetric,
			Help: "Raft messages received from a peer and handed to the node."}, []string{"peer"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: DroppedMetric,
			Help: "Raft messages dropped, by peer, direction (out, in) and reason."}, []string{"peer", "direction", "reason"}),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ConnectsMetric,
			Help: "Streams opened to a peer: the first and every reconnect."}, []string{"peer"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: ActiveMetric,
			Help: "Peers this member has a stream open to."}),
	}
	var err error
	if m.set, err = metricset.Register(reg, m.sent, m.received, m.drops, m.connects, m.active); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) dropped(peer, direction, reason string, n int) {
	m.drops.WithLabelValues(peer, direction, reason).Add(float64(n))
}

func (m *metrics) unregister() { m.set.Unregister() }
