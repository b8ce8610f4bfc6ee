package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the queue's Prometheus metrics, named after client-go's
// workqueue metrics under baton_queue_ and labelled by queue. Counts and
// gauges are read from the queues at scrape time, so the hot path only
// observes the two latency histograms.
type Metrics struct {
	queueDur *prometheus.HistogramVec
	workDur  *prometheus.HistogramVec
	broker   *Broker
}

type queueObservers struct {
	queueDur, workDur prometheus.Observer
}

// NewMetrics creates the metrics; register them with Register once the
// broker is open.
func NewMetrics() *Metrics {
	buckets := prometheus.ExponentialBuckets(1e-5, 4, 12) // 10µs … ~42 s
	return &Metrics{
		queueDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_queue_queue_duration_seconds", Help: "How long a key waited ready before a worker leased it.", Buckets: buckets,
		}, []string{"queue"}),
		workDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_queue_work_duration_seconds", Help: "How long a lease was held before its ack.", Buckets: buckets,
		}, []string{"queue"}),
	}
}

func (m *Metrics) observers(queue string) *queueObservers {
	return &queueObservers{queueDur: m.queueDur.WithLabelValues(queue), workDur: m.workDur.WithLabelValues(queue)}
}

// forget deletes a dropped queue's series.
func (m *Metrics) forget(queue string) {
	m.queueDur.DeleteLabelValues(queue)
	m.workDur.DeleteLabelValues(queue)
}

// Register registers the metrics of b with reg.
func (m *Metrics) Register(reg prometheus.Registerer, b *Broker) error {
	m.broker = b
	for _, c := range []prometheus.Collector{m.queueDur, m.workDur, (*stateCollector)(m)} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

var (
	descDepth       = prometheus.NewDesc("baton_queue_depth", "Keys ready to be leased.", []string{"queue"}, nil)
	descItems       = prometheus.NewDesc("baton_queue_items", "Keys by state.", []string{"queue", "state"}, nil)
	descAdds        = prometheus.NewDesc("baton_queue_adds_total", "Keys announced by Add, collapsed ones included.", []string{"queue"}, nil)
	descCollapsed   = prometheus.NewDesc("baton_queue_collapsed_total", "Announcements that changed nothing.", []string{"queue"}, nil)
	descLeases      = prometheus.NewDesc("baton_queue_leases_total", "Keys handed out by Lease.", []string{"queue"}, nil)
	descAcks        = prometheus.NewDesc("baton_queue_acks_total", "Accepted acks of any outcome.", []string{"queue"}, nil)
	descRetries     = prometheus.NewDesc("baton_queue_retries_total", "Failed reconciles reported by ack, each retried after backoff.", []string{"queue"}, nil)
	descExpirations = prometheus.NewDesc("baton_queue_lease_expirations_total", "Leases that lapsed.", []string{"queue"}, nil)
	descReleases    = prometheus.NewDesc("baton_queue_lease_releases_total", "Leases a work stream held when it ended, handed back (pending again, attempts + 1).", []string{"queue"}, nil)
	descUnfinished  = prometheus.NewDesc("baton_queue_unfinished_work_seconds", "Sum of the ages of live leases.", []string{"queue"}, nil)
	descLongest     = prometheus.NewDesc("baton_queue_longest_running_processor_seconds", "Age of the oldest live lease.", []string{"queue"}, nil)
	descOldest      = prometheus.NewDesc("baton_queue_oldest_pending_age_seconds", "How long the oldest ready key has waited.", []string{"queue"}, nil)
	descRepairs     = prometheus.NewDesc("baton_queue_store_repairs_total", "Writes torn by a crash that recovery cut off the end of the log when this process started (each is also logged at ERROR).", nil, nil)
	descNoSpace     = prometheus.NewDesc("baton_queue_store_no_space", "1 while the disk is full and changes are refused, else 0.", nil, nil)
)

type stateCollector Metrics

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDepth, descItems, descAdds, descCollapsed, descLeases, descAcks, descRetries, descExpirations, descReleases, descUnfinished, descLongest, descOldest, descRepairs, descNoSpace} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.broker == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.CounterValue, float64(c.broker.j.Repairs()))
	noSpace := 0.0
	if c.broker.j.NoSpace() {
		noSpace = 1
	}
	ch <- prometheus.MustNewConstMetric(descNoSpace, prometheus.GaugeValue, noSpace)
	// The leader's memory as it is: a scrape waits for no majority, and
	// a follower exports no queue (the members' series would add up).
	var stats []QueueStats
	if c.broker.Leading() {
		stats, _ = c.broker.stats("")
	}
	for _, s := range stats {
		q := s.Name
		gauge := func(d *prometheus.Desc, v float64, l ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{q}, l...)...)
		}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), q)
		}
		gauge(descDepth, float64(s.Pending))
		gauge(descItems, float64(s.Pending), "pending")
		gauge(descItems, float64(s.Delayed), "delayed")
		gauge(descItems, float64(s.Leased), "leased")
		gauge(descItems, float64(s.Parked), "parked")
		counter(descAdds, s.Adds)
		counter(descCollapsed, s.Collapsed)
		counter(descLeases, s.Leases)
		counter(descAcks, s.Acks)
		counter(descRetries, s.Failures)
		counter(descExpirations, s.Expirations)
		counter(descReleases, s.Releases)
		gauge(descUnfinished, time.Duration(s.UnfinishedWork).Seconds())
		gauge(descLongest, time.Duration(s.LongestLease).Seconds())
		gauge(descOldest, time.Duration(s.OldestPending).Seconds())
	}
}
