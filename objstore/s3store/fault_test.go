package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// opOf names the S3 operation of a path-style request.
func opOf(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		return "CreateMultipartUpload"
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return "CompleteMultipartUpload"
	case r.Method == http.MethodPost && q.Has("delete"):
		return "DeleteObjects"
	case r.Method == http.MethodPut && q.Has("partNumber") && r.Header.Get("x-amz-copy-source") != "":
		return "UploadPartCopy"
	case r.Method == http.MethodPut && q.Has("partNumber"):
		return "UploadPart"
	case r.Method == http.MethodPut && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0:
		return "CreateBucket"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodGet && q.Has("uploadId"):
		return "ListParts"
	case r.Method == http.MethodGet && q.Has("list-type"):
		return "ListObjectsV2"
	case r.Method == http.MethodGet:
		return "GetObject"
	case r.Method == http.MethodHead:
		return "HeadObject"
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return "AbortMultipartUpload"
	}
	return r.Method
}

// fault is what the transport does to a matching request.
type fault int

const (
	slowDown      fault = iota // 503 SlowDown, the server never sees it
	resetBody                  // forward, then reset the response mid-body
	resetRequest               // reset while sending the request body
	error200                   // 200 whose body is an S3 error, not forwarded
	error200After              // forward, then replace the answer with a 200 error
	slow                       // answer only after the attempt's deadline
	forbidden                  // 403 AccessDenied
)

type rule struct {
	op    string
	fault fault
	times int // how many matching requests to hit; <0: all
}

// faultyTransport injects faults in front of the real server.
type faultyTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	rule []*rule
	hits map[string]int // requests seen, by op
}

func (ft *faultyTransport) set(rules ...rule) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.rule = nil
	for _, r := range rules {
		ft.rule = append(ft.rule, &r)
	}
	ft.hits = map[string]int{}
}

func (ft *faultyTransport) seen(op string) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.hits[op]
}

func errorXML(code string) string {
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message><RequestId>x</RequestId></Error>`, code)
}

func answer(r *http.Request, status int, body string) *http.Response {
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}
}

// resetReader returns some bytes, then a connection reset.
type resetReader struct {
	r    io.ReadCloser
	left int
}

func (rr *resetReader) Read(p []byte) (int, error) {
	if rr.left <= 0 {
		return 0, syscall.ECONNRESET
	}
	if len(p) > rr.left {
		p = p[:rr.left]
	}
	n, err := rr.r.Read(p)
	rr.left -= n
	return n, err
}

func (rr *resetReader) Close() error { return rr.r.Close() }

func (ft *faultyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	op := opOf(r)
	ft.mu.Lock()
	ft.hits[op]++
	var hit *rule
	for _, ru := range ft.rule {
		if ru.op == op && ru.times != 0 {
			ru.times--
			hit = ru
			break
		}
	}
	ft.mu.Unlock()
	if hit == nil {
		return ft.base.RoundTrip(r)
	}
	drain := func() {
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body) // drained for the connection's reuse, not read
			r.Body.Close()
		}
	}
	switch hit.fault {
	case slowDown:
		drain()
		return answer(r, 503, errorXML("SlowDown")), nil
	case forbidden:
		drain()
		return answer(r, 403, errorXML("AccessDenied")), nil
	case error200:
		drain()
		return answer(r, 200, errorXML("InternalError")), nil
	case resetRequest:
		if r.Body != nil {
			_, _ = io.CopyN(io.Discard, r.Body, 1000) // a partial read before the reset, not checked
			r.Body.Close()
		}
		return nil, fmt.Errorf("write request: %w", syscall.ECONNRESET)
	case slow:
		drain()
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	resp, err := ft.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	switch hit.fault {
	case resetBody:
		resp.Body = &resetReader{r: resp.Body, left: int(max(resp.ContentLength/2, 0))}
	case error200After:
		_, _ = io.Copy(io.Discard, resp.Body) // the real answer discarded, not read
		resp.Body.Close()
		return answer(r, 200, errorXML("InternalError")), nil
	}
	return resp, nil
}

// TestFaults assembles through injected faults: each case ends in success
// after retries with the right bytes, or in a clear error with no object
// (never a wrong one).
func TestFaults(t *testing.T) {
	ft := &faultyTransport{base: http.DefaultTransport.(*http.Transport).Clone(), hits: map[string]int{}}
	reg := prometheus.NewRegistry()
	m, err := objstore.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	raw := newStore(t, objstore.S3Config{HTTPClient: &http.Client{Transport: ft},
		MaxAttempts: 4, AttemptTimeouts: objstore.UniformAttemptTimeouts(2 * time.Second), BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	s := objstore.Instrument(raw, m)
	b := newBucket(t, raw, "fault")
	ctx := context.Background()
	src := storetest.Bytes(42, 40<<20)
	if err := s.PutIfAbsent(ctx, b, "src", src); err != nil {
		t.Fatal(err)
	}
	// copied ranges (one lending its head), fetched ranges, local bytes
	pieces := []objstore.Piece{
		objstore.RangePiece(b, "src", 0, 8<<20),
		objstore.RangePiece(b, "src", 9<<20, 100<<10),
		objstore.DataPiece([]byte("local bytes")),
		objstore.RangePiece(b, "src", 10<<20, 12<<20),
		objstore.RangePiece(b, "src", 25<<20, 3<<20),
		objstore.DataPiece([]byte("footer")),
	}
	var want []byte
	for _, p := range pieces {
		if p.SrcKey != "" {
			want = append(want, src[p.Off:p.Off+p.Len]...)
		} else {
			want = append(want, p.Data...)
		}
	}
	req := func(key string) objstore.AssembleRequest {
		return objstore.AssembleRequest{Bucket: b, Key: key, Pieces: pieces, Stager: storetest.NewMemStager(),
			ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true}
	}
	// check: the key holds exactly want, or nothing
	check := func(t *testing.T, key string, mustExist bool) {
		t.Helper()
		ft.set()
		a, err := raw.Head(ctx, b, key)
		if errors.Is(err, objstore.ErrNotFound) && !mustExist {
			return
		}
		if err != nil {
			t.Fatalf("head %s: %v", key, err)
		}
		if got := storetest.ReadAll(t, raw, b, key); a.Size != int64(len(want)) || !bytes.Equal(got, want) {
			t.Fatalf("%s holds a wrong object (%d bytes)", key, len(got))
		}
	}
	cases := []struct {
		name  string
		rules []rule
	}{
		{"503 burst", []rule{{"UploadPartCopy", slowDown, 3}, {"GetObject", slowDown, 3}, {"UploadPart", slowDown, 2}, {"CreateMultipartUpload", slowDown, 2}, {"CompleteMultipartUpload", slowDown, 3}}},
		{"resets mid-body", []rule{{"GetObject", resetBody, 3}, {"UploadPart", resetRequest, 2}}},
		{"200 with an error body", []rule{{"CompleteMultipartUpload", error200, 1}, {"UploadPartCopy", error200, 2}, {"GetObject", error200, 2}}},
		{"completed, answer lost", []rule{{"CompleteMultipartUpload", error200After, 1}}},
		{"slow responses", []rule{{"UploadPartCopy", slow, 1}, {"GetObject", slow, 1}, {"CompleteMultipartUpload", slow, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "out/" + strings.ReplaceAll(c.name, " ", "-")
			ft.set(c.rules...)
			res, err := s.Assemble(ctx, req(key))
			if err != nil {
				t.Fatalf("assemble: %v", err)
			}
			for _, r := range c.rules {
				if r.times > 0 && ft.seen(r.op) <= r.times {
					t.Errorf("%s seen %d times, fault meant for %d", r.op, ft.seen(r.op), r.times)
				}
			}
			check(t, key, true)
			t.Logf("%+v", res)
		})
	}

	t.Run("storm beyond the attempts, then resume", func(t *testing.T) {
		key := "out/storm"
		ft.set(rule{"UploadPartCopy", slowDown, -1})
		r := req(key)
		res, err := s.Assemble(ctx, r)
		var te *objstore.TransientError
		if !errors.As(err, &te) || !objstore.IsRetryable(err) {
			t.Fatalf("assemble in a storm: %v, want a retryable TransientError", err)
		}
		check(t, key, false)
		if res.UploadID == "" {
			t.Fatal("no upload to resume")
		}
		r.UploadID = res.UploadID
		if _, err := s.Assemble(ctx, r); err != nil {
			t.Fatalf("resume after the storm: %v", err)
		}
		check(t, key, true)
	})

	t.Run("past the deadline", func(t *testing.T) {
		key := "out/deadline"
		ft.set(rule{"GetObject", slow, -1}, rule{"UploadPartCopy", slow, -1})
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		res, err := s.Assemble(dctx, req(key))
		if err == nil || !objstore.IsRetryable(err) {
			t.Fatalf("assemble past the deadline: %v, want a retryable error", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("gave up after %v", d)
		}
		check(t, key, false)
		if res.UploadID != "" {
			if err := s.AbortAssembly(ctx, b, key, res.UploadID); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("4xx not retried", func(t *testing.T) {
		ft.set(rule{"PutObject", forbidden, 1})
		err := s.PutIfAbsent(ctx, b, "denied", []byte("x"))
		if err == nil || objstore.IsRetryable(err) || ft.seen("PutObject") != 1 {
			t.Fatalf("403: %v after %d attempts, want one attempt and a non-retryable error", err, ft.seen("PutObject"))
		}
		ft.set(rule{"HeadObject", slowDown, 1})
		if _, err := s.Head(ctx, b, "denied"); !errors.Is(err, objstore.ErrNotFound) || ft.seen("HeadObject") != 2 {
			t.Fatalf("head after a 503: %v after %d attempts", err, ft.seen("HeadObject"))
		}
	})

	t.Run("put whose answer is lost", func(t *testing.T) {
		ft.set(rule{"PutObject", error200After, 1})
		data := []byte("slot bytes")
		if err := s.PutIfAbsent(ctx, b, "lost", data); err != nil {
			t.Fatalf("put: %v", err)
		}
		ft.set()
		if got := storetest.ReadAll(t, raw, b, "lost"); !bytes.Equal(got, data) {
			t.Fatalf("lost put holds %q", got)
		}
		if err := s.PutIfAbsent(ctx, b, "lost", data); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("a fresh put of the same bytes: %v, want ErrExists", err)
		}
	})

	// A server may refuse a taken key while the body is on its way and
	// reset the connection (versitygw does); the retry asks with a HEAD
	// first and does not resend a body it would refuse the same way.
	t.Run("put reset while sending", func(t *testing.T) {
		ft.set()
		if err := s.PutIfAbsent(ctx, b, "taken", []byte("theirs")); err != nil {
			t.Fatal(err)
		}
		ft.set(rule{"PutObject", resetRequest, -1})
		if err := s.PutIfAbsent(ctx, b, "taken", []byte("ours")); !errors.Is(err, objstore.ErrExists) || objstore.IsRetryable(err) {
			t.Fatalf("put on a taken key, reset: %v, want ErrExists", err)
		}
		if p, h := ft.seen("PutObject"), ft.seen("HeadObject"); p != 1 || h != 1 {
			t.Fatalf("taken key: %d PUTs and %d HEADs, want one of each", p, h)
		}
		ft.set(rule{"PutObject", resetRequest, 1})
		if err := s.PutIfAbsent(ctx, b, "free", []byte("ours")); err != nil {
			t.Fatalf("put on a free key after a reset: %v", err)
		}
		if p, h := ft.seen("PutObject"), ft.seen("HeadObject"); p != 2 || h != 1 {
			t.Fatalf("free key: %d PUTs and %d HEADs, want 2 and 1", p, h)
		}
		ft.set(rule{"PutObject", resetRequest, -1})
		if err := s.PutIfAbsent(ctx, b, "free", []byte("ours")); err != nil {
			t.Fatalf("a put reset, the key holding exactly its bytes: %v, want it taken as ours", err)
		}
		ft.set()
		for key, want := range map[string]string{"taken": "theirs", "free": "ours"} {
			if got := storetest.ReadAll(t, raw, b, key); string(got) != want {
				t.Fatalf("%s holds %q, want %q", key, got, want)
			}
		}
	})

	if got := testutil.ToFloat64(m.Retries().WithLabelValues("UploadPartCopy")); got == 0 {
		t.Error("no UploadPartCopy retries counted")
	}
	if got := testutil.ToFloat64(m.Requests().WithLabelValues("UploadPartCopy", "503")); got == 0 {
		t.Error("no 503 UploadPartCopy requests counted")
	}
	// Every attempt is timed: the latency histogram of an operation counts
	// as many observations as its requests, whatever their status.
	for _, op := range []string{"UploadPartCopy", "PutObject", "HeadObject"} {
		var requests float64
		ch := make(chan prometheus.Metric, 100)
		m.Requests().Collect(ch)
		close(ch)
		for c := range ch {
			var d dto.Metric
			if err := c.Write(&d); err != nil {
				t.Fatal(err)
			}
			for _, l := range d.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == op {
					requests += d.GetCounter().GetValue()
				}
			}
		}
		h := &dto.Metric{}
		if err := m.Latency().WithLabelValues(op).(prometheus.Metric).Write(h); err != nil {
			t.Fatal(err)
		}
		if n := float64(h.GetHistogram().GetSampleCount()); n == 0 || n != requests {
			t.Errorf("%s: %v latency observations for %v requests", op, n, requests)
		}
	}
}
