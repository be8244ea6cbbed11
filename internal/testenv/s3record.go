package testenv

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// S3Call is one S3 request as the recorder names it.
type S3Call struct {
	// Op is the S3 API operation (the s3ops.go table's name); "" when no
	// row of the table matches the request.
	Op     string
	Bucket string
	// Key is the object key (for DeleteObjects, one key of its body; a
	// call per key).
	Key string
	// Source is a copy's source, "bucket/key" unescaped.
	Source string
	// Request is the request line of a call not named (Op ""): what to add
	// to the table.
	Request string
}

// S3Recorder is an HTTP reverse proxy in front of the test S3 server that
// names the S3 operation of every request it forwards (from the method,
// the path-style path, the query and the copy-source header, never from
// the client's own say) and records it. A subprocess pointed at Env's
// endpoint is recorded as well as a store in the test. The requests are
// forwarded unchanged (the client signed them for the proxy's host,
// which versitygw checks against the Host header it receives).
type S3Recorder struct {
	env   S3Env
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[S3Call]int
}

// deleteBodyMax bounds the DeleteObjects body the recorder reads (1000
// keys of up to 1 KiB, in XML).
const deleteBodyMax = 4 << 20

// RecordS3 starts a recorder in front of the test S3 server e, stopped
// when the test ends.
func RecordS3(t testing.TB, e S3Env) *S3Recorder {
	t.Helper()
	target, err := url.Parse(e.Endpoint)
	if err != nil {
		t.Fatalf("s3 recorder: parse %q: %v", e.Endpoint, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the host the client signed
		},
		Transport: tr,
		// a client killed mid-request (the crash matrix's SIGKILL) is
		// expected, not news
		ErrorLog: log.New(io.Discard, "", 0),
	}
	r := &S3Recorder{calls: map[S3Call]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		calls, err := nameS3(req)
		if err != nil { // recorded as not named, so the check says why
			calls = []S3Call{{Request: req.Method + " " + req.URL.RequestURI() + ": " + err.Error()}}
		}
		r.mu.Lock()
		for _, c := range calls {
			r.calls[c]++
		}
		r.mu.Unlock()
		if err != nil {
			http.Error(w, "s3 recorder: "+err.Error(), http.StatusBadRequest)
			return
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		r.srv.Close()
		tr.CloseIdleConnections()
	})
	r.env = e
	r.env.Endpoint = r.srv.URL
	return r
}

// Env is the test server as seen through the recorder.
func (r *S3Recorder) Env() S3Env { return r.env }

// Calls are the calls recorded so far, each with how many times it came.
func (r *S3Recorder) Calls() map[S3Call]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[S3Call]int, len(r.calls))
	for c, n := range r.calls {
		out[c] = n
	}
	return out
}

// nameS3 names a path-style request's operation: one call, or one per key
// of a DeleteObjects body (which it reads and puts back). A request it
// cannot name is one call with Op "" and its request line.
func nameS3(req *http.Request) ([]S3Call, error) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	src := req.Header.Get("X-Amz-Copy-Source")
	op := matchS3Operation(req.Method, key != "", req.URL.Query(), src != "")
	if op == nil || bucket == "" {
		return []S3Call{{Bucket: bucket, Key: key, Request: req.Method + " " + req.URL.RequestURI()}}, nil
	}
	c := S3Call{Op: op.Name, Bucket: bucket, Key: key}
	if src != "" {
		s, err := url.PathUnescape(strings.TrimPrefix(src, "/"))
		if err != nil {
			return nil, fmt.Errorf("copy source %q: %w", src, err)
		}
		c.Source, _, _ = strings.Cut(s, "?") // a ?versionId names the same object
	}
	if op.Name != "DeleteObjects" {
		return []S3Call{c}, nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, deleteBodyMax+1))
	if err != nil {
		return nil, fmt.Errorf("read DeleteObjects body: %w", err)
	}
	if len(body) > deleteBodyMax {
		return nil, fmt.Errorf("DeleteObjects body over %d bytes", deleteBodyMax)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var del struct {
		Objects []struct {
			Key string `xml:"Key"`
		} `xml:"Object"`
	}
	if err := xml.Unmarshal(body, &del); err != nil {
		return nil, fmt.Errorf("parse DeleteObjects body: %w", err)
	}
	calls := make([]S3Call, 0, len(del.Objects))
	for _, o := range del.Objects {
		c.Key = o.Key
		calls = append(calls, c)
	}
	return calls, nil
}
