// Package metricset registers a component's Prometheus collectors as one
// set: all of them or none, and unregistered together when the component
// closes. A replicated member's node and its transport each register a
// set; a node that fails to start, or that a process closes and starts
// again on the same registry (a rejoin, a test's next node), then leaves
// no collector behind for the next one to collide with.
package metricset

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Set is collectors registered together.
type Set struct {
	reg prometheus.Registerer
	cs  []prometheus.Collector
}

// Register registers cs with reg, all or none: when one is refused, those
// registered before it are unregistered again. A nil reg registers
// nothing (the collectors still count; nobody exports them).
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) (*Set, error) {
	if reg == nil {
		return &Set{}, nil
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, d := range cs[:i] {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return &Set{reg: reg, cs: cs}, nil
}

// Unregister unregisters every collector of the set.
func (s *Set) Unregister() {
	if s.reg == nil {
		return
	}
	for _, c := range s.cs {
		s.reg.Unregister(c)
	}
}
