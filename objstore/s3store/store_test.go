package s3store

import (
	"context"
	"errors"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// overDefaults is objstore.DefaultS3Config with cfg's non-zero fields
// over it: the tests name only what they change, and New takes the
// complete configuration.
func overDefaults(cfg objstore.S3Config) objstore.S3Config {
	full := objstore.DefaultS3Config()
	fv, cv := reflect.ValueOf(&full).Elem(), reflect.ValueOf(cfg)
	for i := range cv.NumField() {
		if !cv.Field(i).IsZero() {
			fv.Field(i).Set(cv.Field(i))
		}
	}
	return full
}

// newStore returns a store on the test server; cfg's zero fields default
// (overDefaults), and the server's endpoint and credentials are filled in.
func newStore(t testing.TB, cfg objstore.S3Config) *Store {
	t.Helper()
	return newStoreAt(t, testenv.S3(t), cfg)
}

// newStoreAt is newStore on the given server.
func newStoreAt(t testing.TB, env testenv.S3Env, cfg objstore.S3Config) *Store {
	t.Helper()
	cfg.Endpoint, cfg.Region, cfg.PathStyle = env.Endpoint, env.Region, true
	cfg.AccessKey, cfg.SecretKey = env.AccessKey, env.SecretKey
	if cfg.Checksum == "" {
		// versitygw 1.8.0 misreports ranged copies' checksums (TestProbe)
		cfg.Checksum, cfg.VerifyReadback = objstore.ChecksumParts, true
	}
	s, err := New(context.Background(), overDefaults(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newBucket creates a fresh bucket through the S3 API.
func newBucket(t testing.TB, s *Store, prefix string) string {
	t.Helper()
	b := testenv.BucketName(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b}); err != nil {
		t.Fatalf("create bucket %s: %v", b, err)
	}
	return b
}

func TestContract(t *testing.T) {
	for name, cfg := range map[string]objstore.S3Config{
		"plain":         {},
		"prefix":        {KeyPrefix: "nova/"},
		"small-parts":   {PartSize: 10 << 20, CopyConcurrency: 2},
		"custom-client": {HTTPClient: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}},
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, cfg)
			storetest.Run(t, storetest.Harness{Store: s, NewBucket: func(t *testing.T) string { return newBucket(t, s, "ct") }})
		})
	}
}

// TestConnectTimeout: the client's dialer and TLS handshake are bounded by
// the connect timeout, so a zone that does not accept connections (a
// directory bucket's zone gone dark) is found after it rather than after a
// whole attempt timeout. (This sandbox answers every outbound address, so
// an unreachable endpoint cannot be dialled for real here.)
func TestConnectTimeout(t *testing.T) {
	st, err := New(context.Background(), overDefaults(objstore.S3Config{Endpoint: "http://127.0.0.1:9", Region: "us-east-1",
		PathStyle: true, AccessKey: "a", SecretKey: "b", ConnectTimeout: 1500 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	bc, ok := st.Client().Options().HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		t.Fatalf("HTTP client %T, want the SDK's buildable client", st.Client().Options().HTTPClient)
	}
	if d := bc.GetDialer().Timeout; d != 1500*time.Millisecond {
		t.Fatalf("dial timeout %v", d)
	}
	if h := bc.GetTransport().TLSHandshakeTimeout; h != 1500*time.Millisecond {
		t.Fatalf("TLS handshake timeout %v", h)
	}
}

// TestPutIfAbsentLargeOnTakenKey: versitygw refuses a conditional PUT on a
// taken key before reading its body and resets the connection, about half
// the time for 6 MiB; the put must still answer ErrExists (not give up as
// transient), every time.
func TestPutIfAbsentLargeOnTakenKey(t *testing.T) {
	s := newStore(t, objstore.S3Config{BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	b := newBucket(t, s, "taken")
	ctx := context.Background()
	if err := s.PutIfAbsent(ctx, b, "k", storetest.Bytes(1, 6<<20)); err != nil {
		t.Fatal(err)
	}
	other := storetest.Bytes(2, 6<<20)
	for i := range 20 {
		if err := s.PutIfAbsent(ctx, b, "k", other); !errors.Is(err, objstore.ErrExists) || objstore.IsRetryable(err) {
			t.Fatalf("put %d on a taken key: %v, want ErrExists", i, err)
		}
	}
}
