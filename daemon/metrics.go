package daemon

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
)

// Metrics are the daemon's own series (docs/operations.md#operator-surface). The steps
// (settle, trim, objstore) register theirs into the same registry; the
// names the dashboard expects from them are listed in deploy/README.md.
// Metastore gauges are computed from the database after each cycle and on
// a timer, by every instance (leader or standby): aggregate with max by star.
// The per-class gauges exist only for the class the star's chain holds.
type Metrics struct {
	BuildInfo         *prometheus.GaugeVec
	Leader            prometheus.Gauge
	LeaseToken        prometheus.Gauge
	LeaseAcquisitions prometheus.Counter
	LeaseLosses       prometheus.Counter
	Halted            prometheus.Gauge
	Rewound           prometheus.Gauge
	Paused            prometheus.Gauge
	// StartCheckWarnings: serve's start-up checks that warned (scope, check).
	StartCheckWarnings *prometheus.GaugeVec

	Cycles          *prometheus.CounterVec // trigger, outcome
	CyclesSkipped   prometheus.Counter
	CycleRetries    prometheus.Counter
	CycleDuration   prometheus.Histogram
	StepDuration    *prometheus.HistogramVec // step
	LastSuccess     prometheus.Gauge
	AdminRequests   *prometheus.CounterVec // kind
	PGTransactions  *prometheus.CounterVec // outcome
	StatusRefreshes *prometheus.CounterVec // outcome
	StatusRefreshed prometheus.Gauge       // last successful refresh

	DueStreams       *prometheus.GaugeVec // class
	SettleLag        *prometheus.GaugeVec // class
	OldestTransitAge *prometheus.GaugeVec // class
	AgeCap           *prometheus.GaugeVec // class
	AgeCapBreached   *prometheus.GaugeVec // class
	UnsettledRecords *prometheus.GaugeVec // class
	Quarantined      prometheus.Gauge
	OpenIntents      *prometheus.GaugeVec // kind
	ReapObjects      *prometheus.GaugeVec // state
	TrimCursorEpoch  prometheus.Gauge
	TrimCursorSeq    prometheus.Gauge
	TrimReleasable   prometheus.Gauge
	TrimLag          prometheus.Gauge
	HeadEpoch        prometheus.Gauge
	HeadSeq          prometheus.Gauge

	// The tail-growth rule's waiting streams, its cohorts' included
	// (catalog.ClassTransit): how
	// many, the bytes they hold in transit (estimated), and the earliest
	// age-cap deadline among them.
	DeferredStreams      *prometheus.GaugeVec // class
	DeferredTransitBytes *prometheus.GaugeVec // class
	DeferredDeadline     *prometheus.GaugeVec // class

	// Erasure (docs/architecture.md#erasure): the pending erasures from the
	// metastore, the configured alert bound, and what the cycles' steps
	// counted (the rewrite bytes are the erasure step's only).
	ErasuresPending     prometheus.Gauge
	ErasureOldestAge    prometheus.Gauge
	ErasureBound        prometheus.Gauge
	RecordsTombstoned   prometheus.Counter
	ObjectsRewritten    prometheus.Counter
	ErasuresApplied     prometheus.Counter
	ErasureRewriteBytes *prometheus.CounterVec // kind: copied, fetched, uploaded
	ErasuresQuarantined prometheus.Gauge
	// Applied erasures whose records may still have copies in transit
	// slots: the window back to which they may (transitWindow), and how
	// many the run ledger says were applied in it.
	ErasureTransitWindow prometheus.Gauge
	ErasuresInTransit    prometheus.Gauge

	Guard *GuardMetrics // schema and bucket-rule blocks (guard.go)
}

// NewMetrics builds the daemon's metrics and registers them on reg (never
// the default registerer). A name already registered there is an error.
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
		BuildInfo:          gv("build_info", "Always 1; the labels name the build.", "version", "go_version"),
		Leader:             g("leader", "1 while this instance holds the star's lease, 0 on standby."),
		LeaseToken:         g("lease_token", "Fencing token of the lease this instance holds (0 on standby)."),
		LeaseAcquisitions:  c("lease_acquisitions_total", "Leases this instance acquired."),
		LeaseLosses:        c("lease_losses_total", "Leases this instance lost without releasing them."),
		Halted:             g("halted", "1 while the star is halted on a broken invariant (auditor status shows why)."),
		Rewound:            g("metastore_rewound", "1 while the star is halted because its metastore is behind the object store (restored from backup, or failed over to a replica that lost commits): auditor reconcile --apply lifts it."),
		Paused:             g("paused", "1 while an operator has paused the star."),
		StartCheckWarnings: gv("start_check_warning", "1 for each check of serve's start-up checks (auditor doctor's) that warned, by scope (postgres or the bucket) and check.", "scope", "check"),

		Cycles:        cv("cycles_total", "Cycles run, by trigger and outcome.", "trigger", "outcome"),
		CyclesSkipped: c("cycles_skipped_total", "Scheduled cycles skipped because one was still running."),
		CycleRetries:  c("cycle_retries_total", "Failed cycles retried early with backoff."),
		CycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "cycle_duration_seconds",
			Help:    "Duration of cycles.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}}),
		StepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "step_duration_seconds",
			Help:    "Duration of the steps of a cycle (rewind, settle, retention, erase, sidecars, strays, trim, reap), failed ones included.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}}, []string{"step"}),
		LastSuccess:     g("last_successful_cycle_timestamp_seconds", "End of the last successful cycle of the star (Unix seconds, database clock)."),
		AdminRequests:   cv("admin_requests_total", "Operator requests consumed by this instance, by kind.", "kind"),
		PGTransactions:  cv("pg_transactions_total", "Metastore transactions of the daemon (lease, ledger, admin), by outcome.", "outcome"),
		StatusRefreshes: cv("status_refreshes_total", "Refreshes of the metastore gauges, by outcome.", "outcome"),
		StatusRefreshed: g("status_refresh_timestamp_seconds",
			"When the metastore gauges were last refreshed successfully (Unix seconds): they are stale when it falls behind."),

		DueStreams:       gv("due_streams", "Streams past their linger and not quarantined.", "class"),
		SettleLag:        gv("settle_lag_seconds", "How long the most overdue due stream has waited past its linger.", "class"),
		OldestTransitAge: gv("oldest_transit_age_seconds", "Age of the oldest unsettled span ref.", "class"),
		AgeCap:           gv("age_cap_seconds", "The configured age cap (for headroom: age_cap - oldest_transit_age).", "class"),
		AgeCapBreached:   gv("age_cap_breached_streams", "Streams with data older than the age cap of their class.", "class"),
		UnsettledRecords: gv("unsettled_records", "Records held in transit by span refs not yet settled (the metastore has no byte sizes of refs).", "class"),
		Quarantined:      g("quarantined", "Quarantined streams and slots of the star."),
		OpenIntents:      gv("open_intents", "Open orphan intents, by kind (publish, reap).", "kind"),
		ReapObjects: gv("reap_backlog_objects",
			"Object reaps not yet done, by state (due, waiting for the grace); trim exports reap_backlog_slots.", "state"),
		TrimCursorEpoch: g("trim_cursor_epoch", "Epoch of the first slot trim has not released."),
		TrimCursorSeq:   g("trim_cursor_seq", "Seq of the first slot trim has not released."),
		TrimReleasable:  g("trim_releasable_slots", "Slots between the trim cursor and the trim bound: what the next trim releases."),
		TrimLag:         g("trim_lag_slots", "Slots between the trim cursor and the absorbed head: transit not yet released (an epoch whose fence is in progress counts nothing)."),
		HeadEpoch:       g("absorbed_head_epoch", "The star's current writer epoch."),
		HeadSeq:         g("absorbed_head_seq", "The star's absorbed head seq (next_seq)."),

		DeferredStreams: gv("deferred_streams",
			"Streams past their linger that the tail-growth rule (--denorm-tail-growth) holds back: their standing tail is below the rule's floor (the copy floor, or the output cap where copies are read back) and their unsettled bytes have not grown enough, or they have and wait for their cohort's turn (--denorm-tail-cohorts); they still hold their transit slots.", "class"),
		DeferredTransitBytes: gv("deferred_transit_bytes",
			"Bytes the deferred streams hold in transit slots, estimated as their unsettled records times their tails' bytes per record (the metastore has no byte sizes of refs).", "class"),
		DeferredDeadline: gv("deferred_oldest_deadline_timestamp_seconds",
			"The earliest age-cap deadline (since + age cap, Unix seconds, database clock) among the deferred streams; 0 when none waits. They become due a margin before it (max(linger, age cap / 4)).", "class"),

		ErasuresPending: g("erasures_pending", "Erasures recorded and not yet applied (applied_at null)."),
		ErasuresQuarantined: g("erasures_pending_quarantined",
			"Pending erasures of quarantined streams: no rewrite runs on them until auditor release."),
		ErasureOldestAge: g("erasure_oldest_pending_age_seconds",
			"Age of the oldest pending erasure (database clock); 0 when none is pending."),
		ErasureBound: g("erasure_pending_bound_seconds",
			"The configured --erasure-alert-after: NovaAuditorErasurePending fires when the oldest pending erasure is older."),
		RecordsTombstoned: c("records_tombstoned_total", "Records replaced by tombstones, by settle or by an erasure rewrite."),
		ObjectsRewritten:  c("objects_rewritten_total", "Settled objects rewritten at a higher revision by the erasure step."),
		ErasuresApplied:   c("erasures_applied_total", "Erasures applied (applied_at set: no settled object holds their bytes)."),
		ErasureRewriteBytes: cv("erasure_rewrite_bytes_total",
			"Bytes of the erasure step's rewrites, by kind: copied server side, fetched and uploaded through the auditor.", "kind"),
		ErasureTransitWindow: g("erasure_transit_window_seconds",
			"An erasure applied less than this long ago may still have copies of its records in transit slots, until trim reaps them: age cap + reap grace + two cycle intervals, or the age of the oldest transit data still referenced when that is longer (a quarantine or a breached age cap holds trim back)."),
		ErasuresInTransit: g("erasures_applied_in_transit_window",
			"Erasures applied within erasure_transit_window_seconds, as the run ledger counts them: their records may still have copies in transit slots."),
	}
	var errs []error
	for _, col := range []prometheus.Collector{m.BuildInfo, m.Leader, m.LeaseToken, m.LeaseAcquisitions, m.LeaseLosses,
		m.Halted, m.Rewound, m.Paused, m.StartCheckWarnings, m.Cycles, m.CyclesSkipped, m.CycleRetries, m.CycleDuration, m.StepDuration, m.LastSuccess,
		m.AdminRequests, m.PGTransactions, m.StatusRefreshes, m.StatusRefreshed, m.DueStreams, m.SettleLag,
		m.OldestTransitAge, m.AgeCap, m.AgeCapBreached, m.UnsettledRecords,
		m.DeferredStreams, m.DeferredTransitBytes, m.DeferredDeadline, m.Quarantined, m.OpenIntents, m.ReapObjects,
		m.TrimCursorEpoch, m.TrimCursorSeq, m.TrimReleasable, m.TrimLag, m.HeadEpoch, m.HeadSeq,
		m.ErasuresPending, m.ErasuresQuarantined, m.ErasureOldestAge, m.ErasureBound, m.RecordsTombstoned,
		m.ObjectsRewritten, m.ErasuresApplied, m.ErasureRewriteBytes, m.ErasureTransitWindow, m.ErasuresInTransit} {
		errs = append(errs, reg.Register(col))
	}
	guard, err := newGuardMetrics(reg)
	errs = append(errs, err)
	m.Guard = guard
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("daemon metrics: %w", err)
	}
	if version == "" {
		version = "dev"
	}
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	// Every label value that can appear is present from the start, so
	// absent() and rate() work before the first event. The class gauges
	// appear with the star's class (setClass), the steps with the daemon.
	for _, k := range []string{"publish", "reap"} {
		m.OpenIntents.WithLabelValues(k)
	}
	for _, k := range []string{"due", "waiting"} {
		m.ReapObjects.WithLabelValues(k)
	}
	for _, k := range []string{"copied", "fetched", "uploaded"} {
		m.ErasureRewriteBytes.WithLabelValues(k)
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
	for _, tr := range []string{TriggerSchedule, TriggerManual, TriggerStream, TriggerOnce, TriggerRetry} {
		for _, o := range []string{catalog.RunOK, catalog.RunFailed, catalog.RunHalted, catalog.RunCanceled, catalog.RunLostLease} {
			m.Cycles.WithLabelValues(tr, o)
		}
	}
	return m, nil
}

// EraseStep is the name of the erasure step (cycle.Step.Name): the
// rewrite bytes it counts are exported as erasure_rewrite_bytes_total.
const EraseStep = "erase"

// countStep adds what one step of a cycle counted to the counters that
// follow the cycles' counts.
func (m *Metrics) countStep(step string, c cycle.Counts) {
	m.RecordsTombstoned.Add(float64(c.RecordsTombstoned))
	m.ObjectsRewritten.Add(float64(c.ObjectsRewritten))
	m.ErasuresApplied.Add(float64(c.ErasuresApplied))
	if step == EraseStep {
		m.ErasureRewriteBytes.WithLabelValues("copied").Add(float64(c.BytesCopied))
		m.ErasureRewriteBytes.WithLabelValues("fetched").Add(float64(c.BytesFetched))
		m.ErasureRewriteBytes.WithLabelValues("uploaded").Add(float64(c.BytesUploaded))
	}
}

// classVecs are the gauges with a class label.
func (m *Metrics) classVecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.DueStreams, m.SettleLag, m.OldestTransitAge, m.AgeCap, m.AgeCapBreached, m.UnsettledRecords,
		m.DeferredStreams, m.DeferredTransitBytes, m.DeferredDeadline}
}

// setClass makes the class gauges report class only: a star's chain holds
// one class, and a series for the other would be a constant phantom.
func (m *Metrics) setClass(class string, p catalog.DuePolicy) {
	for _, other := range catalog.Classes() {
		if other == class {
			continue
		}
		for _, v := range m.classVecs() {
			v.DeleteLabelValues(other)
		}
	}
	for _, v := range m.classVecs() {
		v.WithLabelValues(class)
	}
	m.AgeCap.WithLabelValues(class).Set(p.AgeCapOf(class).Seconds())
}

// NewPoolCollector reports the metastore connection pool of stats (Postgres
// pool statistics): connections by state, the configured maximum, and the
// cumulative acquires, waits for a connection and time spent waiting.
func NewPoolCollector(stats func() catalog.PoolStats) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("nova_auditor_pg_pool_"+name, help, labels, nil)
	}
	return &poolCollector{stats: stats,
		conns:     d("connections", "Connections of the metastore pool, by state (idle, acquired, constructing).", "state"),
		max:       d("max_connections", "The pool's maximum number of connections."),
		acquires:  d("acquires_total", "Connections acquired from the pool."),
		empty:     d("empty_acquires_total", "Acquires that had to wait because no idle connection was there."),
		canceled:  d("canceled_acquires_total", "Acquires canceled (their context ended) while waiting."),
		wait:      d("acquire_wait_seconds_total", "Time spent acquiring connections."),
		newConns:  d("new_connections_total", "Connections opened by the pool."),
		destroyed: d("destroyed_connections_total", "Connections closed by the pool, by reason (lifetime, idle).", "reason"),
	}
}

type poolCollector struct {
	stats                                                            func() catalog.PoolStats
	conns, max, acquires, empty, canceled, wait, newConns, destroyed *prometheus.Desc
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.max, c.acquires, c.empty, c.canceled, c.wait, c.newConns, c.destroyed} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	n := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	g(c.conns, float64(s.Idle), "idle")
	g(c.conns, float64(s.Acquired), "acquired")
	g(c.conns, float64(s.Constructing), "constructing")
	g(c.max, float64(s.Max))
	n(c.acquires, float64(s.Acquires))
	n(c.empty, float64(s.EmptyAcquires))
	n(c.canceled, float64(s.CanceledAcquires))
	n(c.wait, s.AcquireWait.Seconds())
	n(c.newConns, float64(s.NewConns))
	n(c.destroyed, float64(s.MaxLifetimeDestroys), "lifetime")
	n(c.destroyed, float64(s.IdleDestroys), "idle")
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

// FaultPointKinds are the kinds of fault-injection point a process can
// arm (internal/crashpoint): crash, pause and stall.
var FaultPointKinds = []string{"crash", "pause", "stall"}

// RegisterFaultPoints exports nova_auditor_fault_points_armed{kind}: per
// kind of fault-injection point, how many the environment armed in this
// process (0 or 1: one variable each), every kind present from the start
// at 0. It is the process's, not a star's: a single-star serve and a fleet
// member register it once into the process's registry. Anything but 0 in
// production is a mistake (the process will kill, stop or block itself).
func RegisterFaultPoints(reg prometheus.Registerer, armed []crashpoint.Armed) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nova_auditor", Name: "fault_points_armed",
		Help: "Fault-injection points (crash, pause, stall: for tests only) armed in this process by NOVA_AUDITOR_CRASHPOINT, _PAUSEPOINT and _STALLPOINT, by kind; 0 in production."}, []string{"kind"})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("daemon metrics: %w", err)
	}
	for _, k := range FaultPointKinds {
		g.WithLabelValues(k)
	}
	for _, a := range armed {
		g.WithLabelValues(a.Kind).Inc()
	}
	return nil
}
