package replica

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonrun/baton/services/queue/internal/metricset"
)

// Metric names, as docs/design.md gives them.
const (
	LeaderChangesMetric = "baton_queue_raft_leader_changes_total"
	TermMetric          = "baton_queue_raft_term"
	IsLeaderMetric      = "baton_queue_raft_is_leader"
	CommitLagMetric     = "baton_queue_raft_commit_lag_entries"
	SnapshotsMetric     = "baton_queue_raft_snapshots_total"
)

// metrics are the node's; the Ready loop sets them after each Ready.
type metrics struct {
	set           *metricset.Set
	leaderChanges prometheus.Counter
	term          prometheus.Gauge
	isLeader      prometheus.Gauge
	commitLag     prometheus.Gauge
	// snapshotsCreated and snapshotsRestored are SnapshotsMetric's
	// series {op="created"} (Compact) and {op="restored"} (a leader's).
	snapshotsCreated, snapshotsRestored prometheus.Counter
	snapshots                           *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: LeaderChangesMetric,
			Help: "Times this member saw the leader change to a known member (itself included)."}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{Name: TermMetric,
			Help: "The Raft term this member is in."}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{Name: IsLeaderMetric,
			Help: "1 while this member is the leader, else 0."}),
		commitLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: CommitLagMetric,
			Help: "Entries this member knows are committed but has not applied yet."}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SnapshotsMetric,
			Help: "Snapshots this member made of its state to compact its log (op=created), and snapshots a leader sent it that replaced its state (op=restored)."}, []string{"op"}),
	}
	m.snapshotsCreated = m.snapshots.WithLabelValues("created")
	m.snapshotsRestored = m.snapshots.WithLabelValues("restored")
	var err error
	if m.set, err = metricset.Register(reg, m.leaderChanges, m.term, m.isLeader, m.commitLag, m.snapshots); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) unregister() { m.set.Unregister() }
