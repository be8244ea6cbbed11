package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/migrations"
	"github.com/nova/auditor/objstore"
)

// The checks of `auditor doctor` (docs/operations.md#operator-surface):
// each asks the metastore or one bucket one question the auditor depends
// on and records what it saw and what to change. They only read the
// metastore; in a bucket they write only under one probe prefix, which
// they remove. Every S3 call is made through objstore.

// Check states, worst last.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

// checkRow is one line of the doctor's table.
type checkRow struct {
	Status string `json:"status"`
	// Scope is "postgres" or the bucket checked.
	Scope string `json:"scope"`
	Check string `json:"check"`
	Seen  string `json:"seen"`
	Do    string `json:"do,omitempty"`
}

// doctorMetastore is what the Postgres checks read.
type doctorMetastore interface {
	CheckSchema(ctx context.Context) error
	StarExists(ctx context.Context, star string) (bool, error)
	CurrentLease(ctx context.Context, star string) (catalog.Lease, bool, error)
	Now(ctx context.Context) (time.Time, error)
	PoolStats() catalog.PoolStats
}

// checkPostgres checks a metastore that answered: its schema against the
// binary, the star, who holds the star's lease, its clock against ours,
// and its pool against the settle concurrency.
func checkPostgres(ctx context.Context, db doctorMetastore, star string, settleConcurrency int64) []checkRow {
	row := func(status, check, seen, do string) checkRow {
		return checkRow{Status: status, Scope: "postgres", Check: check, Seen: seen, Do: do}
	}
	rows := []checkRow{}
	// The binary's own start-up check (migrations.Check), not a second one.
	switch err := db.CheckSchema(ctx); {
	case errors.Is(err, migrations.ErrDatabaseBehind):
		rows = append(rows, row(statusFail, "schema version", err.Error(), "run auditor migrate"))
	case errors.Is(err, migrations.ErrDatabaseNewer):
		rows = append(rows, row(statusFail, "schema version", err.Error(), "deploy a binary of the database's schema version or newer"))
	case err != nil:
		rows = append(rows, row(statusFail, "schema version", err.Error(), "check the database URL's role can read nova.schema_migrations"))
	default:
		rows = append(rows, row(statusOK, "schema version", fmt.Sprintf("%d, the binary's", migrations.Latest()), ""))
	}
	ok, err := db.StarExists(ctx, star)
	switch {
	case err != nil:
		rows = append(rows, row(statusFail, "star", err.Error(), "migrate the database (auditor migrate), then check --star"))
		return rows
	case !ok:
		rows = append(rows, row(statusFail, "star", fmt.Sprintf("no star %q in nova.stars", star), "check --star, or create the star with the write path (novasim setup)"))
		return rows
	}
	rows = append(rows, row(statusOK, "star", fmt.Sprintf("%q exists", star), ""))
	rows = append(rows, leaseRow(ctx, db, star), databaseClockRow(ctx, db), poolRow(db.PoolStats().Max, settleConcurrency))
	return rows
}

// Clock skew bounds. The Date header S3 answers with is to the second, so
// skew within clockSkewWarn is noise. SigV4 refuses requests beyond 15
// minutes of skew and S3 Express session credentials live 5 minutes:
// clockSkewFail stays well inside both.
const (
	clockSkewWarn = 30 * time.Second
	clockSkewFail = 5 * time.Minute
)

// databaseClockRow compares the database's clock with this host's. Leases,
// fences and graces go by the database's clock alone, so skew breaks no
// rule; it misleads the schedule and what the logs say of ages.
func databaseClockRow(ctx context.Context, db doctorMetastore) checkRow {
	r := checkRow{Status: statusOK, Scope: "postgres", Check: "clock skew"}
	before := time.Now()
	now, err := db.Now(ctx)
	after := time.Now()
	if err != nil {
		r.Status, r.Seen, r.Do = statusFail, err.Error(), "check the database answers"
		return r
	}
	skew := now.Sub(before.Add(after.Sub(before) / 2))
	r.Seen = skewText("the database's", skew, time.Millisecond)
	if skew.Abs() > clockSkewWarn {
		r.Status, r.Do = statusWarn, "synchronise both clocks (NTP): leases go by the database's, the schedule and logs by this host's"
	}
	return r
}

// skewText says how far whose clock is off this host's, to unit.
func skewText(whose string, skew, unit time.Duration) string {
	d := skew.Round(unit)
	switch {
	case d == 0:
		return fmt.Sprintf("%s clock agrees with this host's (to %s)", whose, unit)
	case d < 0:
		return fmt.Sprintf("%s clock is %s behind this host's", whose, -d)
	}
	return fmt.Sprintf("%s clock is %s ahead of this host's", whose, d)
}

// poolRow judges the pool's size against the settle concurrency: each
// settle worker holds one connection at a time, beside the daemon's own
// (catalog.ReservedConns). Short of those, workers and the lease renewal
// queue for connections; with no more than the reserve, settle has none.
func poolRow(max int32, settleConcurrency int64) checkRow {
	r := checkRow{Status: statusOK, Scope: "postgres", Check: "pool size"}
	need := settleConcurrency + catalog.ReservedConns
	r.Seen = fmt.Sprintf("pool_max_conns %d for --settle-concurrency %d and %d of the daemon's own", max, settleConcurrency, catalog.ReservedConns)
	switch {
	case int64(max) <= catalog.ReservedConns:
		r.Status, r.Do = statusFail, fmt.Sprintf("raise pool_max_conns in --database-url to %d or more (or leave it out: %d)", need, catalog.DefaultMaxConns)
	case int64(max) < need:
		r.Status, r.Do = statusWarn, fmt.Sprintf("raise pool_max_conns in --database-url to %d, or lower --settle-concurrency to %d", need, int64(max)-catalog.ReservedConns)
	}
	return r
}

// connectionsRow judges members processes of bound connections each (a
// fleet's members at --fleet-max-conns, or one serve at its pool) against
// what the server lets ordinary roles connect (max_connections less the
// superusers' reserve): usable. Past usable they fail: at their bound
// the server refuses them, and the write path with them, whatever else
// is connected. Past half of usable they warn: the rest is the write
// path's and the operators' (deploy/README.md, "Connections"). Past what
// the sessions connected now leave them (the budgeted processes' own
// sessions, named by application_name, are not counted twice) they warn
// too. flag is the setting that sets bound.
func connectionsRow(sc catalog.ServerConns, members, bound int, flag string) checkRow {
	r := checkRow{Status: statusOK, Scope: "postgres", Check: "connections"}
	need, usable := members*bound, sc.Usable()
	others := sc.InUse - sc.Budgeted
	r.Seen = fmt.Sprintf("%d × %d = %d connections at most; the server allows %d (max_connections %d less %d reserved), %d in use by others",
		members, bound, need, usable, sc.Max, sc.Reserved, others)
	switch {
	case need > usable:
		r.Status, r.Do = statusFail, fmt.Sprintf("lower %s to %d or less, or raise max_connections to %d or more", flag, usable/max(members, 1), need+sc.Reserved)
	case need > usable-others:
		r.Status, r.Do = statusWarn, fmt.Sprintf("the sessions connected now leave %d: lower %s to %d, or raise max_connections", usable-others, flag, max(usable-others, 0)/max(members, 1))
	case 2*need > usable:
		r.Status, r.Do = statusWarn, fmt.Sprintf("this leaves the write path less than half the server: lower %s to %d, or raise max_connections to %d", flag, usable/2/max(members, 1), 2*need+sc.Reserved)
	}
	return r
}

// leaseRow says who holds the star's lease and for how long still (by the
// database clock): another live holder is no fault (a second instance
// stands by), but the operator should know before starting one.
func leaseRow(ctx context.Context, db doctorMetastore, star string) checkRow {
	r := checkRow{Status: statusOK, Scope: "postgres", Check: "lease"}
	l, live, err := db.CurrentLease(ctx, star)
	if errors.Is(err, catalog.ErrNotFound) {
		r.Seen = "never held: the first auditor started takes it"
		return r
	}
	if err != nil {
		r.Status, r.Seen, r.Do = statusFail, err.Error(), "check the role can read nova.auditor_leases"
		return r
	}
	now, err := db.Now(ctx)
	if err != nil {
		r.Status, r.Seen, r.Do = statusFail, err.Error(), "check the database answers"
		return r
	}
	left := l.ExpiresAt.Sub(now).Round(time.Second)
	if live {
		r.Seen = fmt.Sprintf("held by %s (token %d), expires in %s unless renewed: a new instance stands by", l.Holder, l.Token, left)
		return r
	}
	r.Seen = fmt.Sprintf("free: last held by %s (token %d), expired %s ago", l.Holder, l.Token, -left)
	return r
}

// bucketRulesReader is the store's reading of a bucket's rules (both
// backends have one).
type bucketRulesReader interface {
	BucketRules(ctx context.Context, bucket string) (objstore.BucketRules, error)
}

// bucketDoctor checks the buckets of one store.
type bucketDoctor struct {
	store objstore.Store
	// rules reads bucket rules; nil: the store says nothing of them.
	rules bucketRulesReader
	// probeChecksum is the S3 backend's checksum probe (nil for a store
	// that checks in the process); verify is --verify.
	probeChecksum func(ctx context.Context, bucket string) (objstore.ChecksumProbe, error)
	verify        string
	// withProbe returns the store configured for a probe's answer, as
	// serve configures it before it assembles anything (nil: store as is).
	withProbe func(objstore.ChecksumProbe) (objstore.Store, error)
	// clock reads the server's clock skew off a HEAD of a key (nil: the
	// store has no clock of its own).
	clock func(ctx context.Context, bucket, key string) (time.Duration, error)
	// prefix is where the probe writes ("doctor/<random>/"); keyPrefixes
	// are the full key prefixes the auditor writes under (what an expiry
	// rule must not reach).
	prefix      string
	keyPrefixes []string
}

// copyLen is the length of the ranged copy probe: S3's smallest range
// that objstore copies server side (DefaultLimits.CopyMin), so the copy is
// an UploadPartCopy and not gathered through the process.
var copyLen = objstore.DefaultLimits.CopyMin

// bucketReport is one bucket's checks; unreachable says its first write
// failed for another reason than a missing bucket (credentials, access,
// transport), so nothing else of it was checked; retryable says that
// failure is one waiting may cure (a timeout, a 5xx, a lost connection).
type bucketReport struct {
	rows        []checkRow
	unreachable bool
	retryable   bool
}

// bucketRun is one bucket's checks in progress: rows so far, the duration
// of every call by operation, and the probe keys written.
type bucketRun struct {
	d       *bucketDoctor
	bucket  string
	rows    []checkRow
	took    map[string][]time.Duration
	written []string
	// missingBucket: the first write found no bucket (the store answered);
	// retryable: it failed in a way waiting may cure.
	missingBucket, retryable bool
	// assembler is the store as serve would assemble with it: configured
	// by the checksum probe.
	assembler objstore.Store
}

func (r *bucketRun) add(status, check, seen, do string) {
	r.rows = append(r.rows, checkRow{Status: status, Scope: r.bucket, Check: check, Seen: seen, Do: do})
}

// timed runs one store call and records how long it took under op.
func (r *bucketRun) timed(op string, call func() error) error {
	start := time.Now()
	err := call()
	r.took[op] = append(r.took[op], time.Since(start))
	return err
}

// check runs every check of one bucket, in order, and removes what it
// wrote.
func (d *bucketDoctor) check(ctx context.Context, bucket string) bucketReport {
	r := &bucketRun{d: d, bucket: bucket, took: map[string][]time.Duration{}, assembler: d.store}
	src := d.prefix + "src"
	body := probeBody(copyLen + 16)
	if !r.credentials(ctx, src, body) {
		return bucketReport{rows: r.rows, unreachable: !r.missingBucket, retryable: r.retryable}
	}
	r.clockSkew(ctx, src)
	r.conditionalCreate(ctx, src, body)
	r.rangedGet(ctx, src, body)
	r.deleteAbsent(ctx)
	r.checksumMode(ctx)
	r.rangedCopy(ctx, src, body)
	r.bucketRules(ctx)
	r.cleanup(ctx)
	r.latency()
	return bucketReport{rows: r.rows}
}

// probeBody is n bytes no two windows of which are alike, so a wrong range
// is seen.
func probeBody(n int64) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// credentials writes the probe source create-once and reads its size
// back: the credentials, the endpoint and the bucket all work.
func (r *bucketRun) credentials(ctx context.Context, src string, body []byte) bool {
	err := r.timed("put", func() error { return r.d.store.PutIfAbsent(ctx, r.bucket, src, body) })
	if err == nil {
		r.written = append(r.written, src)
		var a objstore.Attrs
		err = r.timed("head", func() error {
			var herr error
			a, herr = r.d.store.Head(ctx, r.bucket, src)
			return herr
		})
		if err == nil && a.Size != int64(len(body)) {
			err = fmt.Errorf("HEAD says %d bytes, %d were written", a.Size, len(body))
		}
	}
	switch {
	case errors.Is(err, objstore.ErrBucketNotFound):
		r.missingBucket = true
		r.add(statusFail, "credentials", "the bucket does not exist", "create the bucket (deploy/README.md, Bucket setup), or fix --bucket / --s3-express-buckets")
		return false
	case err != nil:
		r.retryable = objstore.IsRetryable(err)
		r.add(statusFail, "credentials", fmt.Sprintf("write and read of a probe object failed: %v", err),
			"check the endpoint, the credentials (AWS SDK chain) and that they may put, get and delete objects in the bucket")
		return false
	}
	r.add(statusOK, "credentials", fmt.Sprintf("wrote and read back a %d-byte probe object", len(body)), "")
	return true
}

// clockSkew compares the server's clock with this host's, off a HEAD of
// the probe source.
func (r *bucketRun) clockSkew(ctx context.Context, src string) {
	const check = "clock skew"
	if r.d.clock == nil {
		r.add(statusOK, check, "the store is local: no clock of its own", "")
		return
	}
	var skew time.Duration
	err := r.timed("head", func() (err error) { skew, err = r.d.clock(ctx, r.bucket, src); return })
	if err != nil {
		r.add(statusWarn, check, fmt.Sprintf("could not be read: %v", err), "make sure the server sends a Date header, and that this host's clock is synchronised (NTP)")
		return
	}
	seen := skewText("the server's", skew, time.Second)
	switch {
	case skew.Abs() > clockSkewFail:
		r.add(statusFail, check, seen, "synchronise the clocks (NTP): S3 refuses signatures beyond 15 minutes of skew, and S3 Express sessions last 5")
	case skew.Abs() > clockSkewWarn:
		r.add(statusWarn, check, seen, "synchronise the clocks (NTP) before the skew reaches 5 minutes")
	default:
		r.add(statusOK, check, seen, "")
	}
}

// conditionalCreate puts the probe source again: create-once must refuse
// (If-None-Match: * answered 412) and keep the first bytes.
func (r *bucketRun) conditionalCreate(ctx context.Context, src string, body []byte) {
	err := r.timed("put", func() error { return r.d.store.PutIfAbsent(ctx, r.bucket, src, []byte("overwritten")) })
	do := "use a server that honours If-None-Match: * on PUT (answers 412): the auditor never overwrites, and relies on it"
	switch {
	case err == nil:
		r.add(statusFail, "conditional create", "a second create-once PUT of the same key succeeded", do)
		return
	case !errors.Is(err, objstore.ErrExists):
		r.add(statusFail, "conditional create", fmt.Sprintf("a second create-once PUT failed with %v, not 412", err), do)
		return
	}
	head, _, err := r.d.store.GetRange(ctx, r.bucket, src, 0, 16)
	if err != nil || !bytes.Equal(head, body[:16]) {
		r.add(statusFail, "conditional create", fmt.Sprintf("the refused PUT changed the object (read %x, %v)", head, err), do)
		return
	}
	r.add(statusOK, "conditional create", "second PUT refused (412), the object kept its bytes", "")
}

// rangedGet reads a range and a suffix of the probe source.
func (r *bucketRun) rangedGet(ctx context.Context, src string, body []byte) {
	const do = "use a server that serves Range: bytes=a-b and bytes=-n GETs"
	var got []byte
	var size int64
	err := r.timed("get-range", func() (err error) { got, size, err = r.d.store.GetRange(ctx, r.bucket, src, 1000, 100); return })
	if err != nil || size != int64(len(body)) || !bytes.Equal(got, body[1000:1100]) {
		r.add(statusFail, "ranged GET", fmt.Sprintf("bytes 1000-1099: %d bytes of an object of %d (%v)", len(got), size, err), do)
		return
	}
	err = r.timed("get-suffix", func() (err error) { got, size, err = r.d.store.GetSuffix(ctx, r.bucket, src, 100); return })
	if err != nil || size != int64(len(body)) || !bytes.Equal(got, body[len(body)-100:]) {
		r.add(statusFail, "ranged GET", fmt.Sprintf("suffix of 100 bytes: %d bytes of an object of %d (%v)", len(got), size, err), do)
		return
	}
	r.add(statusOK, "ranged GET", "a range and a suffix range read back right", "")
}

// deleteAbsent deletes a key that is not there: S3 answers success, and
// the reaper relies on it to repeat a delete after a crash.
func (r *bucketRun) deleteAbsent(ctx context.Context) {
	err := r.timed("delete", func() error { return r.d.store.Delete(ctx, r.bucket, []string{r.d.prefix + "absent"}) })
	if err != nil {
		r.add(statusFail, "delete absent key", err.Error(), "the auditor repeats deletes after a crash: a DELETE of an absent key must succeed (204)")
		return
	}
	r.add(statusOK, "delete absent key", "succeeded", "")
}

// rangedCopy assembles a new object from a range of the probe source, a
// server-side UploadPartCopy with a range on S3, and reads it back.
func (r *bucketRun) rangedCopy(ctx context.Context, src string, body []byte) {
	const do = "use a server that supports UploadPartCopy with x-amz-copy-source-range"
	dst := r.d.prefix + "copy"
	want := body[1 : 1+copyLen]
	req := objstore.AssembleRequest{Bucket: r.bucket, Key: dst,
		Pieces:         []objstore.Piece{objstore.RangePiece(r.bucket, src, 1, copyLen)},
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true}
	var res objstore.AssembleResult
	err := r.timed("assemble", func() (err error) { res, err = r.assembler.Assemble(ctx, req); return })
	if res.UploadID != "" && err != nil {
		_ = r.d.store.AbortAssembly(ctx, r.bucket, dst, res.UploadID)
	}
	if err == nil || errors.Is(err, objstore.ErrPublishedBad) {
		r.written = append(r.written, dst)
	}
	switch {
	case errors.Is(err, objstore.ErrChecksum), errors.Is(err, objstore.ErrPublishedBad):
		r.add(statusFail, "ranged copy", fmt.Sprintf("the copy's CRC-32C is not the range's: %v", err),
			"the server misreports or corrupts ranged copies: run serve with --verify readback, and report it to the server's maintainers")
		return
	case err != nil:
		r.add(statusFail, "ranged copy", fmt.Sprintf("assembling %d bytes copied from a range: %v", copyLen, err), do)
		return
	}
	var got []byte
	err = r.timed("get-range", func() (err error) { got, _, err = r.d.store.GetRange(ctx, r.bucket, dst, 0, copyLen); return })
	switch {
	case err != nil:
		r.add(statusFail, "ranged copy", fmt.Sprintf("reading the copy back: %v", err), do)
	case !bytes.Equal(got, want):
		r.add(statusFail, "ranged copy", fmt.Sprintf("the copy holds other bytes than the range (%d bytes read)", len(got)), do)
	default:
		how := "copied server side"
		if res.BytesCopied < copyLen {
			how = fmt.Sprintf("%d of %d bytes copied server side, the rest through the process", res.BytesCopied, copyLen)
		}
		checked := "CRC-32C checked by the server"
		switch {
		case res.BytesReadBack > 0:
			checked = "CRC-32C checked by read-back"
		case !res.Verified:
			checked = "CRC-32C not checked by the store"
		}
		r.add(statusOK, "ranged copy", fmt.Sprintf("%d bytes from offset 1, %s, in %d part(s), %s; read back right", copyLen, how, res.Parts, checked), "")
	}
}

// checksumMode says how the auditor will verify assemblies on this
// bucket, and why: what --verify asks and, under --verify checksum, what
// the server's probe found (the daemon runs the same probe at start).
func (r *bucketRun) checksumMode(ctx context.Context) {
	const check = "verification mode"
	switch {
	case r.d.probeChecksum == nil:
		r.add(statusOK, check, "the store is not S3: every assembly's CRC-32C is checked in the process", "")
		return
	case r.d.verify == "readback":
		r.add(statusOK, check, "parts: per-part CRC-32C, every assembly read back (--verify readback)", "")
		return
	}
	var p objstore.ChecksumProbe
	err := r.timed("checksum-probe", func() (err error) { p, err = r.d.probeChecksum(ctx, r.bucket); return })
	if err != nil {
		r.add(statusFail, check, fmt.Sprintf("the checksum probe failed: %v", err), "serve would not start: fix the error, or set --verify readback")
		return
	}
	c := p.Configure(objstore.S3Config{})
	if r.d.withProbe != nil {
		st, err := r.d.withProbe(p)
		if err != nil {
			r.add(statusFail, check, fmt.Sprintf("the probe's answer cannot configure the store: %v", err), "set --verify readback")
			return
		}
		r.assembler = st
	}
	switch c.Checksum {
	case objstore.ChecksumFullObject:
		r.add(statusOK, check, "full-object: the server checks every assembly's CRC-32C at completion", "")
	case objstore.ChecksumBySource:
		r.add(statusOK, check, fmt.Sprintf("by-source: ranged copies report their CRC-32C only from sources stored with %v; assemblies copying from others are read back", c.ServerChecked), "")
	default:
		r.add(statusWarn, check, "parts: the server has no full-object CRC-32C of copied parts; every assembly is read back",
			"nothing required; a server with full-object CRC-32C (AWS S3) saves the read-back GETs")
	}
}

// bucketRules judges the bucket's lifecycle, encryption, versioning and
// Object Lock as the daemon does on its schedule (objstore.BucketRules.Judge).
func (r *bucketRun) bucketRules(ctx context.Context) {
	rules := objstore.UnknownRules(r.bucket, "the store has no bucket rules")
	if r.d.rules != nil {
		var err error
		if err = r.timed("bucket-rules", func() (err error) { rules, err = r.d.rules.BucketRules(ctx, r.bucket); return }); err != nil {
			r.add(statusFail, "bucket rules", fmt.Sprintf("could not be read: %v", err), "allow reading the bucket's lifecycle, encryption, versioning and Object Lock configuration")
			return
		}
	}
	v := rules.Judge(r.d.keyPrefixes)
	note := ""
	if v.Note != "" {
		note = " (" + v.Note + ")"
	}
	switch v.KeepsDeleted() {
	case objstore.VerdictYes:
		r.add(statusFail, "versioning, Object Lock", v.KeepsDeletedWhy()+": a DELETE leaves the bytes, erasures cannot apply", "use a bucket that never had versioning or Object Lock")
	case objstore.VerdictNo:
		r.add(statusOK, "versioning, Object Lock", "versioning off, no Object Lock", "")
	default:
		r.add(statusWarn, "versioning, Object Lock", "unknown"+note, "make sure the bucket never had versioning or Object Lock")
	}
	switch {
	case len(v.Expiring) > 0:
		var s []string
		for _, e := range v.Expiring {
			s = append(s, e.String())
		}
		r.add(statusFail, "no expiry", strings.Join(s, "; "), "remove the expiration rule: serve stops all work while one reaches the auditor's keys")
	case rules.Lifecycle == objstore.KnownYes:
		r.add(statusOK, "no expiry", "no expiration rule reaches the auditor's keys", "")
	default:
		r.add(statusWarn, "no expiry", "lifecycle unknown"+note, "make sure no expiration rule reaches the auditor's keys")
	}
	const abortDo = "add a lifecycle rule AbortIncompleteMultipartUpload after 7 days (deploy/README.md, Bucket setup)"
	switch v.AbortIncomplete {
	case objstore.VerdictYes:
		r.add(statusOK, "abort incomplete multipart", "a rule aborts incomplete uploads", "")
	case objstore.VerdictNo:
		r.add(statusWarn, "abort incomplete multipart", "no rule aborts incomplete uploads", abortDo)
	default:
		r.add(statusWarn, "abort incomplete multipart", "unknown"+note, abortDo)
	}
	const encDo = "turn on default encryption (SSE-S3 or SSE-KMS)"
	switch v.Encryption {
	case objstore.VerdictYes:
		r.add(statusOK, "default encryption", rules.Encryption, "")
	case objstore.VerdictNo:
		r.add(statusWarn, "default encryption", "none", encDo)
	default:
		r.add(statusWarn, "default encryption", "unknown"+note, encDo)
	}
}

// cleanup removes every probe object written.
func (r *bucketRun) cleanup(ctx context.Context) {
	if len(r.written) == 0 {
		return
	}
	err := r.timed("delete", func() error { return r.d.store.Delete(ctx, r.bucket, r.written) })
	if err != nil {
		r.add(statusWarn, "probe removed", fmt.Sprintf("could not delete the probe objects under %s: %v", r.d.prefix, err), "delete them by hand: "+strings.Join(r.written, ", "))
		return
	}
	r.add(statusOK, "probe removed", fmt.Sprintf("deleted the %d probe objects under %s", len(r.written), r.d.prefix), "")
}

// latency is the median duration of each operation the checks issued.
func (r *bucketRun) latency() {
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(r.took)) {
		d := slices.Clone(r.took[op])
		slices.Sort(d)
		parts = append(parts, fmt.Sprintf("%s %s (%d)", op, d[len(d)/2].Round(10*time.Microsecond), len(d)))
	}
	r.add(statusOK, "median latency", strings.Join(parts, ", "), "")
}

// scheduleHorizon and scheduleFirings bound how far scheduleGap follows
// the schedule: a week covers every weekly cron pattern, and the firing
// bound keeps a sub-minute @every cheap.
const (
	scheduleHorizon = 8 * 24 * time.Hour
	scheduleFirings = 20000
)

// scheduleGap is the longest time between two firings of s in the
// scheduleHorizon after from (0 when it fires fewer than twice).
func scheduleGap(s cron.Schedule, from time.Time) time.Duration {
	var gap time.Duration
	prev := s.Next(from)
	if prev.IsZero() {
		return 0
	}
	for i := 0; i < scheduleFirings && prev.Sub(from) < scheduleHorizon; i++ {
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		gap = max(gap, next.Sub(prev))
		prev = next
	}
	return gap
}

// scheduleRow judges the schedule's longest gap against each chain class's
// linger and age cap. A stream due at its linger waits up to one gap for
// the next cycle, so linger + gap past the age cap lets records outlive
// it; a stream the tail-growth rule holds back becomes due DeferMargin
// before its cap, so a gap longer than the margin can carry it past. Both
// only warn: manual triggers and a busy daemon's cycles change the
// picture, and serve should still start.
func scheduleRow(s cron.Schedule, p catalog.DuePolicy, from time.Time) checkRow {
	r := checkRow{Status: statusOK, Scope: "config", Check: "schedule"}
	gap := scheduleGap(s, from)
	if gap == 0 {
		r.Status, r.Seen, r.Do = statusWarn, "the schedule fires less than twice in a week", "set --schedule to fire at least every linger (the default is "+config.Defaults().Schedule+")"
		return r
	}
	r.Seen = fmt.Sprintf("cycles at most %s apart", gap)
	var late []string
	for _, class := range []string{catalog.ClassStandard, catalog.ClassExpress} {
		linger, ageCap := p.LingerOf(class), p.AgeCapOf(class)
		switch {
		case linger+gap > ageCap:
			late = append(late, fmt.Sprintf("%s streams due at their linger %s can wait past their age cap %s", class, linger, ageCap))
		case p.TailGrowth > 0 && gap > p.DeferMargin(class):
			late = append(late, fmt.Sprintf("%s streams the tail-growth rule holds back become due %s before their age cap %s, less than one gap", class, p.DeferMargin(class), ageCap))
		}
	}
	if len(late) > 0 {
		r.Status = statusWarn
		r.Seen += ": " + strings.Join(late, "; ")
		r.Do = "set --schedule to fire more often, or raise the age cap"
	}
	return r
}
