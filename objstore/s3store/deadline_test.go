package s3store

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// wantClass is the operation class of every S3 operation the backend
// issues, as the configuration keys document them.
var wantClass = map[string]objstore.OpClass{
	"GetObject": objstore.OpRead, "HeadObject": objstore.OpRead,
	"PutObject": objstore.OpWrite, "UploadPart": objstore.OpWrite,
	"UploadPartCopy": objstore.OpCopy,
	"DeleteObjects":  objstore.OpDelete,
	"ListObjectsV2":  objstore.OpList, "ListParts": objstore.OpList, "ListMultipartUploads": objstore.OpList,
	"CreateMultipartUpload": objstore.OpControl, "CompleteMultipartUpload": objstore.OpControl,
	"AbortMultipartUpload": objstore.OpControl, "GetBucketLifecycleConfiguration": objstore.OpControl,
	"GetBucketEncryption": objstore.OpControl, "GetBucketVersioning": objstore.OpControl,
	"GetObjectLockConfiguration": objstore.OpControl,
}

// TestEveryOperationHasAClass: every operation this package runs through
// do is in opClass, in the class the keys document; none falls back to
// the longest deadline unseen.
func TestEveryOperationHasAClass(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\.do\(ctx, "(\w+)"`)
	seen := 0
	for _, f := range files {
		if filepath.Ext(f) != ".go" || regexp.MustCompile(`_test\.go$`).MatchString(f) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			seen++
			got, ok := opClass(m[1])
			if !ok || got != wantClass[m[1]] {
				t.Errorf("%s: %s is in class %q (known %v), want %q", f, m[1], got, ok, wantClass[m[1]])
			}
		}
	}
	if seen < len(wantClass) {
		t.Fatalf("found %d calls of do, fewer than the %d operations", seen, len(wantClass))
	}
	for op, want := range wantClass {
		if got, _ := opClass(op); got != want {
			t.Errorf("%s: class %q, want %q", op, got, want)
		}
	}
}

// deadlineRecorder is a transport that answers without a server: a
// multipart upload is created, everything else is refused (403, so no
// retry); it records the deadline each operation's request carried.
type deadlineRecorder struct {
	mu   sync.Mutex
	left map[string]time.Duration // op -> time left before its deadline
}

func (d *deadlineRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	op := awsmiddleware.GetOperationName(r.Context())
	dl, ok := r.Context().Deadline()
	d.mu.Lock()
	if ok {
		d.left[op] = time.Until(dl)
	} else {
		d.left[op] = -1
	}
	d.mu.Unlock()
	if r.Body != nil {
		r.Body.Close()
	}
	if op == "CreateMultipartUpload" {
		return answer(r, 200, `<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>`), nil
	}
	return answer(r, 403, errorXML("AccessDenied")), nil
}

// TestAttemptDeadlineByClass: each attempt carries the deadline of its
// operation's class. The classes get deadlines hours apart, so the time
// left, rounded to the hour, names the class that set it.
func TestAttemptDeadlineByClass(t *testing.T) {
	rec := &deadlineRecorder{left: map[string]time.Duration{}}
	hours := objstore.AttemptTimeouts{Read: time.Hour, Write: 2 * time.Hour, Copy: 3 * time.Hour,
		Delete: 4 * time.Hour, List: 5 * time.Hour, Control: 6 * time.Hour}
	s, err := New(context.Background(), overDefaults(objstore.S3Config{Endpoint: "http://s3.test", PathStyle: true,
		AccessKey: "a", SecretKey: "b", HTTPClient: &http.Client{Transport: rec}, AttemptTimeouts: hours,
		Checksum: objstore.ChecksumParts, VerifyReadback: true}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, _ = s.GetRange(ctx, "b", "k", 0, 10)
	_, _ = s.Head(ctx, "b", "k")
	_ = s.PutIfAbsent(ctx, "b", "k", []byte("x"))
	_ = s.Delete(ctx, "b", []string{"k"})
	_ = s.List(ctx, "b", "", func(objstore.ObjectInfo) error { return nil })
	_, _ = s.ListParts(ctx, "b", "k", "u1")
	_, _ = s.ListAssemblies(ctx, "b", "k")
	_ = s.AbortAssembly(ctx, "b", "k", "u1")
	_, _ = s.BucketRules(ctx, "b")
	// CreateMultipartUpload, then UploadPartCopy of a copied range, and
	// UploadPart of local bytes over a part's size
	_, _ = s.Assemble(ctx, objstore.AssembleRequest{Bucket: "b", Key: "copied", Stager: storetest.NewMemStager(),
		Pieces: []objstore.Piece{objstore.RangePiece("b", "src", 0, 8<<20)}})
	_, _ = s.Assemble(ctx, objstore.AssembleRequest{Bucket: "b", Key: "uploaded", Stager: storetest.NewMemStager(),
		Pieces: []objstore.Piece{objstore.DataPiece(make([]byte, 20<<20))}})

	for op, class := range wantClass {
		left, ok := rec.left[op]
		if !ok {
			if op != "CompleteMultipartUpload" { // needs parts that succeed
				t.Errorf("%s was not sent", op)
			}
			continue
		}
		if got, want := left.Round(time.Hour), hours.Of(class); got != want {
			t.Errorf("%s: attempt deadline %v away, want %s's %v", op, left, class, want)
		}
	}
	for op := range rec.left {
		if _, ok := wantClass[op]; !ok {
			t.Errorf("%s was sent and has no expected class", op)
		}
	}
}

// timedRecorder is an objstore.Observer that keeps each attempt's status
// and time, and the retries.
type timedRecorder struct {
	mu       sync.Mutex
	requests map[string][]string        // op -> status of each attempt
	took     map[string][]time.Duration // op -> time of each attempt
	retries  map[string]int
}

func newTimedRecorder() *timedRecorder {
	return &timedRecorder{requests: map[string][]string{}, took: map[string][]time.Duration{}, retries: map[string]int{}}
}

func (r *timedRecorder) Request(op, status string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests[op] = append(r.requests[op], status)
	r.took[op] = append(r.took[op], took)
}

func (r *timedRecorder) Retry(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries[op]++
}

func (r *timedRecorder) Bytes(string, int64) {}

// TestStalledAttemptsByClass: versitygw behind a proxy that holds every
// forwarded read for 250 ms, so no request can be answered in under
// 500 ms. With a read deadline of 100 ms and 30 s for the rest, a GET is
// cut at the read deadline on each attempt and retried, and the error
// names the read class and its deadline; the UploadPartCopy of an
// assembly through the same proxy outlives the read deadline and
// completes on its first attempt.
func TestStalledAttemptsByClass(t *testing.T) {
	env := testenv.S3(t)
	direct := newStoreAt(t, env, objstore.S3Config{})
	b := newBucket(t, direct, "stall")
	ctx := context.Background()
	if err := direct.PutIfAbsent(ctx, b, "src", storetest.Bytes(3, 8<<20)); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	slow := env
	slow.Endpoint = "http://" + proxy.Addr()
	const readDeadline = 100 * time.Millisecond
	deadlines := objstore.UniformAttemptTimeouts(30 * time.Second)
	deadlines.Read = readDeadline
	s := newStoreAt(t, slow, objstore.S3Config{MaxAttempts: 2, AttemptTimeouts: deadlines,
		BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	proxy.Delay(250 * time.Millisecond)

	rec := newTimedRecorder()
	_, _, err = s.GetRange(objstore.WithObserver(ctx, rec), b, "src", 0, 100)
	var ad *attemptDeadlineError
	if !errors.As(err, &ad) || ad.Class != objstore.OpRead || ad.Deadline != readDeadline || !objstore.IsRetryable(err) {
		t.Fatalf("stalled GET: %v, want a retryable error naming the read deadline", err)
	}
	if got := rec.requests["GetObject"]; len(got) != 2 || got[0] != "timeout" || got[1] != "timeout" || rec.retries["GetObject"] != 1 {
		t.Fatalf("stalled GET: attempts %v, retries %d; want two timeouts and one retry", got, rec.retries["GetObject"])
	}
	t.Logf("stalled GET: %v", err)

	rec = newTimedRecorder()
	res, err := s.Assemble(objstore.WithObserver(ctx, rec), objstore.AssembleRequest{Bucket: b, Key: "copied",
		Stager: storetest.NewMemStager(), Pieces: []objstore.Piece{objstore.RangePiece(b, "src", 0, 8<<20)}})
	if err != nil {
		t.Fatalf("assemble through the slow proxy: %v", err)
	}
	if got := rec.requests["UploadPartCopy"]; len(got) != 1 || got[0] != "200" || rec.retries["UploadPartCopy"] != 0 {
		t.Fatalf("UploadPartCopy: attempts %v, retries %d; want one that succeeded", got, rec.retries["UploadPartCopy"])
	}
	if took := rec.took["UploadPartCopy"][0]; took <= readDeadline {
		t.Fatalf("the copy attempt took %v, not beyond the read deadline: the proxy did not hold it", took)
	}
	t.Logf("copy attempt %v; %+v", rec.took["UploadPartCopy"][0], res)
}
