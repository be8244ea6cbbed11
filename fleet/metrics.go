package fleet

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the fleet member's series (docs/architecture.md#the-fleet),
// registered once per process, not per star: the per-star series of the
// stars it leads (labelled star) come from their own registries. The
// fleet-wide figures (members, imbalance, unowned stars) are this member's
// reading of the metastore: every member exports them, aggregate with max.
type Metrics struct {
	Members    prometheus.Gauge // live members that are not draining
	Stars      prometheus.Gauge // stars the member's --stars selects
	Owned      prometheus.Gauge // stars this member leads
	Cap        prometheus.Gauge // ceil(stars / members)
	Imbalance  prometheus.Gauge // most minus fewest stars owned over live members
	Draining   prometheus.Gauge
	Unowned    *prometheus.GaugeVec   // star: seconds without a live owner (0 when owned)
	Progress   *prometheus.GaugeVec   // star: seconds since the star's cycle loop last made progress (stars led here)
	Moves      *prometheus.CounterVec // reason: stars this member claimed, by why they left their last owner
	Releases   *prometheus.CounterVec // reason: stars this member gave up (drain, balance, stuck)
	MoveBudget prometheus.Gauge       // balance moves allowed fleet-wide per budget window
	Ticks      *prometheus.CounterVec // outcome: ok, error
	CycleWaits prometheus.Counter     // cycles that waited for one of the process's cycle slots
	CycleSlots prometheus.Gauge       // --fleet-cycles
	CyclesHeld prometheus.Gauge       // cycle slots in use
	MaxConns   prometheus.Gauge       // --fleet-max-conns (or its default)
	// ConnsRefused counts the connections the server refused the member
	// (too many connections); Starved is 1 while it claims nothing for it.
	ConnsRefused prometheus.Counter
	Starved      prometheus.Gauge
}

// NewMetrics registers the fleet's series.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "nova_auditor_fleet_" + name, Help: help})
	}
	m := &Metrics{
		Members:   g("members", "Live fleet members that are not draining, as this member last read them."),
		Stars:     g("stars", "Stars this member's --stars selects."),
		Owned:     g("stars_owned", "Stars this member leads."),
		Cap:       g("cap", "Most stars a member claims without the liveness rule: ceil(stars / members)."),
		Imbalance: g("imbalance", "Most minus fewest stars led by a live member, as this member last read them (1 is balanced)."),
		Draining:  g("draining", "1 while this member hands its stars off before exiting."),
		Unowned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nova_auditor_fleet_star_unowned_seconds",
			Help: "Seconds the star has had no live owner (0 when led), as this member last read it."}, []string{"star"}),
		Progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nova_auditor_fleet_star_progress_age_seconds",
			Help: "Seconds since the cycle loop of a star this member leads last made progress."}, []string{"star"}),
		Moves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nova_auditor_fleet_moves_total",
			Help: "Stars this member claimed, by why they left their last owner (new, released, drain, balance, stuck, lost)."}, []string{"reason"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nova_auditor_fleet_releases_total",
			Help: "Stars this member gave up, by reason: drain, stuck; for balance: balance (within --fleet-move-budget), home (to the member that drained it) and spread (by a member above its cap), the last two outside the budget."}, []string{"reason"}),
		MoveBudget: g("move_budget", "Balance moves allowed fleet-wide per budget window (--fleet-move-budget)."),
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nova_auditor_fleet_ticks_total",
			Help: "Rounds of the member's loop (heartbeat, renewal, claims, balance), by outcome."}, []string{"outcome"}),
		CycleWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "nova_auditor_fleet_cycle_waits_total",
			Help: "Cycles that waited for one of the process's cycle slots (--fleet-cycles)."}),
		CycleSlots: g("cycle_slots", "Cycles the process runs at once, over all its stars (--fleet-cycles)."),
		CyclesHeld: g("cycle_slots_used", "Cycle slots in use."),
		MaxConns:   g("max_conns", "Postgres connections the member opens at most (--fleet-max-conns, or its default from --fleet-cycles)."),
		ConnsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "nova_auditor_fleet_conns_refused_total",
			Help: "Connections the Postgres server refused the member for its connection limit (SQLSTATE 53300)."}),
		Starved: g("conns_starved", "1 while the member claims nothing new because the server refused it connections lately."),
	}
	for _, r := range []string{"new", "released", "drain", "balance", "stuck", "lost"} {
		m.Moves.WithLabelValues(r)
	}
	for _, r := range []string{"drain", "balance", "home", "spread", "stuck"} {
		m.Releases.WithLabelValues(r)
	}
	for _, o := range []string{"ok", "error"} {
		m.Ticks.WithLabelValues(o)
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.Members, m.Stars, m.Owned, m.Cap, m.Imbalance, m.Draining, m.Unowned,
		m.Progress, m.Moves, m.Releases, m.MoveBudget, m.Ticks, m.CycleWaits, m.CycleSlots, m.CyclesHeld,
		m.MaxConns, m.ConnsRefused, m.Starved} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
