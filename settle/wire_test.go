package settle_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// wireCounter counts the object bytes that cross the wire: the bodies of
// GET responses read, and the bodies of PUT requests (PutObject and
// UploadPart; UploadPartCopy sends none).
type wireCounter struct {
	next          http.RoundTripper
	got, sent     atomic.Int64
	gets, uploads atomic.Int64
}

type countBody struct {
	r io.ReadCloser
	n *atomic.Int64
}

func (b countBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}
func (b countBody) Close() error { return b.r.Close() }

func (w *wireCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && req.Header.Get("X-Amz-Copy-Source") == "" && req.Body != nil && req.URL.Path != "/" && !strings.Contains(req.URL.RawQuery, "tagging") {
		w.uploads.Add(1)
		req.Body = countBody{req.Body, &w.sent}
	}
	resp, err := w.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet && resp.StatusCode/100 == 2 {
		w.gets.Add(1)
		resp.Body = countBody{resp.Body, &w.got}
	}
	return resp, err
}

// TestCountersAgreeWithTheWire settles mixed traffic on versitygw through
// a transport that counts the object bytes crossing it, and requires the
// cycle's own counts of bytes fetched and uploaded to agree within 1%.
func TestCountersAgreeWithTheWire(t *testing.T) {
	wc := &wireCounter{next: http.DefaultTransport}
	b := s3Backend("s3-wire", "wire", wc, nil)
	e, _ := newEnv(t, b, 6, 0.3)
	e.write("s1", 10, sim.Faults{}, 1)
	e.write("s1-x", 6, sim.Faults{}, 2)
	if _, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: "s1", Flights: 2, FlightBytes: 7 << 20,
		FlightInterval: time.Minute, Session: 3}); err != nil {
		t.Fatal(err)
	}
	s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending}, settle.Config{CapBytes: 16 << 20, TargetBytes: 4 << 20, MaxStreams: 1000, MaxBytes: 1 << 40,
		Concurrency: 3, ReapGrace: time.Hour})
	var fetched, uploaded, wireGot, wireSent int64
	for _, star := range []string{"s1", "s1-x"} {
		g0, s0 := wc.got.Load(), wc.sent.Load()
		c, err := e.cycle(star, s)
		if err != nil || c.StreamsQuarantined != 0 {
			t.Fatalf("%s: %+v %v", star, c, err)
		}
		fetched += c.BytesFetched
		uploaded += c.BytesUploaded
		wireGot += wc.got.Load() - g0
		wireSent += wc.sent.Load() - s0
	}
	t.Logf("fetched: counted %d, on the wire %d; uploaded: counted %d, on the wire %d", fetched, wireGot, uploaded, wireSent)
	for _, c := range []struct {
		what         string
		counted, got int64
	}{{"fetched", fetched, wireGot}, {"uploaded", uploaded, wireSent}} {
		if c.got == 0 {
			t.Fatalf("nothing %s crossed the wire: the test measured nothing", c.what)
		}
		if d := float64(c.counted-c.got) / float64(c.got); d > 0.01 || d < -0.01 {
			t.Errorf("bytes %s: counted %d, %d crossed the wire (%+.1f%%)", c.what, c.counted, c.got, 100*d)
		}
	}
}
