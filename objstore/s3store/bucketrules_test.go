package s3store

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
)

// TestBucketRulesOfVersitygwAreUnknown: versitygw 1.8.0 answers 501
// NotImplemented to the lifecycle and encryption reads; that reads as
// unknown, not as a failure, and is asked once (a 501 is not retried).
// Its versioning and Object Lock answers are definite: never enabled, no
// configuration (the server runs without --versioning-dir).
func TestBucketRulesOfVersitygwAreUnknown(t *testing.T) {
	testenv.RequireVersitygw(t, "versitygw 1.8.0's answers to the bucket rule reads; TestBucketRulesOfSeaweedFS has SeaweedFS's")
	var calls atomic.Int64
	cfg := objstore.S3Config{HTTPClient: &http.Client{Transport: countQuery{base: http.DefaultTransport, n: &calls}}}
	s := newStore(t, cfg)
	b := newBucket(t, s, "rules")
	r, err := s.BucketRules(context.Background(), b)
	if err != nil {
		t.Fatalf("a server without the calls is not a failure: %v", err)
	}
	if r.Lifecycle != objstore.KnownUnknown || r.EncryptionKnown != objstore.KnownUnknown || !strings.Contains(r.Note, "501") {
		t.Fatalf("versitygw's rules: %+v", r)
	}
	if r.VersioningKnown != objstore.KnownYes || r.Versioning != "" || r.ObjectLockKnown != objstore.KnownYes || r.ObjectLock {
		t.Fatalf("versitygw's versioning and object lock: %+v", r)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d requests for lifecycle, encryption, versioning and object lock, want 4 (a 501 is a definite answer)", n)
	}
	v := r.Judge([]string{"stars/s1/", "buckets/"})
	if len(v.Expiring) != 0 || v.AbortIncomplete != objstore.VerdictUnknown || v.Encryption != objstore.VerdictUnknown ||
		v.Versioning != objstore.VersioningOff || v.ObjectLock != objstore.VerdictNo || v.KeepsDeleted() != objstore.VerdictNo {
		t.Fatalf("verdict on unknown rules: %+v", v)
	}
}

// TestBucketRulesOfSeaweedFS: SeaweedFS answers all four reads of a new
// bucket definitely: no lifecycle configuration, no default encryption,
// versioning never enabled, no Object Lock configuration. The judgement:
// nothing expires and nothing keeps deleted bytes, but the
// abort-incomplete-multipart rule and the encryption are missing.
func TestBucketRulesOfSeaweedFS(t *testing.T) {
	if s := testenv.S3(t).Server; s != testenv.ServerSeaweedFS {
		t.Skipf("SeaweedFS only: its answers to the bucket rule reads; the test S3 server is %s", s)
	}
	var calls atomic.Int64
	cfg := objstore.S3Config{HTTPClient: &http.Client{Transport: countQuery{base: http.DefaultTransport, n: &calls}}}
	s := newStore(t, cfg)
	b := newBucket(t, s, "rules")
	r, err := s.BucketRules(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lifecycle != objstore.KnownYes || len(r.Rules) != 0 || r.EncryptionKnown != objstore.KnownYes || r.Encryption != "" ||
		r.VersioningKnown != objstore.KnownYes || r.Versioning != "" || r.ObjectLockKnown != objstore.KnownYes || r.ObjectLock || r.Note != "" {
		t.Fatalf("SeaweedFS's rules of a new bucket: %+v", r)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d requests for lifecycle, encryption, versioning and object lock, want 4", n)
	}
	v := r.Judge([]string{"stars/s1/", "buckets/"})
	if len(v.Expiring) != 0 || v.AbortIncomplete != objstore.VerdictNo || v.Encryption != objstore.VerdictNo ||
		v.Versioning != objstore.VersioningOff || v.ObjectLock != objstore.VerdictNo || v.KeepsDeleted() != objstore.VerdictNo {
		t.Fatalf("verdict on a new bucket: %+v", v)
	}
}

// countQuery counts requests for the bucket rules' subresources.
type countQuery struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countQuery) RoundTrip(r *http.Request) (*http.Response, error) {
	if q := r.URL.Query(); q.Has("lifecycle") || q.Has("encryption") || q.Has("versioning") || q.Has("object-lock") {
		c.n.Add(1)
	}
	return c.base.RoundTrip(r)
}

// lifecycleTransport answers GET ?lifecycle, ?encryption, ?versioning and
// ?object-lock with the documents it holds (AWS's XML), and sends
// everything else on.
type lifecycleTransport struct {
	base       http.RoundTripper
	lifecycle  string // "" answers NoSuchLifecycleConfiguration
	encryption string // "" answers ServerSideEncryptionConfigurationNotFoundError
	versioning string // "" sends the request on to the server
	objectLock string // "" sends the request on to the server; notFound answers ObjectLockConfigurationNotFoundError
}

func (l lifecycleTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	reply := func(code int, body string) *http.Response {
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(bytes.NewBufferString(body)),
			ContentLength: int64(len(body)), Request: r}
	}
	switch {
	case r.Method == http.MethodGet && q.Has("lifecycle"):
		if l.lifecycle == "" {
			return reply(404, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchLifecycleConfiguration</Code><Message>none</Message></Error>`), nil
		}
		return reply(200, l.lifecycle), nil
	case r.Method == http.MethodGet && q.Has("encryption"):
		if l.encryption == "" {
			return reply(404, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServerSideEncryptionConfigurationNotFoundError</Code><Message>none</Message></Error>`), nil
		}
		return reply(200, l.encryption), nil
	case r.Method == http.MethodGet && q.Has("versioning") && l.versioning != "":
		if l.versioning == notImplemented {
			return reply(501, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>no</Message></Error>`), nil
		}
		return reply(200, l.versioning), nil
	case r.Method == http.MethodGet && q.Has("object-lock") && l.objectLock != "":
		switch l.objectLock {
		case notFound:
			return reply(404, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ObjectLockConfigurationNotFoundError</Code><Message>none</Message></Error>`), nil
		case notImplemented:
			return reply(501, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>no</Message></Error>`), nil
		}
		return reply(200, l.objectLock), nil
	}
	return l.base.RoundTrip(r)
}

// Answers of lifecycleTransport other than a document.
const (
	notFound       = "not found"
	notImplemented = "not implemented"
)

const (
	expiringLifecycle = `<?xml version="1.0" encoding="UTF-8"?>
<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Rule><ID>abort-mpu</ID><Filter><Prefix></Prefix></Filter><Status>Enabled</Status>
    <AbortIncompleteMultipartUpload><DaysAfterInitiation>7</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>
  <Rule><ID>expire-nova</ID><Filter><Prefix>nova/stars/</Prefix></Filter><Status>Enabled</Status>
    <Expiration><Days>30</Days></Expiration></Rule>
  <Rule><ID>expire-logs</ID><Filter><And><Prefix>logs/</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter><Status>Enabled</Status>
    <Expiration><Days>1</Days></Expiration></Rule>
  <Rule><ID>disabled</ID><Filter><Prefix></Prefix></Filter><Status>Disabled</Status>
    <Expiration><Days>1</Days></Expiration></Rule>
</LifecycleConfiguration>`
	referenceLifecycle = `<?xml version="1.0" encoding="UTF-8"?>
<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Rule><ID>abort-mpu</ID><Filter><Prefix></Prefix></Filter><Status>Enabled</Status>
    <AbortIncompleteMultipartUpload><DaysAfterInitiation>7</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>
</LifecycleConfiguration>`
	versioningEnabled = `<?xml version="1.0" encoding="UTF-8"?>
<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>`
	versioningSuspended = `<?xml version="1.0" encoding="UTF-8"?>
<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Suspended</Status></VersioningConfiguration>`
	versioningNever = `<?xml version="1.0" encoding="UTF-8"?>
<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>`
	objectLockGovernance = `<?xml version="1.0" encoding="UTF-8"?>
<ObjectLockConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><ObjectLockEnabled>Enabled</ObjectLockEnabled>
  <Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>30</Days></DefaultRetention></Rule></ObjectLockConfiguration>`
	objectLockNoRule = `<?xml version="1.0" encoding="UTF-8"?>
<ObjectLockConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><ObjectLockEnabled>Enabled</ObjectLockEnabled></ObjectLockConfiguration>`
	sseKMS = `<?xml version="1.0" encoding="UTF-8"?>
<ServerSideEncryptionConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>aws:kms</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule>
</ServerSideEncryptionConfiguration>`
)

// TestBucketRulesParseAndJudge: AWS-shaped answers, in front of versitygw,
// are read and judged against the auditor's prefixes: an expiration rule
// over them is named, one over other keys or a disabled one is not; the
// reference setup has no finding; absent documents mean no rule and no
// encryption.
func TestBucketRulesParseAndJudge(t *testing.T) {
	prefixes := []string{"nova/stars/s1/", "nova/buckets/"}
	for _, tc := range []struct {
		name              string
		lifecycle, sse    string
		expiring          []string
		abort, encryption string
	}{
		{"an expiration rule", expiringLifecycle, sseKMS, []string{"expire-nova"}, objstore.VerdictYes, objstore.VerdictYes},
		{"the reference setup", referenceLifecycle, sseKMS, nil, objstore.VerdictYes, objstore.VerdictYes},
		{"nothing configured", "", "", nil, objstore.VerdictNo, objstore.VerdictNo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, objstore.S3Config{KeyPrefix: "nova/", HTTPClient: &http.Client{Transport: lifecycleTransport{
				base: http.DefaultTransport, lifecycle: tc.lifecycle, encryption: tc.sse}}})
			b := newBucket(t, s, "rules")
			r, err := s.BucketRules(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Lifecycle != objstore.KnownYes || r.EncryptionKnown != objstore.KnownYes {
				t.Fatalf("rules not known: %+v", r)
			}
			v := r.Judge(prefixes)
			var ids []string
			for _, e := range v.Expiring {
				ids = append(ids, e.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.expiring, ",") || v.AbortIncomplete != tc.abort || v.Encryption != tc.encryption {
				t.Fatalf("verdict %+v (expiring %v), want expiring %v, abort %s, encryption %s", v, ids, tc.expiring, tc.abort, tc.encryption)
			}
			if len(v.Expiring) > 0 && !strings.Contains(v.Expiring[0].String(), `after 30 days over prefix "nova/stars/"`) {
				t.Fatalf("the rule is not named usefully: %s", v.Expiring[0])
			}
		})
	}
}

// TestBucketRulesVersioningAndObjectLock: AWS-shaped versioning and Object
// Lock answers, in front of versitygw, are read and judged: versioning
// enabled or suspended, or an Object Lock configuration (with a default
// retention or without), keeps deleted bytes, named; a bucket that never
// had versioning and has no Object Lock does not; a server that does not
// implement the versioning read leaves it unknown (not an error, and not
// known to keep anything), and one that does not implement the Object
// Lock read changes nothing once versioning is known never enabled.
func TestBucketRulesVersioningAndObjectLock(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		versioning, objectLock string
		wantVersioning         string
		wantLock, keeps, why   string
	}{
		{"versioning enabled", versioningEnabled, notFound, objstore.VersioningEnabled, objstore.VerdictNo, objstore.VerdictYes, "versioning enabled"},
		{"versioning suspended", versioningSuspended, notFound, objstore.VersioningSuspended, objstore.VerdictNo, objstore.VerdictYes, "versioning suspended"},
		{"object lock with a retention", versioningEnabled, objectLockGovernance, objstore.VersioningEnabled, objstore.VerdictYes, objstore.VerdictYes,
			"versioning enabled and Object Lock"},
		{"object lock alone", versioningNever, objectLockNoRule, objstore.VersioningOff, objstore.VerdictYes, objstore.VerdictYes, "Object Lock"},
		{"never versioned", versioningNever, notFound, objstore.VersioningOff, objstore.VerdictNo, objstore.VerdictNo, ""},
		{"versioning not implemented", notImplemented, notFound, objstore.VerdictUnknown, objstore.VerdictNo, objstore.VerdictUnknown, ""},
		{"object lock not implemented", versioningNever, notImplemented, objstore.VersioningOff, objstore.VerdictUnknown, objstore.VerdictNo, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, objstore.S3Config{HTTPClient: &http.Client{Transport: lifecycleTransport{
				base: http.DefaultTransport, lifecycle: referenceLifecycle, encryption: sseKMS,
				versioning: tc.versioning, objectLock: tc.objectLock}}})
			b := newBucket(t, s, "rules")
			r, err := s.BucketRules(context.Background(), b)
			if err != nil {
				t.Fatalf("rules: %v", err)
			}
			v := r.Judge([]string{"stars/s1/", "buckets/"})
			if v.Versioning != tc.wantVersioning || v.ObjectLock != tc.wantLock || v.KeepsDeleted() != tc.keeps || v.KeepsDeletedWhy() != tc.why {
				t.Fatalf("verdict %+v (keeps deleted %s, why %q), want versioning %s, object lock %s, keeps deleted %s, why %q",
					v, v.KeepsDeleted(), v.KeepsDeletedWhy(), tc.wantVersioning, tc.wantLock, tc.keeps, tc.why)
			}
			if (tc.versioning == notImplemented || tc.objectLock == notImplemented) && !strings.Contains(v.Note, "501 NotImplemented") {
				t.Fatalf("the note does not say what the server answered: %q", v.Note)
			}
		})
	}
}

// TestBucketRulesOfAVersionedVersitygw: on a versitygw of the test's own
// with versioning (--versioning-dir), a bucket whose versioning is then
// enabled reads as keeping deleted bytes, and it does (a DELETE leaves the
// version); suspended, it still does.
func TestBucketRulesOfAVersionedVersitygw(t *testing.T) {
	env := testenv.StartVersitygw(t, "--versioning-dir", t.TempDir())
	versionedBucketKeepsDeleted(t, newStoreAt(t, env, objstore.S3Config{}))
}

// TestBucketRulesOfAVersionedSeaweedFS: the same on SeaweedFS, which
// versions any bucket.
func TestBucketRulesOfAVersionedSeaweedFS(t *testing.T) {
	if s := testenv.S3(t).Server; s != testenv.ServerSeaweedFS {
		t.Skipf("SeaweedFS only: versioning on the test server itself (versitygw needs a server of its own: TestBucketRulesOfAVersionedVersitygw); the test S3 server is %s", s)
	}
	versionedBucketKeepsDeleted(t, newStore(t, objstore.S3Config{}))
}

// versionedBucketKeepsDeleted: a new bucket of s reads as never versioned;
// once its versioning is enabled, a DELETE leaves the version behind a
// marker, and enabled or suspended it reads as keeping deleted bytes.
func versionedBucketKeepsDeleted(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	b := newBucket(t, s, "versioned")
	r, err := s.BucketRules(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Judge(nil); v.Versioning != objstore.VersioningOff || v.KeepsDeleted() != objstore.VerdictNo {
		t.Fatalf("a new bucket: %+v", v)
	}
	setVersioning := func(status types.BucketVersioningStatus) {
		t.Helper()
		if _, err := s.Client().PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &b,
			VersioningConfiguration: &types.VersioningConfiguration{Status: status}}); err != nil {
			t.Fatalf("put bucket versioning %s: %v", status, err)
		}
	}
	setVersioning(types.BucketVersioningStatusEnabled)
	key := "buckets/k"
	if _, err := s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: &key, Body: strings.NewReader("erased bytes")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b, Key: &key}); err != nil {
		t.Fatal(err)
	}
	vs, err := s.Client().ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &b})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs.Versions) != 1 || len(vs.DeleteMarkers) != 1 {
		t.Fatalf("after a DELETE on the versioned bucket: %d versions, %d delete markers; want the version kept behind a marker",
			len(vs.Versions), len(vs.DeleteMarkers))
	}
	for _, tc := range []struct {
		status types.BucketVersioningStatus
		want   string
	}{{types.BucketVersioningStatusEnabled, objstore.VersioningEnabled}, {types.BucketVersioningStatusSuspended, objstore.VersioningSuspended}} {
		setVersioning(tc.status)
		r, err := s.BucketRules(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		v := r.Judge(nil)
		if v.Versioning != tc.want || v.KeepsDeleted() != objstore.VerdictYes || v.KeepsDeletedWhy() != "versioning "+tc.want {
			t.Fatalf("versioning %s: verdict %+v (keeps deleted %s, %q)", tc.status, v, v.KeepsDeleted(), v.KeepsDeletedWhy())
		}
	}
}
