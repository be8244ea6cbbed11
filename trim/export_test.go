package trim

import "github.com/prometheus/client_golang/prometheus"

// StraysArmed is the strays_armed_total counter of a kind.
func (m *Metrics) StraysArmed(kind string) prometheus.Counter {
	return m.straysArmedBy.WithLabelValues(kind)
}

// StraysFound is the strays_found gauge of a kind.
func (m *Metrics) StraysFound(kind string) prometheus.Gauge {
	return m.straysFoundBy.WithLabelValues(kind)
}
