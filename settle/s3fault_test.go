package settle_test

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// flaky is an http.RoundTripper in front of the real server that injects
// S3 faults at a rate: 503 SlowDown, a connection reset mid-body, and a 200
// whose body is an error document.
type flaky struct {
	next   http.RoundTripper
	mu     sync.Mutex
	rnd    *rand.Rand
	rate   float64
	on     atomic.Bool
	counts [3]atomic.Int64
	// first: the first completion or part copy while on always gets the
	// 200-with-error (the rate alone may miss the few there are)
	first atomic.Bool
}

func (f *flaky) roll() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on.Load() || f.rnd.Float64() >= f.rate {
		return -1
	}
	return f.rnd.IntN(3)
}

func (f *flaky) RoundTrip(req *http.Request) (*http.Response, error) {
	complete := req.Method == http.MethodPost && strings.Contains(req.URL.RawQuery, "uploadId")
	copyPart := req.Method == http.MethodPut && req.Header.Get("X-Amz-Copy-Source") != ""
	fault := f.roll()
	if (complete || copyPart) && f.on.Load() && f.first.CompareAndSwap(false, true) {
		fault = 2
	}
	switch fault {
	case 0:
		f.counts[0].Add(1)
		return &http.Response{StatusCode: 503, Status: "503 Slow Down", Request: req, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(`<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>slow down</Message></Error>`))}, nil
	case 1:
		if req.Method == http.MethodGet {
			resp, err := f.next.RoundTrip(req)
			if err != nil {
				return resp, err
			}
			f.counts[1].Add(1)
			resp.Body = &resetBody{r: resp.Body, left: 3}
			return resp, nil
		}
	case 2:
		if complete || copyPart {
			// CompleteMultipartUpload or UploadPartCopy answered 200 with
			// an error body (S3 does that once it has started the reply).
			f.counts[2].Add(1)
			if req.Body != nil {
				_, _ = io.Copy(io.Discard, req.Body)
			}
			return &http.Response{StatusCode: 200, Status: "200 OK", Request: req, Header: http.Header{},
				Body: io.NopCloser(strings.NewReader(`<?xml version="1.0"?><Error><Code>InternalError</Code><Message>try again</Message></Error>`))}, nil
		}
	}
	return f.next.RoundTrip(req)
}

type resetBody struct {
	r    io.ReadCloser
	left int
}

func (b *resetBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection reset by peer (injected)")
	}
	b.left--
	if len(p) > 7 {
		p = p[:7]
	}
	return b.r.Read(p)
}

func (b *resetBody) Close() error { return b.r.Close() }

// TestS3FaultsDuringSettle settles on versitygw through a transport that
// injects 503s, resets mid-body and 200-with-error completions; cycles are
// repeated until they succeed, and the result is exactly right.
func TestS3FaultsDuringSettle(t *testing.T) {
	fl := &flaky{next: http.DefaultTransport, rnd: rand.New(rand.NewPCG(9, 9)), rate: 0.25}
	b := s3Backend("s3-flaky", "flaky", fl, func(c *objstore.S3Config) {
		c.MaxAttempts, c.PartSize, c.BackoffBase, c.BackoffMax = 3, 10<<20, 5*time.Millisecond, 50*time.Millisecond
	})
	e, _ := newEnv(t, b, 8, 0.25)
	e.write("s1", 12, sim.Faults{}, 1)
	e.write("s1-x", 8, sim.Faults{}, 2)
	// Big flights too, settled under a 16 MiB cap: multipart uploads with
	// parts copied server side and gathered parts, so completions and part
	// copies meet the faults as well as PUTs and GETs.
	if _, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: "s1", Flights: 3, FlightBytes: 10 << 20,
		FlightInterval: time.Minute, Session: 3}); err != nil {
		t.Fatal(err)
	}
	big := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending}, settle.Config{CapBytes: 16 << 20, TargetBytes: 4 << 20, MaxStreams: 10000, MaxBytes: 1 << 40,
		Concurrency: 3, ReapGrace: time.Hour})
	fl.on.Store(true)
	failures := 0
	for _, star := range []string{"s1", "s1-x"} {
		for i := 0; ; i++ {
			_, err := e.cycleWith(star, big)
			if err == nil {
				break
			}
			failures++
			if i > 20 {
				t.Fatalf("no successful cycle of %s after 20 tries: %v", star, err)
			}
		}
	}
	fl.on.Store(false)
	for i, what := range []string{"503 SlowDown", "reset mid-body", "200 with an error body"} {
		if fl.counts[i].Load() == 0 {
			t.Errorf("no %s was injected", what)
		}
	}
	open, err := e.store.(*s3store.Store).Client().ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: &e.std})
	if err != nil {
		t.Fatal(err)
	}
	if len(open.Uploads) != 0 {
		t.Errorf("%d multipart uploads left open", len(open.Uploads))
	}
	if q, _ := e.db.Settle().Quarantined(e.ctx, "s1"); len(q) != 0 { // both stars (the table is per star: check each)
		t.Fatalf("a transient fault quarantined a stream: %+v", q)
	}
	if q, _ := e.db.Settle().Quarantined(e.ctx, "s1-x"); len(q) != 0 {
		t.Fatalf("a transient fault quarantined an express stream: %+v", q)
	}
	e.checkSettled("s1", "s1-x")
	if in, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(in) != 0 {
		t.Errorf("open publish intents: %+v", in)
	}
	t.Logf("injected %d 503s, %d resets, %d 200-with-error; %d cycles failed and were retried",
		fl.counts[0].Load(), fl.counts[1].Load(), fl.counts[2].Load(), failures)
}
