package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/trim"
)

// lifecycleDoc answers a bucket's GET ?lifecycle with the document it
// holds (AWS's XML) in front of the test S3 server (versitygw itself
// answers 501, SeaweedFS that the bucket has no lifecycle configuration);
// an empty document passes the request through to the server.
type lifecycleDoc struct {
	base http.RoundTripper
	doc  atomic.Pointer[string]
}

func (l *lifecycleDoc) RoundTrip(r *http.Request) (*http.Response, error) {
	if doc := l.doc.Load(); doc != nil && *doc != "" && r.Method == http.MethodGet && r.URL.Query().Has("lifecycle") {
		return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(bytes.NewBufferString(*doc)),
			ContentLength: int64(len(*doc)), Request: r}, nil
	}
	return l.base.RoundTrip(r)
}

func (l *lifecycleDoc) set(doc string) { l.doc.Store(&doc) }

const (
	lifecycleExpiring = `<?xml version="1.0" encoding="UTF-8"?>
<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Rule><ID>abort-mpu</ID><Filter><Prefix></Prefix></Filter><Status>Enabled</Status>
    <AbortIncompleteMultipartUpload><DaysAfterInitiation>7</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>
  <Rule><ID>expire-old-chains</ID><Filter><Prefix>stars/</Prefix></Filter><Status>Enabled</Status>
    <Expiration><Days>14</Days></Expiration></Rule>
</LifecycleConfiguration>`
	lifecycleReference = `<?xml version="1.0" encoding="UTF-8"?>
<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Rule><ID>abort-mpu</ID><Filter><Prefix></Prefix></Filter><Status>Enabled</Status>
    <AbortIncompleteMultipartUpload><DaysAfterInitiation>7</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>
</LifecycleConfiguration>`
)

// TestAnExpirationRuleStopsWorkUntilItIsGone: the leader reads the bucket's
// lifecycle rules at start; while a rule can expire the auditor's keys it
// runs no cycle (a trigger waits), says why in status and the metrics, and
// once the rule is gone it resumes by itself. The server's own answer
// blocks nothing: versitygw's 501 reads as unknown, SeaweedFS's "no
// configuration" as a missing abort rule.
func TestAnExpirationRuleStopsWorkUntilItIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// versitygw 1.8.0 answers 501 to the lifecycle and encryption reads;
	// SeaweedFS answers both (a new bucket has neither).
	tells := testenv.S3(t).Server != testenv.ServerVersitygw
	tr := &lifecycleDoc{base: http.DefaultTransport}
	tr.set(lifecycleExpiring)
	store, _ := teststore.S3Store(t, teststore.Options{Transport: tr})
	bucket := testenv.BucketName("guard")
	teststore.CreateBucket(t, store, bucket)
	db, _ := newDB(t)
	cfg := testConfig(t, "g1")
	cfg.Buckets, cfg.KeyPrefixes = []string{bucket}, []string{"stars/s1/chain/", "buckets/"}
	cfg.RulesInterval = 200 * time.Millisecond
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	m, err := daemon.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec}, Log: tlog(t, "g1"), Metrics: m, Gatherer: reg, Rules: store, Trim: trim.Viewer{DB: db.Trim()}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	blocked := func() float64 {
		return testutil.ToFloat64(m.Guard.WorkBlocked.WithLabelValues(daemon.BlockBucketRules))
	}
	eventually(t, 5*time.Second, "leads, blocked by the rule", func() bool {
		return testutil.ToFloat64(m.Leader) == 1 && blocked() == 1
	})
	if n := testutil.ToFloat64(m.Guard.ExpiringRules.WithLabelValues(bucket)); n != 1 {
		t.Fatalf("bucket_expiration_rules %v, want 1", n)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "op"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := len(rec.snapshot()); n != 0 {
		t.Fatalf("%d cycles ran while an expiration rule reaches the auditor's keys", n)
	}
	var st daemon.Status
	eventually(t, 5*time.Second, "status names the rule", func() bool {
		st, err = daemon.BuildStatus(ctx, db.Ledger(), daemon.StatusOptions{Star: "s1", Trim: trim.Viewer{DB: db.Trim()}})
		return err == nil && strings.Contains(st.Blocked, "expire-old-chains") && len(st.Buckets) == 1 &&
			len(st.Buckets[0].Expiring) == 1
	})
	var text strings.Builder
	if err := st.WriteText(&text); err != nil || !strings.Contains(text.String(), "NO WORK") ||
		!strings.Contains(text.String(), `EXPIRATION rule expire-old-chains: expiration after 14 days over prefix "stars/"`) {
		t.Fatalf("status text:\n%s%v", text.String(), err)
	}

	// The rule is removed: work resumes within a check, the waiting
	// trigger runs, and the reference setup leaves no finding but the
	// encryption, which versitygw does not say and SeaweedFS says is none.
	tr.set(lifecycleReference)
	gone := time.Now()
	rec.wait(t, 5*time.Second)
	t.Logf("the waiting trigger ran %s after the rule went (rules re-read every %s while blocked)", time.Since(gone).Round(time.Millisecond), cfg.RulesInterval)
	if blocked() != 0 || testutil.ToFloat64(m.Guard.ExpiringRules.WithLabelValues(bucket)) != 0 {
		t.Fatal("still blocked after the rule went")
	}
	encryption := m.Guard.SetupUnknown.WithLabelValues(bucket, "default_encryption")
	if tells {
		encryption = m.Guard.SetupMissing.WithLabelValues(bucket, "default_encryption")
	}
	if testutil.ToFloat64(m.Guard.SetupMissing.WithLabelValues(bucket, "abort_incomplete_multipart")) != 0 ||
		testutil.ToFloat64(encryption) != 1 {
		t.Fatalf("reference setup: abort rule not seen, or encryption not unknown (versitygw) or missing (a server that tells)")
	}

	// The server itself: versitygw's 501 to both reads is unknown;
	// SeaweedFS's "no lifecycle configuration" is a missing abort rule.
	// Neither is a block.
	tr.set("")
	eventually(t, 5*time.Second, "the server's own lifecycle answer read", func() bool {
		if tells {
			return testutil.ToFloat64(m.Guard.SetupMissing.WithLabelValues(bucket, "abort_incomplete_multipart")) == 1
		}
		return testutil.ToFloat64(m.Guard.SetupUnknown.WithLabelValues(bucket, "lifecycle")) == 1
	})
	if blocked() != 0 {
		t.Fatal("an unknown lifecycle blocks work")
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "op"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 10*time.Second)
	eventually(t, 5*time.Second, "status says unknown", func() bool {
		st, err = daemon.BuildStatus(ctx, db.Ledger(), daemon.StatusOptions{Star: "s1", Trim: trim.Viewer{DB: db.Trim()}})
		if err != nil || st.Blocked != "" || len(st.Buckets) != 1 {
			return false
		}
		if tells {
			return st.Buckets[0].AbortIncomplete == objstore.VerdictNo
		}
		return st.Buckets[0].AbortIncomplete == objstore.VerdictUnknown && strings.Contains(st.Buckets[0].Note, "501")
	})
}

// TestStatusTextNamesTheBucketWarnings: a missing abort rule, missing
// encryption, an unknown answer and a bucket that keeps deleted bytes
// each get a status line.
func TestStatusTextNamesTheBucketWarnings(t *testing.T) {
	s := daemon.Status{Star: "s1", Buckets: []daemon.BucketStatus{
		{RulesVerdict: objstore.RulesVerdict{Bucket: "b1", Expiring: []objstore.LifecycleRule{},
			AbortIncomplete: objstore.VerdictNo, Encryption: objstore.VerdictNo, Versioning: objstore.VersioningOff, ObjectLock: objstore.VerdictNo}},
		{RulesVerdict: objstore.RulesVerdict{Bucket: "b2", Expiring: []objstore.LifecycleRule{},
			AbortIncomplete: objstore.VerdictUnknown, Encryption: objstore.VerdictUnknown, Versioning: objstore.VerdictUnknown,
			ObjectLock: objstore.VerdictUnknown, Note: "lifecycle: the server answered 501 NotImplemented"}},
		{RulesVerdict: objstore.RulesVerdict{Bucket: "b3", Expiring: []objstore.LifecycleRule{},
			AbortIncomplete: objstore.VerdictYes, Encryption: objstore.VerdictYes, Versioning: objstore.VersioningOff, ObjectLock: objstore.VerdictNo}},
		{RulesVerdict: objstore.RulesVerdict{Bucket: "b4", Expiring: []objstore.LifecycleRule{},
			AbortIncomplete: objstore.VerdictYes, Encryption: objstore.VerdictYes, Versioning: objstore.VersioningEnabled, ObjectLock: objstore.VerdictYes}},
	}, Erasures: daemon.ErasureStatus{HeldBy: "bucket b4 (versioning enabled and Object Lock)"}}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][2]string{{"bucket b1", "warning: no AbortIncompleteMultipartUpload rule"}, {"bucket b1", "warning: no default server-side encryption"},
		{"bucket b2", "rules unknown (lifecycle unknown, encryption unknown, versioning unknown, object lock unknown): lifecycle: the server answered 501"},
		{"bucket b2", "versioning unknown: erasures are marked applied without knowing"}, {"bucket b3", "ok:"},
		{"bucket b4", "KEEPS DELETED BYTES (versioning enabled and Object Lock): no erasure is marked applied"},
		{"erasures HELD", "bucket b4 (versioning enabled and Object Lock) keeps what a DELETE removes"}} {
		found := false
		for _, line := range strings.Split(b.String(), "\n") {
			found = found || strings.HasPrefix(line, want[0]) && strings.Contains(line, want[1])
		}
		if !found {
			t.Errorf("status text lacks %q:\n%s", want, b.String())
		}
	}
}

// versioningDoc answers a bucket's GET ?versioning with the document it
// holds in front of versitygw; an empty document passes the request
// through (versitygw without --versioning-dir: never enabled).
type versioningDoc struct {
	base http.RoundTripper
	doc  atomic.Pointer[string]
}

func (v *versioningDoc) RoundTrip(r *http.Request) (*http.Response, error) {
	if doc := v.doc.Load(); doc != nil && *doc != "" && r.Method == http.MethodGet && r.URL.Query().Has("versioning") {
		return &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(bytes.NewBufferString(*doc)),
			ContentLength: int64(len(*doc)), Request: r}, nil
	}
	return v.base.RoundTrip(r)
}

func (v *versioningDoc) set(doc string) { v.doc.Store(&doc) }

func versioningStatus(status string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>
<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>` + status + `</Status></VersioningConfiguration>`
}

// TestAVersionedBucketHoldsErasures: a bucket with versioning enabled or
// suspended blocks no work, but the cycle's erase step is told that no
// erasure may be marked applied, and why; the metric, the alert's series
// and status say it too. The answer comes from a read of the rules made
// when the step asks, not from the daily check: once the bucket reads as
// never versioned, the next cycle may apply.
func TestAVersionedBucketHoldsErasures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := &versioningDoc{base: http.DefaultTransport}
	tr.set(versioningStatus("Enabled"))
	store, _ := teststore.S3Store(t, teststore.Options{Transport: tr})
	bucket := testenv.BucketName("held")
	teststore.CreateBucket(t, store, bucket)
	db, _ := newDB(t)
	cfg := testConfig(t, "h1")
	cfg.Buckets, cfg.KeyPrefixes = []string{bucket}, []string{"stars/s1/chain/", "buckets/"}
	holds := make(chan string, 10)
	erase := step{name: daemon.EraseStep, run: func(ctx context.Context, _ catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
		if opts.ErasureHold == nil {
			holds <- "no hold asked"
		} else {
			holds <- opts.ErasureHold(ctx)
		}
		return cycle.Counts{}, nil
	}}
	reg := prometheus.NewRegistry()
	m, err := daemon.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{erase}, Log: tlog(t, "h1"), Metrics: m, Gatherer: reg, Rules: store})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	keeps := func() float64 { return testutil.ToFloat64(m.Guard.KeepsDeleted.WithLabelValues(bucket, "versioning")) }
	eventually(t, 5*time.Second, "leads, the bucket seen keeping deleted bytes", func() bool {
		return testutil.ToFloat64(m.Leader) == 1 && keeps() == 1
	})
	cycleHold := func() string {
		t.Helper()
		if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "op"); err != nil {
			t.Fatal(err)
		}
		select {
		case h := <-holds:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("no cycle: a versioned bucket must not block work")
		}
		return ""
	}
	for _, status := range []string{"Enabled", "Suspended"} {
		tr.set(versioningStatus(status))
		want := fmt.Sprintf("bucket %s: versioning %s: a DELETE leaves the bytes", bucket, strings.ToLower(status))
		if h := cycleHold(); h != want {
			t.Fatalf("versioning %s: the erase step is told %q, want %q", status, h, want)
		}
		if testutil.ToFloat64(m.Guard.WorkBlocked.WithLabelValues(daemon.BlockBucketRules)) != 0 || keeps() != 1 {
			t.Fatalf("versioning %s: work blocked, or bucket_keeps_deleted not 1", status)
		}
	}
	st, err := daemon.BuildStatus(ctx, db.Ledger(), daemon.StatusOptions{Star: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Erasures.HeldBy, bucket+" (versioning suspended)") || st.Blocked != "" ||
		!strings.Contains(text.String(), "KEEPS DELETED BYTES (versioning suspended)") || !strings.Contains(text.String(), "erasures HELD") {
		t.Fatalf("status: held by %q, blocked %q:\n%s", st.Erasures.HeldBy, st.Blocked, text.String())
	}

	// versitygw's own answer: never enabled. The daily check has not run
	// again; the step's ask reads afresh.
	tr.set("")
	if h := cycleHold(); h != "" {
		t.Fatalf("a bucket never versioned still holds erasures: %q", h)
	}
	if keeps() != 0 {
		t.Fatal("bucket_keeps_deleted still 1")
	}
}
