package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/migrations"
	"github.com/nova/auditor/objstore"
)

// The guard decides whether the leader may work at all, apart from the
// operator's pause and the persisted halt: not while the database's schema
// is newer than this binary (an old binary must not write a schema it does
// not know), and not while a bucket's lifecycle configuration has an
// expiration rule that can reach the auditor's keys (a settle stalled past
// the expiry would lose data the catalog still references). Both block
// work like a halt but clear themselves: the schema check runs with
// the gauge refresh (every GaugeInterval and after each cycle) and before
// each cycle that runs its steps, the bucket rules at start and every RulesInterval (every
// minute while they block).
//
// The bucket rules also say whether a DELETE removes the bytes: versioning
// (enabled or suspended) or Object Lock keeps them. That blocks no work,
// but no erasure may be marked applied then (docs/architecture.md#erasure):
// the erase step asks (cycle.Options.ErasureHold), and the daemon answers
// from a fresh read of the rules (erasureHold).

// BucketRulesReader is what the guard needs of the object store:
// s3store.Store and filestore.Store have it.
type BucketRulesReader interface {
	BucketRules(ctx context.Context, bucket string) (objstore.BucketRules, error)
}

// Reasons of nova_auditor_work_blocked.
const (
	BlockSchema      = "schema"
	BlockBucketRules = "bucket_rules"
)

// GuardMetrics are the guard's series.
type GuardMetrics struct {
	WorkBlocked   *prometheus.GaugeVec // reason
	ExpiringRules *prometheus.GaugeVec // bucket
	KeepsDeleted  *prometheus.GaugeVec // bucket, check
	SetupMissing  *prometheus.GaugeVec // bucket, check
	SetupUnknown  *prometheus.GaugeVec // bucket, check
	RulesChecked  prometheus.Gauge
}

// Checks of nova_auditor_bucket_setup_missing, _unknown and
// _keeps_deleted.
const (
	checkLifecycle       = "lifecycle"
	checkAbortIncomplete = "abort_incomplete_multipart"
	checkEncryption      = "default_encryption"
	checkVersioning      = "versioning"
	checkObjectLock      = "object_lock"
)

func newGuardMetrics(reg prometheus.Registerer) (*GuardMetrics, error) {
	const ns = "nova_auditor"
	m := &GuardMetrics{
		WorkBlocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "work_blocked",
			Help: "1 while this instance refuses to run cycles, by reason: schema (the database is newer than the binary), bucket_rules (an expiration rule can reach the auditor's keys)."}, []string{"reason"}),
		ExpiringRules: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "bucket_expiration_rules",
			Help: "Enabled lifecycle expiration rules of the bucket that can reach the auditor's keys (more than 0 stops all work)."}, []string{"bucket"}),
		KeepsDeleted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "bucket_keeps_deleted",
			Help: "1 when a DELETE on the bucket leaves the bytes (check: versioning, enabled or suspended; object_lock, a configuration): no erasure is marked applied while any is 1."}, []string{"bucket", "check"}),
		SetupMissing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "bucket_setup_missing",
			Help: "1 when the bucket lacks a part of the required setup (check: abort_incomplete_multipart, default_encryption)."}, []string{"bucket", "check"}),
		SetupUnknown: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "bucket_setup_unknown",
			Help: "1 when the server does not say (check: lifecycle, default_encryption, versioning, object_lock): not implemented, not permitted, or the file backend."}, []string{"bucket", "check"}),
		RulesChecked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "bucket_rules_checked_timestamp_seconds",
			Help: "When the bucket rules were last read successfully (Unix seconds)."}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.WorkBlocked, m.ExpiringRules, m.KeepsDeleted, m.SetupMissing, m.SetupUnknown, m.RulesChecked} {
		errs = append(errs, reg.Register(c))
	}
	for _, r := range []string{BlockSchema, BlockBucketRules} {
		m.WorkBlocked.WithLabelValues(r)
	}
	return m, errors.Join(errs...)
}

// guard holds what the checks found.
type guard struct {
	mu       sync.Mutex
	schema   string                           // why the schema blocks ("" when it does not)
	verdicts map[string]objstore.RulesVerdict // by bucket, the last successful read
	checked  map[string]time.Time             // by bucket
}

func newGuard() *guard {
	return &guard{verdicts: map[string]objstore.RulesVerdict{}, checked: map[string]time.Time{}}
}

// reason is why no cycle may run, "" when one may.
func (g *guard) reason() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.schema != "" {
		return g.schema
	}
	return g.rulesReasonLocked()
}

func (g *guard) schemaBlocked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.schema != ""
}

func (g *guard) rulesReasonLocked() string {
	var rules []string
	for _, b := range sortedKeys(g.verdicts) {
		for _, r := range g.verdicts[b].Expiring {
			rules = append(rules, fmt.Sprintf("bucket %s: lifecycle %s", b, r))
		}
	}
	if len(rules) == 0 {
		return ""
	}
	return "an expiration rule can delete the auditor's data (" + strings.Join(rules, "; ") +
		"); remove it: the bucket may hold exactly one rule, AbortIncompleteMultipartUpload"
}

// erasureHoldReason is why no erasure may be marked applied ("" when
// they may): a bucket whose rules could not be read (failed), or whose
// verdict says a DELETE leaves the bytes. An unknown answer (the server
// does not implement or refuses the versioning read) holds nothing: it is
// reported (bucket_setup_unknown, status) as the other unknowns are.
func erasureHoldReason(buckets []string, verdicts map[string]objstore.RulesVerdict, failed map[string]error) string {
	var why []string
	for _, b := range buckets {
		if err, ok := failed[b]; ok {
			why = append(why, fmt.Sprintf("bucket %s: its rules could not be read (%v)", b, err))
			continue
		}
		if v, ok := verdicts[b]; ok && v.KeepsDeleted() == objstore.VerdictYes {
			why = append(why, fmt.Sprintf("bucket %s: %s: a DELETE leaves the bytes", b, v.KeepsDeletedWhy()))
		}
	}
	return strings.Join(why, "; ")
}

// readRules reads and judges the rules of each bucket; a bucket whose read
// failed is in failed, not in verdicts. A nil reader says nothing of any
// bucket (all unknown).
func readRules(ctx context.Context, r BucketRulesReader, buckets, prefixes []string) (map[string]objstore.RulesVerdict, map[string]error) {
	verdicts, failed := map[string]objstore.RulesVerdict{}, map[string]error{}
	for _, b := range buckets {
		rules := objstore.UnknownRules(b, "the store has no bucket rules")
		if r != nil {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			var err error
			rules, err = r.BucketRules(cctx, b)
			cancel()
			if err != nil {
				failed[b] = err
				continue
			}
		}
		verdicts[b] = rules.Judge(prefixes)
	}
	return verdicts, failed
}

// document is the JSON recorded for status: the verdict of every bucket.
func (g *guard) document() json.RawMessage {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]BucketStatus, 0, len(g.verdicts))
	for _, b := range sortedKeys(g.verdicts) {
		out = append(out, BucketStatus{RulesVerdict: g.verdicts[b], CheckedAt: g.checked[b]})
	}
	doc, _ := json.Marshal(out) // plain data: cannot fail
	return doc
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// waitForDatabase waits, with backoff, until the database answers at this
// binary's schema: an outage at start is waited out (not ready meanwhile,
// /healthz up), not a crash loop. A schema behind or ahead of the binary,
// or a database refusing the URL, is returned: waiting cannot fix those.
// It returns nil when ctx ends first.
func (d *Daemon) waitForDatabase(ctx context.Context) error {
	wait := time.Second
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.db.CheckSchema(cctx)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				d.log.Info("the database answers", "attempts", attempt)
			}
			return nil
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, migrations.ErrDatabaseNewer), errors.Is(err, migrations.ErrDatabaseBehind):
			return err
		case catalog.IsRefused(err):
			return fmt.Errorf("%w: %w", catalog.ErrRefused, err)
		}
		d.log.Warn("the database is unreachable; waiting for it (not ready meanwhile)", "in", wait, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, d.cfg.DBRetryMax)
	}
}

// startGuard runs the first checks (before any cycle can start), then
// guardLoop until ctx ends.
func (d *Daemon) startGuard(ctx context.Context, wg *sync.WaitGroup) {
	d.checkSchema(ctx)
	rulesDue := time.Now().Add(d.rulesWait(len(d.checkRules(ctx)) == 0))
	wg.Go(func() { d.guardLoop(ctx, rulesDue) })
}

// rulesWait is the time to the next check of the bucket rules.
func (d *Daemon) rulesWait(readOK bool) time.Duration {
	if !readOK || d.guardRulesBlock() {
		return min(d.cfg.RulesInterval, time.Minute) // a failed read, or a block to lift soon
	}
	return d.cfg.RulesInterval
}

// guardLoop runs the checks until ctx ends.
func (d *Daemon) guardLoop(ctx context.Context, rulesDue time.Time) {
	tick := time.NewTicker(d.cfg.GaugeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// The schema is checked with the gauges (readGauges), in their snapshot.
		if !time.Now().Before(rulesDue) {
			rulesDue = time.Now().Add(d.rulesWait(len(d.checkRules(ctx)) == 0))
		}
	}
}

func (d *Daemon) guardRulesBlock() bool {
	d.guard.mu.Lock()
	defer d.guard.mu.Unlock()
	return d.guard.rulesReasonLocked() != ""
}

// checkSchema blocks work while the database's schema is newer than the
// binary. Other failures (an outage) change nothing: the cycle's own
// transactions fail then.
func (d *Daemon) checkSchema(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := d.db.CheckSchema(cctx)
	cancel()
	if ctx.Err() != nil || (err != nil && !errors.Is(err, migrations.ErrDatabaseNewer) && !errors.Is(err, migrations.ErrDatabaseBehind)) {
		return
	}
	reason := ""
	if err != nil {
		reason = "database schema: " + err.Error() + "; this binary stops working (upgrade it: migrate first, then roll out)"
	}
	d.guard.mu.Lock()
	was := d.guard.schema
	d.guard.schema = reason
	d.guard.mu.Unlock()
	d.m.Guard.WorkBlocked.WithLabelValues(BlockSchema).Set(b2f(reason != ""))
	switch {
	case reason != "" && was == "":
		d.log.Error("no more cycles: the database schema is not this binary's", "err", err)
		d.signal()
	case reason == "" && was != "":
		d.log.Info("the database schema is this binary's again")
		d.signal()
	}
}

// erasureHold is cycle.Options.ErasureHold of the daemon's cycles: it
// reads every bucket's rules afresh (the deletes that matter were made by
// earlier cycles, and versioning once enabled never goes back to never
// enabled, so a read now covers them) and says why no erasure may be
// marked applied, "" when they may.
func (d *Daemon) erasureHold(ctx context.Context) string {
	failed := d.checkRules(ctx)
	d.guard.mu.Lock()
	defer d.guard.mu.Unlock()
	return erasureHoldReason(d.cfg.Buckets, d.guard.verdicts, failed)
}

// checkRules reads every bucket's rules. It returns the buckets whose
// read failed (each keeps its last verdict). Checks do not overlap: the
// guard's schedule and the erase step's hold may ask at once.
func (d *Daemon) checkRules(ctx context.Context) map[string]error {
	if len(d.cfg.Buckets) == 0 {
		return nil
	}
	d.rulesMu.Lock()
	defer d.rulesMu.Unlock()
	m := d.m.Guard
	before := d.guardRulesBlock()
	verdicts, failed := readRules(ctx, d.r.deps.Rules, d.cfg.Buckets, d.cfg.KeyPrefixes)
	for _, b := range d.cfg.Buckets {
		if err, ok := failed[b]; ok {
			if ctx.Err() == nil {
				d.log.Warn("reading the bucket rules failed; retrying in a minute", "bucket", b, "err", err)
			}
			continue
		}
		v := verdicts[b]
		d.guard.mu.Lock()
		prev, seen := d.guard.verdicts[b]
		d.guard.verdicts[b] = v
		d.guard.checked[b] = time.Now()
		d.guard.mu.Unlock()
		m.ExpiringRules.WithLabelValues(b).Set(float64(len(v.Expiring)))
		m.KeepsDeleted.WithLabelValues(b, checkVersioning).Set(b2f(v.Versioned()))
		m.KeepsDeleted.WithLabelValues(b, checkObjectLock).Set(b2f(v.ObjectLock == objstore.VerdictYes))
		m.SetupMissing.WithLabelValues(b, checkAbortIncomplete).Set(b2f(v.AbortIncomplete == objstore.VerdictNo))
		m.SetupMissing.WithLabelValues(b, checkEncryption).Set(b2f(v.Encryption == objstore.VerdictNo))
		m.SetupUnknown.WithLabelValues(b, checkLifecycle).Set(b2f(v.AbortIncomplete == objstore.VerdictUnknown))
		m.SetupUnknown.WithLabelValues(b, checkEncryption).Set(b2f(v.Encryption == objstore.VerdictUnknown))
		m.SetupUnknown.WithLabelValues(b, checkVersioning).Set(b2f(v.Versioning == objstore.VerdictUnknown))
		m.SetupUnknown.WithLabelValues(b, checkObjectLock).Set(b2f(v.ObjectLock == objstore.VerdictUnknown))
		if keeps := v.KeepsDeleted(); !seen || prev.KeepsDeleted() != keeps || prev.KeepsDeletedWhy() != v.KeepsDeletedWhy() {
			switch keeps {
			case objstore.VerdictYes:
				d.log.Error("the bucket keeps what a DELETE removes: no erasure is marked applied while it does", "bucket", b,
					"why", v.KeepsDeletedWhy())
			case objstore.VerdictUnknown:
				d.log.Warn("the server does not say whether a DELETE on the bucket removes the bytes (versioning unknown); erasures are marked applied all the same",
					"bucket", b, "note", v.Note)
			}
		}
		if !seen || prev.AbortIncomplete != v.AbortIncomplete || prev.Encryption != v.Encryption {
			switch {
			case v.AbortIncomplete == objstore.VerdictNo || v.Encryption == objstore.VerdictNo:
				d.log.Warn("the bucket lacks part of the required setup", "bucket", b,
					"abort_incomplete_multipart", v.AbortIncomplete, "default_encryption", v.Encryption)
			case v.AbortIncomplete == objstore.VerdictUnknown || v.Encryption == objstore.VerdictUnknown:
				d.log.Info("the server does not say all of the bucket's rules", "bucket", b,
					"abort_incomplete_multipart", v.AbortIncomplete, "default_encryption", v.Encryption, "note", v.Note)
			}
		}
	}
	m.RulesChecked.SetToCurrentTime()
	after := d.guardRulesBlock()
	m.WorkBlocked.WithLabelValues(BlockBucketRules).Set(b2f(after))
	switch {
	case after && !before:
		d.log.Error("no more cycles: "+d.guardReasonRules(), "buckets", d.cfg.Buckets)
		d.signal()
	case !after && before:
		d.log.Info("the bucket rules allow work again")
		d.signal()
	}
	d.recordRules(ctx)
	return failed
}

func (d *Daemon) guardReasonRules() string {
	d.guard.mu.Lock()
	defer d.guard.mu.Unlock()
	return d.guard.rulesReasonLocked()
}

// recordRules writes the verdicts for status, when this instance leads.
func (d *Daemon) recordRules(ctx context.Context) {
	f := d.fence.Load()
	if f == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := d.db.RecordBucketRules(cctx, *f, d.guard.document(), d.guard.reason())
	d.m.tx(err)
	if err != nil && ctx.Err() == nil && !errors.Is(err, catalog.ErrStaleToken) {
		d.log.Warn("recording the bucket rules failed", "err", err)
	}
}

// recordRuntime writes what this leader runs with, and its last verdicts,
// when it takes the lease.
func (d *Daemon) recordRuntime(t *term) {
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	err := d.db.RecordRuntime(ctx, t.lease.Fence, d.cfg.Version, d.cfg.Policy, d.cfg.ReapGrace)
	d.m.tx(err)
	if err != nil {
		d.log.Warn("recording the runtime failed", "err", err)
		return
	}
	f := t.lease.Fence
	d.fence.Store(&f)
	d.recordRules(t.ctx)
}
