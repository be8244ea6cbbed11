package settle

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the settle step's own metrics; a nil *Metrics records nothing.
type Metrics struct {
	objects     *prometheus.CounterVec
	quarantines *prometheus.CounterVec
	footers     prometheus.Counter
}

// NewMetrics registers the settle metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_settled_objects_total",
			Help: "Settled objects by outcome (published, adopted, failed).",
		}, []string{"outcome"}),
		quarantines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_quarantines_total",
			Help: "Streams put in quarantine, by error class.",
		}, []string{"class"}),
		footers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nova_auditor_slot_footer_gets_total",
			Help: "Slot footer GETs (one per slot per cycle is the goal).",
		}),
	}
	reg.MustRegister(m.objects, m.quarantines, m.footers)
	// Every label value is present from the start, so rate() and the
	// dashboard have a series (at zero) before the first event.
	for _, o := range []string{"published", "adopted", "failed"} {
		m.objects.WithLabelValues(o)
	}
	for _, c := range []string{ClassCorrupt, ClassChecksum, ClassUnsupported, ClassMissing, ClassTiling, ClassAdoption} {
		m.quarantines.WithLabelValues(c)
	}
	return m
}

func (m *Metrics) object(outcome string) {
	if m != nil {
		m.objects.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) quarantined(class string) {
	if m != nil {
		m.quarantines.WithLabelValues(class).Inc()
	}
}

func (m *Metrics) footerGets(n int64) {
	if m != nil {
		m.footers.Add(float64(n))
	}
}
