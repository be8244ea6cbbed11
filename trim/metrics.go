package trim

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the retention, trim and reap metrics; a nil *Metrics records
// nothing. Build them once per process with NewMetrics.
type Metrics struct {
	released              prometheus.Counter
	fenceEpoch, fenceWait prometheus.Gauge
	heldByQuarantine      prometheus.Gauge
	heldEpoch, heldSeq    prometheus.Gauge
	heldStreams           prometheus.Gauge
	slotsReaped           prometheus.Counter
	objectsReaped         *prometheus.CounterVec
	intentsDropped        prometheus.Counter
	held                  *prometheus.GaugeVec
	backlogSlots          *prometheus.GaugeVec
	deleteRequests        *prometheus.CounterVec
	deleteFailures        *prometheus.CounterVec
	entriesRetired        prometheus.Counter
	straysFoundBy         *prometheus.GaugeVec
	straysArmedBy         *prometheus.CounterVec
}

// NewMetrics builds the metrics and registers them on reg (never the
// default registerer). A name already registered there is an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "nova_auditor_" + name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "nova_auditor_" + name, Help: help})
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nova_auditor_" + name, Help: help}, labels)
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nova_auditor_" + name, Help: help}, labels)
	}
	m := &Metrics{
		released:   c("trim_slots_released_total", "Slots released by trim (armed for reaping after the grace)."),
		fenceEpoch: g("trim_fence_wait_epoch", "The past epoch whose fence is in progress (no end_seq) and that trim waits at; 0 when none."),
		fenceWait:  g("trim_fence_wait_seconds", "How long trim has waited at a fence in progress (database clock); 0 when none."),
		heldByQuarantine: g("trim_held_by_quarantine",
			"1 when the trim bound is a slot named by a quarantined stream's ref (one bad stream holds the whole chain)."),
		heldEpoch:   g("trim_quarantine_held_slot_epoch", "Epoch of the oldest slot held by a quarantined stream's refs; 0 when none."),
		heldSeq:     g("trim_quarantine_held_slot_seq", "Seq of the oldest slot held by a quarantined stream's refs."),
		heldStreams: g("trim_quarantined_streams_holding", "Quarantined streams whose refs hold slots."),
		slotsReaped: c("slots_reaped_total", "Slots deleted from every bucket of their class."),
		objectsReaped: cv("objects_reaped_total",
			"Objects deleted by reap, by the intent that armed them (reap, or publish: abandoned).", "intent"),
		intentsDropped: c("reap_intents_dropped_total", "Reap intents dropped unexecuted because the catalog references their key."),
		held: gv("reap_held_objects",
			"Due object reaps held back, by reason (publishable, publishing, invalid_key, unknown_class).", "reason"),
		backlogSlots:   gv("reap_backlog_slots", "Slots released and not yet reaped, by state (due, waiting for the grace).", "state"),
		deleteRequests: cv("reap_delete_requests_total", "DeleteObjects requests made by reap, by bucket.", "bucket"),
		deleteFailures: cv("reap_delete_failures_total",
			"DeleteObjects requests that failed in whole or in part, by bucket (the range stays due).", "bucket"),
		entriesRetired: c("retention_entries_removed_total", "Catalog entries removed by retention (wholly below low_record)."),
		straysFoundBy: gv("strays_found",
			"Objects no metadata names that this leader's last stray sweep found, by kind (settled: under a stream's settled prefix, unparseable keys included; slot: under the chain, behind the trim cursor and in no slot reap, or outside the chain).", "kind"),
		straysArmedBy: cv("strays_armed_total",
			"Strays older than --stray-guard whose reap the sweep armed, by kind (settled: keys; slot: slots).", "kind"),
	}
	var errs []error
	for _, col := range []prometheus.Collector{m.released, m.fenceEpoch, m.fenceWait,
		m.heldByQuarantine, m.heldEpoch, m.heldSeq, m.heldStreams, m.slotsReaped, m.objectsReaped, m.intentsDropped,
		m.held, m.backlogSlots, m.deleteRequests, m.deleteFailures, m.entriesRetired, m.straysFoundBy, m.straysArmedBy} {
		errs = append(errs, reg.Register(col))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("trim metrics: %w", err)
	}
	// Every label value known up front is present from the start (the
	// buckets when NewReap learns them), so rate() and the alerts have a
	// series before the first event.
	for _, k := range []string{"reap", "publish"} {
		m.objectsReaped.WithLabelValues(k)
	}
	for _, k := range []string{StraySettled, StraySlot} {
		m.straysArmedBy.WithLabelValues(k)
	}
	m.straysFound(StrayCounts{})
	m.heldObjects(nil)
	m.backlog(Backlog{})
	return m, nil
}

// heldReasons are the values of reap_held_objects' reason label.
var heldReasons = []string{"publishable", "publishing", "invalid_key", "unknown_class"}

// ResetLeaderGauges sets the gauges that only the leader's steps compute
// (fence wait, quarantine hold, reap backlog, held reaps, strays found) to their
// "none" value. The daemon calls it when it stops leading, so an instance
// that lost the lease does not go on reporting what it saw as leader
// (aggregated with max by star, a standby's zeros never hide the
// leader's values).
func (m *Metrics) ResetLeaderGauges() {
	if m == nil {
		return
	}
	m.observeDecision(Decision{}, time.Time{})
	m.heldObjects(nil)
	m.backlog(Backlog{})
	m.straysFound(StrayCounts{})
}

// buckets pre-initialises the per-bucket reap counters.
func (m *Metrics) buckets(bs []string) {
	if m == nil {
		return
	}
	for _, b := range bs {
		m.deleteRequests.WithLabelValues(b)
		m.deleteFailures.WithLabelValues(b)
	}
}

func (m *Metrics) observeDecision(d Decision, now time.Time) {
	if m == nil {
		return
	}
	m.fenceEpoch.Set(0)
	m.fenceWait.Set(0)
	if w := d.FenceWait; w != nil {
		m.fenceEpoch.Set(float64(w.Epoch))
		m.fenceWait.Set(max(0, now.Sub(w.Since).Seconds()))
	}
	m.heldByQuarantine.Set(0)
	m.heldEpoch.Set(0)
	m.heldSeq.Set(0)
	m.heldStreams.Set(0)
	if q := d.Quarantine; q != nil {
		if q.Bounding {
			m.heldByQuarantine.Set(1)
		}
		m.heldEpoch.Set(float64(q.Slot.Epoch))
		m.heldSeq.Set(float64(q.Slot.Seq))
		m.heldStreams.Set(float64(q.Streams))
	}
}

func (m *Metrics) slotsReleased(n int64) {
	if m != nil {
		m.released.Add(float64(n))
	}
}

func (m *Metrics) reapedSlots(n int64) {
	if m != nil {
		m.slotsReaped.Add(float64(n))
	}
}

func (m *Metrics) reapedObject(kind string) {
	if m != nil {
		m.objectsReaped.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) dropped(n int) {
	if m != nil {
		m.intentsDropped.Add(float64(n))
	}
}

func (m *Metrics) heldObjects(by map[string]int) {
	if m == nil {
		return
	}
	for _, r := range heldReasons {
		m.held.WithLabelValues(r).Set(float64(by[r]))
	}
}

func (m *Metrics) backlog(b Backlog) {
	if m != nil {
		m.backlogSlots.WithLabelValues("due").Set(float64(b.SlotsDue))
		m.backlogSlots.WithLabelValues("waiting").Set(float64(b.SlotsWaiting))
	}
}

func (m *Metrics) deleteRequest(bucket string, failed bool) {
	if m != nil {
		m.deleteRequests.WithLabelValues(bucket).Inc()
		if failed {
			m.deleteFailures.WithLabelValues(bucket).Inc()
		}
	}
}

func (m *Metrics) retired(n int) {
	if m != nil {
		m.entriesRetired.Add(float64(n))
	}
}

func (m *Metrics) straysFound(c StrayCounts) {
	if m != nil {
		m.straysFoundBy.WithLabelValues(StraySettled).Set(float64(c.Settled))
		m.straysFoundBy.WithLabelValues(StraySlot).Set(float64(c.Slots))
	}
}

func (m *Metrics) straysArmed(kind string, n int) {
	if m != nil {
		m.straysArmedBy.WithLabelValues(kind).Add(float64(n))
	}
}
