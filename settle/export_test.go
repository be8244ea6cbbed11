package settle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
)

// SetPolicy changes the due policy of s between cycles. The long-tail
// benchmark sets the age cap it measured in its first round this way, so
// that the settler keeps its caches (the tail cache, the footer cache)
// across all its cycles, as a daemon's does.
func (s *Settler) SetPolicy(p catalog.DuePolicy) { s.c.Policy = p }

// ErasureStrays is the erasure_strays_total counter of an outcome.
func (m *Metrics) ErasureStrays(outcome string) prometheus.Counter {
	return m.erasureStrays.WithLabelValues(outcome)
}
