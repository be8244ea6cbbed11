package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/migrations"
	"github.com/nova/auditor/objstore"
)

// faultStore is a store with one behaviour broken: each set field replaces
// its method; the rest pass through to the real store.
type faultStore struct {
	objstore.Store
	put      func(ctx context.Context, bucket, key string, data []byte) error
	getSufx  func(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error)
	del      func(ctx context.Context, bucket string, keys []string) error
	assemble func(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error)
}

func (f *faultStore) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	if f.put != nil {
		return f.put(ctx, bucket, key, data)
	}
	return f.Store.PutIfAbsent(ctx, bucket, key, data)
}

func (f *faultStore) GetSuffix(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
	if f.getSufx != nil {
		return f.getSufx(ctx, bucket, key, n)
	}
	return f.Store.GetSuffix(ctx, bucket, key, n)
}

func (f *faultStore) Delete(ctx context.Context, bucket string, keys []string) error {
	if f.del != nil {
		return f.del(ctx, bucket, keys)
	}
	return f.Store.Delete(ctx, bucket, keys)
}

func (f *faultStore) Assemble(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	if f.assemble != nil {
		return f.assemble(ctx, req)
	}
	return f.Store.Assemble(ctx, req)
}

// rulesFunc answers BucketRules with a function.
type rulesFunc func(bucket string) (objstore.BucketRules, error)

func (f rulesFunc) BucketRules(_ context.Context, bucket string) (objstore.BucketRules, error) {
	return f(bucket)
}

// goodRules are the reference setup: one abort-incomplete rule, default
// encryption, no versioning, no Object Lock.
func goodRules(bucket string) (objstore.BucketRules, error) {
	return objstore.BucketRules{Bucket: bucket, Lifecycle: objstore.KnownYes,
		Rules:           []objstore.LifecycleRule{{ID: "abort", Enabled: true, AbortIncompleteDays: 7}},
		EncryptionKnown: objstore.KnownYes, Encryption: "AES256",
		VersioningKnown: objstore.KnownYes, ObjectLockKnown: objstore.KnownYes}, nil
}

// testKeyPrefixes are the key prefixes the auditor of star s1 writes under.
var _, testKeyPrefixes = checkedBuckets(config.Config{Star: "s1"})

var doctorBucketChecks = []string{"credentials", "clock skew", "conditional create", "ranged GET", "delete absent key",
	"verification mode", "ranged copy", "versioning, Object Lock", "no expiry", "abort incomplete multipart", "default encryption",
	"probe removed", "median latency"}

// rowOf returns the row of a check, failing the test when there is none.
func rowOf(t *testing.T, rows []checkRow, check string) checkRow {
	t.Helper()
	for _, r := range rows {
		if r.Check == check {
			return r
		}
	}
	t.Fatalf("no %q row in %+v", check, rows)
	return checkRow{}
}

// tableHas reports whether the doctor's table has a line of the check,
// scope and status.
func tableHas(table, status, scope, check string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == status && f[1] == scope && strings.HasPrefix(strings.Join(f[2:], " "), check+" ") {
			return true
		}
	}
	return false
}

// noProbeLeft fails when anything is left under the doctor's prefix.
func noProbeLeft(t *testing.T, st objstore.Store, bucket string) {
	t.Helper()
	var left []string
	if err := st.List(context.Background(), bucket, "doctor/", func(o objstore.ObjectInfo) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("probe objects left behind: %v", left)
	}
}

func TestDoctorBucketChecksAllOK(t *testing.T) {
	t.Parallel()
	b := teststore.File(t, teststore.Options{})
	d := &bucketDoctor{store: b.Store, rules: rulesFunc(goodRules), verify: "checksum", prefix: "doctor/t/", keyPrefixes: testKeyPrefixes,
		probeChecksum: func(context.Context, string) (objstore.ChecksumProbe, error) {
			return objstore.ChecksumProbe{FullObject: true, Copies: map[objstore.ChecksumAlgorithm]bool{objstore.AlgorithmCRC32C: true}}, nil
		}}
	rep := d.check(context.Background(), b.Std)
	if rep.unreachable || len(rep.rows) != len(doctorBucketChecks) {
		t.Fatalf("unreachable %v, rows %+v", rep.unreachable, rep.rows)
	}
	for i, r := range rep.rows {
		if r.Check != doctorBucketChecks[i] || r.Status != statusOK || r.Scope != b.Std {
			t.Errorf("row %d: %+v, want %q ok", i, r, doctorBucketChecks[i])
		}
	}
	if got := rowOf(t, rep.rows, "verification mode").Seen; !strings.HasPrefix(got, "full-object") {
		t.Errorf("verification mode: %q", got)
	}
	for _, op := range []string{"put", "head", "get-range", "get-suffix", "delete", "assemble", "checksum-probe", "bucket-rules"} {
		if got := rowOf(t, rep.rows, "median latency").Seen; !strings.Contains(got, op+" ") {
			t.Errorf("median latency names no %s: %q", op, got)
		}
	}
	noProbeLeft(t, b.Store, b.Std)
}

// TestDoctorBucketChecksSeenFailing breaks one behaviour of the store at a
// time and expects the one check that covers it to say so.
func TestDoctorBucketChecksSeenFailing(t *testing.T) {
	t.Parallel()
	denied := errors.New("AccessDenied: 403")
	cases := []struct {
		name        string
		fault       func(f *faultStore)
		rules       rulesFunc
		probe       func(context.Context, string) (objstore.ChecksumProbe, error)
		clock       func(context.Context, string, string) (time.Duration, error)
		check       string
		status      string
		seen        string
		unreachable bool
	}{
		{name: "credentials", check: "credentials", status: statusFail, seen: "AccessDenied", unreachable: true,
			fault: func(f *faultStore) {
				f.put = func(context.Context, string, string, []byte) error { return denied }
			}},
		{name: "missing bucket", check: "credentials", status: statusFail, seen: "does not exist",
			fault: func(f *faultStore) {
				f.put = func(context.Context, string, string, []byte) error { return objstore.ErrBucketNotFound }
			}},
		{name: "clock skew beyond the limit", check: "clock skew", status: statusFail, seen: "6m0s behind",
			clock: func(context.Context, string, string) (time.Duration, error) { return -6 * time.Minute, nil }},
		{name: "clock skew", check: "clock skew", status: statusWarn, seen: "1m0s ahead of",
			clock: func(context.Context, string, string) (time.Duration, error) { return time.Minute, nil }},
		{name: "no server clock", check: "clock skew", status: statusWarn, seen: "no Date header",
			clock: func(context.Context, string, string) (time.Duration, error) {
				return 0, errors.New("the answer carried no Date header")
			}},
		{name: "conditional create", check: "conditional create", status: statusFail, seen: "succeeded",
			fault: func(f *faultStore) {
				f.put = func(ctx context.Context, bucket, key string, data []byte) error {
					if err := f.Store.PutIfAbsent(ctx, bucket, key, data); !errors.Is(err, objstore.ErrExists) {
						return err
					}
					return nil // the 412 lost: a server that ignores If-None-Match
				}
			}},
		{name: "suffix range", check: "ranged GET", status: statusFail, seen: "suffix",
			fault: func(f *faultStore) {
				f.getSufx = func(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
					return f.Store.GetRange(ctx, bucket, key, 0, n) // a server that reads bytes=-n as bytes=0-n
				}
			}},
		{name: "delete absent", check: "delete absent key", status: statusFail, seen: "NoSuchKey",
			fault: func(f *faultStore) {
				f.del = func(ctx context.Context, bucket string, keys []string) error {
					if strings.HasSuffix(keys[0], "absent") {
						return errors.New("NoSuchKey: 404")
					}
					return f.Store.Delete(ctx, bucket, keys)
				}
			}},
		{name: "ranged copy", check: "ranged copy", status: statusFail, seen: "NotImplemented",
			fault: func(f *faultStore) {
				f.assemble = func(context.Context, objstore.AssembleRequest) (objstore.AssembleResult, error) {
					return objstore.AssembleResult{}, errors.New("NotImplemented: UploadPartCopy")
				}
			}},
		{name: "copy checksum", check: "ranged copy", status: statusFail, seen: "CRC-32C is not the range's",
			fault: func(f *faultStore) {
				f.assemble = func(context.Context, objstore.AssembleRequest) (objstore.AssembleResult, error) {
					return objstore.AssembleResult{}, fmt.Errorf("parts combine to CRC 1, expected 2: %w", objstore.ErrChecksum)
				}
			}},
		{name: "copy of other bytes", check: "ranged copy", status: statusFail, seen: "other bytes",
			fault: func(f *faultStore) {
				f.assemble = func(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
					req.Pieces[0].Off = 0 // a server that ignores the copy's range start
					req.HasExpectedCRC32C = false
					return f.Store.Assemble(ctx, req)
				}
			}},
		{name: "checksum probe fails", check: "verification mode", status: statusFail, seen: "probe failed",
			probe: func(context.Context, string) (objstore.ChecksumProbe, error) {
				return objstore.ChecksumProbe{}, errors.New("InvalidRequest")
			}},
		{name: "no full-object checksums", check: "verification mode", status: statusWarn, seen: "parts",
			probe: func(context.Context, string) (objstore.ChecksumProbe, error) { return objstore.ChecksumProbe{}, nil }},
		{name: "rules unreadable", check: "bucket rules", status: statusFail, seen: "could not be read",
			rules: func(string) (objstore.BucketRules, error) { return objstore.BucketRules{}, denied }},
		{name: "versioning", check: "versioning, Object Lock", status: statusFail, seen: "versioning suspended",
			rules: func(b string) (objstore.BucketRules, error) {
				r, _ := goodRules(b)
				r.Versioning = objstore.VersioningStatusSuspended
				return r, nil
			}},
		{name: "object lock", check: "versioning, Object Lock", status: statusFail, seen: "Object Lock",
			rules: func(b string) (objstore.BucketRules, error) {
				r, _ := goodRules(b)
				r.Versioning, r.ObjectLock = objstore.VersioningStatusEnabled, true
				return r, nil
			}},
		{name: "expiry", check: "no expiry", status: statusFail, seen: "after 30 days",
			rules: func(b string) (objstore.BucketRules, error) {
				r, _ := goodRules(b)
				r.Rules = append(r.Rules, objstore.LifecycleRule{ID: "old", Enabled: true, Expiration: true, ExpirationDays: 30})
				return r, nil
			}},
		{name: "no abort rule", check: "abort incomplete multipart", status: statusWarn, seen: "no rule",
			rules: func(b string) (objstore.BucketRules, error) {
				r, _ := goodRules(b)
				r.Rules = nil
				return r, nil
			}},
		{name: "no encryption", check: "default encryption", status: statusWarn, seen: "none",
			rules: func(b string) (objstore.BucketRules, error) {
				r, _ := goodRules(b)
				r.Encryption = ""
				return r, nil
			}},
		{name: "probe not removed", check: "probe removed", status: statusWarn, seen: "could not delete",
			fault: func(f *faultStore) {
				f.del = func(ctx context.Context, bucket string, keys []string) error {
					if len(keys) > 1 {
						return &objstore.DeleteError{}
					}
					return f.Store.Delete(ctx, bucket, keys)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := teststore.File(t, teststore.Options{})
			f := &faultStore{Store: b.Store}
			if c.fault != nil {
				c.fault(f)
			}
			d := &bucketDoctor{store: f, rules: rulesFunc(goodRules), verify: "checksum", prefix: "doctor/t/", keyPrefixes: testKeyPrefixes,
				probeChecksum: func(context.Context, string) (objstore.ChecksumProbe, error) {
					return objstore.ChecksumProbe{FullObject: true, Copies: map[objstore.ChecksumAlgorithm]bool{objstore.AlgorithmCRC32C: true}}, nil
				}}
			if c.rules != nil {
				d.rules = c.rules
			}
			if c.probe != nil {
				d.probeChecksum = c.probe
			}
			d.clock = c.clock
			rep := d.check(context.Background(), b.Std)
			r := rowOf(t, rep.rows, c.check)
			if r.Status != c.status || !strings.Contains(r.Seen, c.seen) || r.Do == "" || rep.unreachable != c.unreachable {
				t.Errorf("%s: %+v (unreachable %v), want %s seeing %q (unreachable %v)", c.check, r, rep.unreachable, c.status, c.seen, c.unreachable)
			}
			for _, o := range rep.rows {
				if o.Check != c.check && o.Status != statusOK {
					t.Errorf("another check is not ok: %+v", o)
				}
			}
			if c.name != "probe not removed" {
				noProbeLeft(t, b.Store, b.Std)
			}
		})
	}
}

// behindSchema is the real metastore at a schema one behind the binary.
type behindSchema struct{ *catalog.Ledger }

func (b behindSchema) CheckSchema(context.Context) error {
	return fmt.Errorf("%w: database at version %d, binary needs %d", migrations.ErrDatabaseBehind, migrations.Latest()-1, migrations.Latest())
}

func TestDoctorPostgresChecks(t *testing.T) {
	t.Parallel()
	_, db := migratedDB(t)
	ctx := context.Background()
	check := func(m doctorMetastore, star string, want map[string]string) {
		t.Helper()
		rows := checkPostgres(ctx, m, star, 16)
		if len(rows) != len(want) {
			t.Fatalf("rows %+v, want %v", rows, want)
		}
		for _, r := range rows {
			if w := want[r.Check]; !strings.HasPrefix(w, r.Status+": ") || !strings.Contains(r.Seen, strings.TrimPrefix(w, r.Status+": ")) {
				t.Errorf("%s: %+v, want %s", r.Check, r, w)
			}
		}
	}
	fine := map[string]string{"clock skew": "ok: the database's clock", "pool size": "ok: pool_max_conns 32 for --settle-concurrency 16"}
	with := func(m map[string]string) map[string]string {
		for k, v := range fine {
			if _, set := m[k]; !set {
				m[k] = v
			}
		}
		return m
	}
	check(db.Ledger(), "s1", with(map[string]string{"schema version": "ok: the binary's", "star": `ok: "s1" exists`, "lease": "ok: never held"}))
	check(db.Ledger(), "nope", map[string]string{"schema version": "ok: the binary's", "star": `fail: no star "nope"`})
	check(behindSchema{db.Ledger()}, "s1", with(map[string]string{"schema version": fmt.Sprintf("fail: binary needs %d", migrations.Latest()),
		"star": "ok: exists", "lease": "ok: never held"}))
	if _, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "host-a", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	check(db.Ledger(), "s1", with(map[string]string{"schema version": "ok: ", "star": "ok: ", "lease": "ok: held by host-a (token 1), expires in"}))
	check(skewedDB{db.Ledger(), 2 * time.Minute}, "s1", with(map[string]string{"schema version": "ok: ", "star": "ok: ", "lease": "ok: held by host-a",
		"clock skew": "warn: the database's clock is 2m0"})) // 2m0s, or 2m0.001s off a loaded host's reading
}

// skewedDB is the real metastore with its clock moved by skew.
type skewedDB struct {
	*catalog.Ledger
	skew time.Duration
}

func (s skewedDB) Now(ctx context.Context) (time.Time, error) {
	t, err := s.Ledger.Now(ctx)
	return t.Add(s.skew), err
}

// TestDoctorPoolSize: the pool against the settle concurrency and the
// daemon's own connections (catalog.ReservedConns).
func TestDoctorPoolSize(t *testing.T) {
	for _, c := range []struct {
		max         int32
		concurrency int64
		status, do  string
	}{
		{catalog.DefaultMaxConns, 16, statusOK, ""},
		{20, 16, statusOK, ""},
		{19, 16, statusWarn, "raise pool_max_conns in --database-url to 20, or lower --settle-concurrency to 15"},
		{catalog.ReservedConns, 1, statusFail, "raise pool_max_conns in --database-url to 5 or more"},
	} {
		r := poolRow(c.max, c.concurrency)
		if r.Status != c.status || !strings.HasPrefix(r.Do, c.do) {
			t.Errorf("pool %d, concurrency %d: %+v, want %s %q", c.max, c.concurrency, r, c.status, c.do)
		}
	}
}

func TestDoctorSchedule(t *testing.T) {
	from := time.Date(2026, 12, 3, 10, 17, 0, 0, time.UTC) // a Thursday
	defaults := config.Defaults()
	policy := duePolicy(defaults)
	for _, c := range []struct {
		spec   string
		gap    time.Duration
		growth float64
		status string
		seen   string
	}{
		{defaults.Schedule, 30 * time.Second, policy.TailGrowth, statusOK, "cycles at most 30s apart"},
		{"*/10 * * * *", 10 * time.Minute, policy.TailGrowth, statusOK, ""},
		// weekdays only: the longest gap is the weekend, past the express
		// class's cap and the standard class's defer margin
		{"0 9-17 * * 1-5", 64 * time.Hour, policy.TailGrowth, statusWarn, "standard streams due at their linger"},
		{"@every 7h", 7 * time.Hour, policy.TailGrowth, statusWarn, "standard streams the tail-growth rule holds back become due 6h0m0s before"},
		{"@every 7h", 7 * time.Hour, 0, statusWarn, "express streams"},
	} {
		sched, err := config.ParseSchedule(c.spec)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if got := scheduleGap(sched, from); got != c.gap {
			t.Errorf("%q: longest gap %s, want %s", c.spec, got, c.gap)
		}
		p := policy
		p.TailGrowth = c.growth
		r := scheduleRow(sched, p, from)
		if r.Status != c.status || !strings.Contains(r.Seen, c.seen) {
			t.Errorf("%q, growth %g: %+v, want %s with %q", c.spec, c.growth, r, c.status, c.seen)
		}
		if c.growth == 0 && strings.Contains(r.Seen, "tail-growth") {
			t.Errorf("%q with the rule off: %q names the tail-growth rule", c.spec, r.Seen)
		}
	}
}

func TestDoctorExitCodes(t *testing.T) {
	// t.Setenv: the S3 case gives the SDK credentials that reach nothing.
	url, _ := migratedDB(t)
	b := teststore.File(t, teststore.Options{})

	// Postgres unreachable, the store fine: a dependency not reached, exit 5.
	code, out, errs := runCLI(t, "doctor", "--star", "s1", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2",
		"--fs-root", b.Root, "--bucket", b.Std)
	if code != exitUnreachable || !tableHas(out, statusFail, "postgres", "reachable") || !tableHas(out, statusOK, "std", "ranged copy") {
		t.Fatalf("doctor without a database: exit %d\n%s%s", code, out, errs)
	}

	// Postgres answers and refuses the database name: a failed check, exit 3.
	code, out, errs = runCLI(t, "doctor", "--star", "s1", "--database-url", otherDatabase(t, url, "no_such_database_here"),
		"--fs-root", b.Root, "--bucket", b.Std)
	if code != exitFindings || !tableHas(out, statusFail, "postgres", "reachable") {
		t.Fatalf("doctor with a database that refuses: exit %d\n%s%s", code, out, errs)
	}

	// No bucket reachable: exit 5.
	t.Setenv("AWS_ACCESS_KEY_ID", "x")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "y")
	t.Setenv("AWS_REGION", "us-east-1")
	code, out, errs = runCLI(t, "doctor", "--star", "s1", "--database-url", url,
		"--s3-endpoint", "http://127.0.0.1:1", "--s3-path-style", "--s3-max-attempts", "1", "--bucket", "nowhere", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitUnreachable || rep.ExitCode != exitUnreachable {
		t.Fatalf("doctor against no store: exit %d, %v\n%s%s", code, err, out, errs)
	}
	if r := rowOf(t, rep.Checks, "credentials"); r.Status != statusFail || r.Scope != "nowhere" {
		t.Errorf("credentials: %+v", r)
	}

	// A configuration error: exit 2.
	if code, _, _ := runCLI(t, "doctor", "--database-url", "postgres://x@127.0.0.1:1/x", "--fs-root", b.Root); code != exitUsage {
		t.Errorf("doctor with no star: exit %d, want %d", code, exitUsage)
	}
}

// doctorWant is what the doctor sees on one test S3 server: the checks
// that warn (every other is ok), how it verifies assemblies and how the
// ranged copy was checked.
type doctorWant struct {
	warns         map[string]bool
	mode, checked string
}

// doctorWants: versitygw 1.8.0 answers 501 to the lifecycle and encryption
// reads, so those three checks warn (unknown), as
// docs/operations.md#operator-surface says; it misreports the CRC-32C of
// a range copied from a CRC-32C source, so it is by source, and the probe
// object (stored with CRC-32C) is copied and read back. SeaweedFS answers
// every rule read (a new bucket has no abort rule and no encryption: those
// warn) and checks full objects, the ranged copy included.
var doctorWants = map[string]doctorWant{
	testenv.ServerVersitygw: {warns: map[string]bool{"no expiry": true, "abort incomplete multipart": true, "default encryption": true},
		mode: "by-source", checked: "read-back"},
	testenv.ServerSeaweedFS: {warns: map[string]bool{"abort incomplete multipart": true, "default encryption": true},
		mode: "full-object", checked: "checked by the server"},
}

// TestDoctorAgainstS3Server runs the command against the real S3 server
// (versitygw for make test, SeaweedFS for make test-compat: doctorWants),
// a standard bucket and one express zone, and the real metastore: every
// check is ok but the bucket rules the server does not tell or a new
// bucket lacks.
func TestDoctorAgainstS3Server(t *testing.T) {
	server := testenv.S3(t).Server
	want, ok := doctorWants[server]
	if !ok {
		t.Fatalf("no expected doctor table for the S3 server %q: add it to doctorWants", server)
	}
	b := teststore.S3(t, teststore.Options{Zones: 1})
	url, _ := migratedDB(t)
	t.Setenv("AWS_ACCESS_KEY_ID", b.S3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", b.S3.SecretKey)
	t.Setenv("AWS_REGION", b.S3.Region)
	args := append([]string{"doctor", "--star", "s1", "--database-url", url, "--location", b.Zones[0]}, b.Flags()...)
	code, table, errs := runCLI(t, args...)
	t.Logf("auditor doctor against %s: exit %d\n%s%s", server, code, table, errs)
	code, out, errs := runCLI(t, append(args, "--json")...)
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || rep.ExitCode != exitOK {
		t.Fatalf("doctor --json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	for _, r := range rep.Checks {
		if st := map[bool]string{true: statusWarn, false: statusOK}[want.warns[r.Check]]; r.Status != st {
			t.Errorf("%s %s: %+v, want %s", r.Scope, r.Check, r, st)
		}
		if !tableHas(table, r.Status, r.Scope, r.Check) {
			t.Errorf("the table has no line %s %s %s", r.Status, r.Scope, r.Check)
		}
	}
	for _, bucket := range b.Buckets() {
		rows := rowsOf(rep.Checks, bucket)
		if len(rows) != len(doctorBucketChecks) {
			t.Errorf("%s: %d rows, want %d", bucket, len(rows), len(doctorBucketChecks))
		}
		if r := rowOf(t, rows, "verification mode"); !strings.HasPrefix(r.Seen, want.mode) {
			t.Errorf("%s: %+v", bucket, r)
		}
		if r := rowOf(t, rows, "ranged copy"); !strings.Contains(r.Seen, "copied server side") || !strings.Contains(r.Seen, want.checked) {
			t.Errorf("%s: %+v", bucket, r)
		}
		if r := rowOf(t, rows, "clock skew"); !strings.Contains(r.Seen, "the server's clock agrees with this host's") {
			t.Errorf("%s: %+v: versitygw runs on this host's clock", bucket, r)
		}
		noProbeLeft(t, b.Store, bucket)
	}
	for _, c := range []string{"reachable", "schema version", "star", "lease", "clock skew", "pool size"} {
		if r := rowOf(t, rowsOf(rep.Checks, "postgres"), c); r.Status != statusOK {
			t.Errorf("postgres: %+v", r)
		}
	}
}

// rowsOf are the rows of one scope.
func rowsOf(rows []checkRow, scope string) []checkRow {
	var out []checkRow
	for _, r := range rows {
		if r.Scope == scope {
			out = append(out, r)
		}
	}
	return out
}

// TestDoctorConnections: N processes at their bound against the server's
// usable connections: past them fail, past half or past what the others
// connected leave warn.
func TestDoctorConnections(t *testing.T) {
	server := func(inUse, budgeted int) catalog.ServerConns {
		return catalog.ServerConns{Max: 100, Reserved: 3, InUse: inUse, Budgeted: budgeted}
	}
	for _, c := range []struct {
		sc             catalog.ServerConns
		members, bound int
		status, do     string
	}{
		{server(10, 0), 2, 14, statusOK, ""},
		{server(40, 28), 2, 14, statusOK, ""}, // the members' own sessions are not counted twice
		{server(10, 0), 4, 14, statusWarn, "this leaves the write path less than half the server: lower --fleet-max-conns to 12"},
		{server(80, 0), 2, 14, statusWarn, "the sessions connected now leave 17: lower --fleet-max-conns to 8"},
		{server(1, 0), 2, 68, statusFail, "lower --fleet-max-conns to 48 or less, or raise max_connections to 139 or more"},
		{server(1, 0), 7, 14, statusFail, "lower --fleet-max-conns to 13 or less"},
	} {
		r := connectionsRow(c.sc, c.members, c.bound, "--fleet-max-conns")
		if r.Status != c.status || !strings.HasPrefix(r.Do, c.do) {
			t.Errorf("%d × %d on %+v: %+v, want %s %q", c.members, c.bound, c.sc, r, c.status, c.do)
		}
	}
}
