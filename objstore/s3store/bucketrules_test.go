package s3store

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nova/auditor/objstore"
)

// TestBucketRulesOfVersitygwAreUnknown: versitygw 1.8.0 answers 501
// NotImplemented to the lifecycle and encryption reads; that reads as
// unknown, not as a failure, and is asked once (a 501 is not retried).
func TestBucketRulesOfVersitygwAreUnknown(t *testing.T) {
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
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d requests for lifecycle and encryption, want 2 (a 501 is a definite answer)", n)
	}
	v := r.Judge([]string{"stars/s1/", "buckets/"})
	if len(v.Expiring) != 0 || v.AbortIncomplete != objstore.VerdictUnknown || v.Encryption != objstore.VerdictUnknown {
		t.Fatalf("verdict on unknown rules: %+v", v)
	}
}

// countQuery counts requests for ?lifecycle and ?encryption.
type countQuery struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countQuery) RoundTrip(r *http.Request) (*http.Response, error) {
	if q := r.URL.Query(); q.Has("lifecycle") || q.Has("encryption") {
		c.n.Add(1)
	}
	return c.base.RoundTrip(r)
}

// LifecycleTransport answers GET ?lifecycle and GET ?encryption with the
// documents it holds (AWS's XML), and sends everything else on.
type lifecycleTransport struct {
	base       http.RoundTripper
	lifecycle  string // "" answers NoSuchLifecycleConfiguration
	encryption string // "" answers ServerSideEncryptionConfigurationNotFoundError
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
	}
	return l.base.RoundTrip(r)
}

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
