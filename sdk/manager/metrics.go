package manager

// The Prometheus metrics of reconciles, by controller.

import "github.com/prometheus/client_golang/prometheus"

// metrics are the worker's Prometheus metrics.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	active   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_worker_reconcile_total",
			Help: "Reconciles finished, by controller and result (success, requeue_after, error, terminal, panic).",
		}, []string{"controller", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_worker_reconcile_duration_seconds",
			Help:    "Time spent in Reconcile, by controller.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"controller"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_worker_active_workers",
			Help: "Reconciles running now, by controller.",
		}, []string{"controller"}),
	}
	if reg != nil {
		reg.MustRegister(m.total, m.duration, m.active)
	}
	return m
}

// init makes every series of a controller exist from the start, at zero.
func (m *metrics) init(controller string) {
	for _, r := range []string{ResultSuccess, ResultRequeueAfter, ResultError, ResultTerminal, ResultPanic} {
		m.total.WithLabelValues(controller, r)
	}
	m.duration.WithLabelValues(controller)
	m.active.WithLabelValues(controller)
}
