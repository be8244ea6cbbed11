package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// Metrics are the settle step's own metrics; a nil *Metrics records nothing.
type Metrics struct {
	objects       *prometheus.CounterVec
	quarantines   *prometheus.CounterVec
	footers       prometheus.Counter
	slotGets      prometheus.Counter
	slotBytes     prometheus.Counter
	tailReads     *prometheus.CounterVec
	erasureStrays *prometheus.CounterVec
}

// NewMetrics builds the settle metrics and registers them on reg (never the
// default registerer). A name already registered there is an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
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
			Help: "Slot footers fetched, an envelope and a footer GET each (one per slot while the footer cache holds it is the goal).",
		}),
		slotGets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nova_auditor_slot_range_gets_total",
			Help: "Ranged GETs of the due streams' small chunks of a slot, read together (about one per slot per cycle is the goal).",
		}),
		slotBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nova_auditor_slot_range_bytes_total",
			Help: "Bytes those ranged GETs read.",
		}),
		tailReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_tail_reads_total",
			Help: "Standing tails below the copy floor read for a rewrite, by outcome (hit: from the tail cache's memory; spill: from its spill files; miss: one GET).",
		}, []string{"outcome"}),
		erasureStrays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_erasure_strays_total",
			Help: "Strays (objects no metadata names) found holding records of an erasure about to be applied, by outcome (armed: older than --stray-guard, its reap armed; waiting: younger, the erasure kept pending, counted each erase step).",
		}, []string{"outcome"}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.objects, m.quarantines, m.footers, m.slotGets, m.slotBytes, m.tailReads, m.erasureStrays} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("settle metrics: %w", err)
	}
	// Every label value is present from the start, so rate() and the
	// dashboard have a series (at zero) before the first event.
	for _, o := range []string{"published", "adopted", "failed"} {
		m.objects.WithLabelValues(o)
	}
	for _, o := range []string{"hit", "spill", "miss"} {
		m.tailReads.WithLabelValues(o)
	}
	for _, o := range []string{"armed", "waiting"} {
		m.erasureStrays.WithLabelValues(o)
	}
	for _, c := range cycle.QuarantineClasses() {
		m.quarantines.WithLabelValues(c)
	}
	return m, nil
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

func (m *Metrics) slotReads(gets, bytes int64) {
	if m != nil {
		m.slotGets.Add(float64(gets))
		m.slotBytes.Add(float64(bytes))
	}
}

func (m *Metrics) tailRead(outcome string) {
	if m != nil {
		m.tailReads.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) erasureStray(outcome string) {
	if m != nil {
		m.erasureStrays.WithLabelValues(outcome).Inc()
	}
}

// counted runs a step with an objstore.Tally on its context and takes the
// step's S3 requests and bytes from it once the step ends: every request
// the store sends for the step and every byte it moves is counted where it
// happens, by the backend (objstore.Observer), whether the object it
// served was published, adopted or given up. Read-back bytes are fetched
// bytes (the ledger's bytes_fetched: every byte read through the auditor),
// and also BytesReadBack.
func counted(ctx context.Context, step func(ctx context.Context) (cycle.Counts, error)) (cycle.Counts, error) {
	ctx, tally := objstore.Count(ctx)
	c, err := step(ctx)
	t := tally.Totals()
	c.S3Requests = t.Requests
	c.BytesCopied = t.Copied
	c.BytesFetched = t.Fetched + t.ReadBack
	c.BytesUploaded = t.Uploaded
	c.BytesReadBack = t.ReadBack
	return c, err
}
