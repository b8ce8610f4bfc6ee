package service

import (
	"github.com/batonrun/baton/services/observer/internal/declarations"
	"github.com/batonrun/baton/services/observer/internal/object"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics exposes the observer's counters under baton_observer_. Counters
// kept by the informers and outboxes are read at scrape time, so the hot
// path pays for atomics only.
type metrics struct {
	o       *observer
	latency *prometheus.HistogramVec
	wait    prometheus.Histogram

	events, relists, restarts, observed, head, lag *prometheus.Desc
	outbox, delivered, failures, dropped, objects  *prometheus.Desc
	malformed, recordWrites, recordBytes, ignored  *prometheus.Desc
	declarations, refused, refusedBy               *prometheus.Desc
	streams, probes                                *prometheus.Desc
}

func newMetrics(o *observer) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("baton_observer_"+name, help, labels, nil)
	}
	return &metrics{
		o: o,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_observer_add_latency_seconds",
			Help: "Time from observing a change to the queue accepting the Add that announced it.",
			// 100 µs to ~100 s: from an idle loopback queue to a long outage.
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11),
		}, []string{"queue"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "baton_observer_read_wait_seconds",
			Help: "How long a Get or List with a min_revision waited for the cache to reach it.",
			// 10 µs to ~40 s: from a cache already there to a watch that
			// cannot catch up.
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
		}),
		events:       d("events_total", "Watch events received.", "prefix"),
		relists:      d("relists_total", "Full lists of a prefix (at start and after compaction).", "prefix"),
		restarts:     d("watch_restarts_total", "Watches opened again after a break.", "prefix"),
		observed:     d("observed_revision", "The etcd revision the cache reflects for a prefix.", "prefix"),
		head:         d("head_revision", "etcd's head revision as last seen by a prefix's watch.", "prefix"),
		lag:          d("lag_revisions", "head_revision - observed_revision.", "prefix"),
		outbox:       d("outbox_size", "Distinct keys waiting to be added to a queue.", "queue"),
		delivered:    d("delivered_keys_total", "Keys the queue accepted from the outbox.", "queue"),
		failures:     d("add_failures_total", "Add calls to the queue that failed (and were retried).", "queue"),
		dropped:      d("dropped_keys_total", "Keys not announced because the queue would refuse them (empty, over 1024 bytes, not UTF-8).", "queue"),
		ignored:      d("status_changes_ignored_total", "Watch events that changed nothing but an object's status, not announced to the queue because its rule ignores its own status changes (ignoreOwnStatus; docs/observer.md).", "queue"),
		objects:      d("cache_objects", "Objects in the cache."),
		recordWrites: d("record_writes_total", "Known-key records written beside the checkpoint (docs/observer.md)."),
		recordBytes:  d("record_written_bytes_total", "Bytes of known-key records written (chunks and manifest)."),
		declarations: d("declarations", "Controllers' declarations in force (under /baton/rules/)."),
		refused:      d("declarations_refused", "Controllers' declarations refused (not valid, or a prefix nesting inside or around one in force); each is logged and shown in Status."),
		refusedBy:    d("declarations_refused_by_reason", "Controllers' declarations refused, by reason: invalid, too_large (over kinds.MaxDeclarationBytes), wrong_key, overlap, too_many_declarations (kinds.MaxDeclarations in force), too_many_prefixes (over kinds.MaxDeclaredPrefixes).", "reason"),
		streams:      d("watch_streams_total", "etcd watch streams the watches have shared: one, and one more after each break (docs/observer.md)."),
		probes:       d("watch_probes_total", "Probes of watches that could not trust a progress notification yet (opened while etcd was idle)."),
		malformed:    d("malformed_objects_total", "Malformed keys and values seen in lists and watch events, by reason: bad_path (not cached, not announced), empty, protobuf, invalid_json, not_object, namespace_mismatch (cached without owners, announced by their own key).", "prefix", "reason"),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if err := reg.Register(m.latency); err != nil {
		return err
	}
	if err := reg.Register(m.wait); err != nil {
		return err
	}
	return reg.Register(m)
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.events, m.relists, m.restarts, m.observed, m.head, m.lag, m.outbox, m.delivered, m.failures, m.dropped, m.ignored, m.objects, m.malformed, m.recordWrites, m.recordBytes, m.declarations, m.refused, m.refusedBy, m.streams, m.probes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, in := range m.o.informers() {
		s := in.Stats()
		ch <- prometheus.MustNewConstMetric(m.events, prometheus.CounterValue, float64(s.Events), s.Prefix)
		ch <- prometheus.MustNewConstMetric(m.relists, prometheus.CounterValue, float64(s.Relists), s.Prefix)
		ch <- prometheus.MustNewConstMetric(m.restarts, prometheus.CounterValue, float64(s.WatchRestarts), s.Prefix)
		ch <- prometheus.MustNewConstMetric(m.observed, prometheus.GaugeValue, float64(s.ObservedRevision), s.Prefix)
		ch <- prometheus.MustNewConstMetric(m.head, prometheus.GaugeValue, float64(s.HeadRevision), s.Prefix)
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, float64(s.HeadRevision-s.ObservedRevision), s.Prefix)
		// Every reason is exported, zeros too, so an alert can be written on
		// any of them before the first malformed object appears.
		for _, r := range object.Reasons {
			ch <- prometheus.MustNewConstMetric(m.malformed, prometheus.CounterValue, float64(s.Malformed[r]), s.Prefix, r.String())
		}
	}
	ignored := m.o.announcer.Skipped()
	for _, q := range m.o.outbox.Queues() {
		b := m.o.outbox.Box(q)
		ch <- prometheus.MustNewConstMetric(m.ignored, prometheus.CounterValue, float64(ignored[q]), q)
		ch <- prometheus.MustNewConstMetric(m.outbox, prometheus.GaugeValue, float64(b.Len()), q)
		ch <- prometheus.MustNewConstMetric(m.delivered, prometheus.CounterValue, float64(b.Delivered()), q)
		ch <- prometheus.MustNewConstMetric(m.failures, prometheus.CounterValue, float64(b.Failures()), q)
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(b.Dropped()), q)
	}
	ch <- prometheus.MustNewConstMetric(m.objects, prometheus.GaugeValue, float64(m.o.cache.Len()))
	ch <- prometheus.MustNewConstMetric(m.recordWrites, prometheus.CounterValue, float64(m.o.keeper.RecordWrites()))
	ch <- prometheus.MustNewConstMetric(m.recordBytes, prometheus.CounterValue, float64(m.o.keeper.RecordBytes()))
	streams, probes := m.o.mux.Streams()
	ch <- prometheus.MustNewConstMetric(m.streams, prometheus.CounterValue, float64(streams))
	ch <- prometheus.MustNewConstMetric(m.probes, prometheus.CounterValue, float64(probes))
	inForce, refused, byReason := m.o.declarationCounts()
	ch <- prometheus.MustNewConstMetric(m.declarations, prometheus.GaugeValue, float64(inForce))
	ch <- prometheus.MustNewConstMetric(m.refused, prometheus.GaugeValue, float64(refused))
	// Every reason, zeros too, so an alert on a limit can be written first.
	for _, r := range declarations.Reasons {
		ch <- prometheus.MustNewConstMetric(m.refusedBy, prometheus.GaugeValue, float64(byReason[r]), r)
	}
}
