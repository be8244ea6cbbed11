package daemon

import (
	"errors"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
)

// Metrics are the daemon's own series (DESIGN.md section 8). The steps
// (settle, trim, objstore) register theirs into the same registry; the
// names the dashboard expects from them are listed in deploy/README.md.
// Metastore gauges are computed from the database after each cycle and on
// a timer, by every instance (leader or standby): aggregate with max by star.
type Metrics struct {
	BuildInfo         *prometheus.GaugeVec
	Leader            prometheus.Gauge
	LeaseToken        prometheus.Gauge
	LeaseAcquisitions prometheus.Counter
	LeaseLosses       prometheus.Counter
	Halted            prometheus.Gauge
	Paused            prometheus.Gauge

	Cycles          *prometheus.CounterVec // trigger, outcome
	CyclesSkipped   prometheus.Counter
	CycleRetries    prometheus.Counter
	CycleDuration   prometheus.Histogram
	LastSuccess     prometheus.Gauge
	AdminRequests   *prometheus.CounterVec // kind
	PGTransactions  *prometheus.CounterVec // outcome
	StatusRefreshes *prometheus.CounterVec // outcome

	DueStreams       *prometheus.GaugeVec // class
	SettleLag        *prometheus.GaugeVec // class
	OldestTransitAge *prometheus.GaugeVec // class
	AgeCap           *prometheus.GaugeVec // class
	AgeCapBreached   *prometheus.GaugeVec // class
	Quarantined      prometheus.Gauge
	OpenIntents      *prometheus.GaugeVec // kind
	ReapObjects      *prometheus.GaugeVec // state
	TrimCursorEpoch  prometheus.Gauge
	TrimCursorSeq    prometheus.Gauge
	TrimReleasable   prometheus.Gauge
	HeadEpoch        prometheus.Gauge
	HeadSeq          prometheus.Gauge

	Guard *GuardMetrics // schema and bucket-rule blocks (guard.go)
}

// NewMetrics builds the daemon's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer, version string) (*Metrics, error) {
	const ns = "nova_auditor"
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		BuildInfo:         gv("build_info", "Always 1; the labels name the build.", "version", "go_version"),
		Leader:            g("leader", "1 while this instance holds the star's lease, 0 on standby."),
		LeaseToken:        g("lease_token", "Fencing token of the lease this instance holds (0 on standby)."),
		LeaseAcquisitions: c("lease_acquisitions_total", "Leases this instance acquired."),
		LeaseLosses:       c("lease_losses_total", "Leases this instance lost without releasing them."),
		Halted:            g("halted", "1 while the star is halted on a broken invariant (auditor status shows why)."),
		Paused:            g("paused", "1 while an operator has paused the star."),

		Cycles:        cv("cycles_total", "Cycles run, by trigger and outcome.", "trigger", "outcome"),
		CyclesSkipped: c("cycles_skipped_total", "Scheduled cycles skipped because one was still running."),
		CycleRetries:  c("cycle_retries_total", "Failed cycles retried early with backoff."),
		CycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "cycle_duration_seconds",
			Help:    "Duration of cycles.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}}),
		LastSuccess:     g("last_successful_cycle_timestamp_seconds", "End of the last successful cycle of the star (Unix seconds, database clock)."),
		AdminRequests:   cv("admin_requests_total", "Operator requests consumed by this instance, by kind.", "kind"),
		PGTransactions:  cv("pg_transactions_total", "Metastore transactions of the daemon (lease, ledger, admin), by outcome.", "outcome"),
		StatusRefreshes: cv("status_refreshes_total", "Refreshes of the metastore gauges, by outcome.", "outcome"),

		DueStreams:       gv("due_streams", "Streams past their linger and not quarantined.", "class"),
		SettleLag:        gv("settle_lag_seconds", "How long the most overdue due stream has waited past its linger.", "class"),
		OldestTransitAge: gv("oldest_transit_age_seconds", "Age of the oldest unsettled span ref.", "class"),
		AgeCap:           gv("age_cap_seconds", "The configured age cap (for headroom: age_cap - oldest_transit_age).", "class"),
		AgeCapBreached:   gv("age_cap_breached_streams", "Streams with data older than the age cap of their class.", "class"),
		Quarantined:      g("quarantined", "Quarantined streams and slots of the star."),
		OpenIntents:      gv("open_intents", "Open orphan intents, by kind (publish, reap).", "kind"),
		ReapObjects: gv("reap_backlog_objects",
			"Object reaps not yet done, by state (due, waiting for the grace); trim exports reap_backlog_slots.", "state"),
		TrimCursorEpoch: g("trim_cursor_epoch", "Epoch of the first slot trim has not released."),
		TrimCursorSeq:   g("trim_cursor_seq", "Seq of the first slot trim has not released."),
		TrimReleasable:  g("trim_releasable_slots", "Slots between the trim cursor and the trim bound: what the next trim releases."),
		HeadEpoch:       g("absorbed_head_epoch", "The star's current writer epoch."),
		HeadSeq:         g("absorbed_head_seq", "The star's absorbed head seq (next_seq)."),
	}
	var errs []error
	for _, col := range []prometheus.Collector{m.BuildInfo, m.Leader, m.LeaseToken, m.LeaseAcquisitions, m.LeaseLosses,
		m.Halted, m.Paused, m.Cycles, m.CyclesSkipped, m.CycleRetries, m.CycleDuration, m.LastSuccess, m.AdminRequests,
		m.PGTransactions, m.StatusRefreshes, m.DueStreams, m.SettleLag, m.OldestTransitAge, m.AgeCap, m.AgeCapBreached,
		m.Quarantined, m.OpenIntents, m.ReapObjects, m.TrimCursorEpoch, m.TrimCursorSeq, m.TrimReleasable, m.HeadEpoch, m.HeadSeq} {
		errs = append(errs, reg.Register(col))
	}
	guard, err := newGuardMetrics(reg)
	errs = append(errs, err)
	m.Guard = guard
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if version == "" {
		version = "dev"
	}
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	// Every label value that can appear is present from the start, so
	// absent() and rate() work before the first event.
	for _, class := range []string{catalog.ClassStandard, catalog.ClassExpress} {
		m.DueStreams.WithLabelValues(class)
		m.SettleLag.WithLabelValues(class)
		m.OldestTransitAge.WithLabelValues(class)
		m.AgeCap.WithLabelValues(class)
		m.AgeCapBreached.WithLabelValues(class)
	}
	for _, k := range []string{"publish", "reap"} {
		m.OpenIntents.WithLabelValues(k)
	}
	for _, k := range []string{"due", "waiting"} {
		m.ReapObjects.WithLabelValues(k)
	}
	for _, k := range []string{catalog.AdminTrigger, catalog.AdminPause, catalog.AdminResume, catalog.AdminRelease} {
		m.AdminRequests.WithLabelValues(k)
	}
	for _, o := range []string{txOK, txStale, txRetryable, txError} {
		m.PGTransactions.WithLabelValues(o)
	}
	for _, o := range []string{"ok", "error"} {
		m.StatusRefreshes.WithLabelValues(o)
	}
	for _, o := range []string{catalog.RunOK, catalog.RunFailed, catalog.RunHalted, catalog.RunCanceled, catalog.RunLostLease} {
		m.Cycles.WithLabelValues(TriggerSchedule, o)
	}
	return m, nil
}

// Outcomes of pg_transactions_total.
const (
	txOK        = "ok"
	txStale     = "stale_token"
	txRetryable = "retryable"
	txError     = "error"
)

// tx counts one daemon metastore transaction by its outcome. A lease held
// by another instance is a committed transaction that found the lease taken.
func (m *Metrics) tx(err error) {
	var held *catalog.LeaseHeldError
	switch {
	case err == nil, errors.As(err, &held):
		m.PGTransactions.WithLabelValues(txOK).Inc()
	case errors.Is(err, catalog.ErrStaleToken):
		m.PGTransactions.WithLabelValues(txStale).Inc()
	case catalog.IsRetryable(err):
		m.PGTransactions.WithLabelValues(txRetryable).Inc()
	default:
		m.PGTransactions.WithLabelValues(txError).Inc()
	}
}
