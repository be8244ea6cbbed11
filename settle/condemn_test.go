package settle_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/trim"
)

// reap runs the reap step once for star under a fresh lease, with no grace.
func (e *env) reap(star string) cycle.Counts {
	e.t.Helper()
	r, err := trim.NewReap(trim.Deps{DB: e.db.Trim(), Topology: e.topology()},
		trim.Config{BatchSize: 1000, Concurrency: trim.DefaultConcurrency})
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, star, "test", "", time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	c, err := r.Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"})
	if err != nil {
		e.t.Fatalf("reap: %v", err)
	}
	return c
}

// condemned checks the state a standing object that failed its data check
// leaves: the stream quarantined with class checksum naming key, the key
// not in the catalog, its publish intent turned into a reap, the stream's
// refs (so its slots) all kept. Then it lets the reap delete the object,
// releases the stream, and checks the next cycle settles it exactly.
func condemned(t *testing.T, e *env, key string, refsBefore int) {
	t.Helper()
	k, err := bundlefmt.ParseSettledKey(key)
	if err != nil {
		t.Fatal(err)
	}
	id := k.Stream
	q, err := e.db.Settle().Quarantined(e.ctx, "s1")
	if err != nil || len(q) != 1 || q[0].ErrorClass != cycle.ClassChecksum || !strings.Contains(q[0].Reason, key) {
		t.Fatalf("want one checksum quarantine naming %s: %+v %v", key, q, err)
	}
	entries, _ := e.db.Streams().EntriesOfStream(e.ctx, id)
	for _, en := range entries {
		if uint64(en.FirstRecord) == k.FirstRecord && uint32(en.Revision) == k.Revision {
			t.Fatalf("the damaged %s was cataloged: %+v", key, en)
		}
	}
	if refs, _ := writepath.New(e.db).RefsOfStream(e.ctx, id); len(refs) != refsBefore {
		t.Fatalf("refs %d, before %d: a source was released", len(refs), refsBefore)
	}
	if open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(open) != 0 {
		t.Fatalf("publish intents left open: %+v", open)
	}
	reaps, _ := e.db.Settle().Intents(e.ctx, "s1", "reap", 0)
	armed := false
	for _, r := range reaps {
		armed = armed || r.ObjectKey == key
	}
	if !armed {
		t.Fatalf("no reap armed for the damaged %s: %+v", key, reaps)
	}
	if _, err := e.store.Head(e.ctx, e.std, key); err != nil {
		t.Fatalf("the damaged object must stand until the reap: %v", err)
	}
	if err := writepath.New(e.db).SkipGrace(e.ctx, "s1", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if c := e.reap("s1"); c.ObjectsReaped != 1 {
		t.Fatalf("reap of the condemned object: %+v", c)
	}
	if _, err := e.store.Head(e.ctx, e.std, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("condemned %s still stands: %v", key, err)
	}
	if ok, err := writepath.New(e.db).ReleaseQuarantine(e.ctx, "s1", id); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	c, err := e.cycle("s1", e.settler(nil))
	if err != nil || c.StreamsQuarantined != 0 {
		t.Fatalf("cycle after release: %+v %v", c, err)
	}
	e.checkSettled("s1")
}

// TestAdoptionVerifiesTheStandingBytes: a crash after the completion left
// an object whose data was never checked (the read-back it would have had
// was cut short); one data byte of it is flipped. The restart gets 412 and
// must not adopt it: the footer agrees with the sources, the bytes do not.
func TestAdoptionVerifiesTheStandingBytes(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, in := crashedPublish(t, b, settle.CrashAfterComplete)
			key := in.ObjectKey
			k, _ := bundlefmt.ParseSettledKey(key)
			refs, _ := writepath.New(e.db).RefsOfStream(e.ctx, k.Stream)
			obj := readAll(t, e, key)
			obj[len(obj)/3] ^= 0x40 // a data byte: the footer is in the last few hundred bytes
			replaceSlot(e, key, obj)
			c, err := e.cycle("s1", e.settler(nil))
			if err != nil {
				t.Fatal(err)
			}
			if c.ObjectsAdopted != 0 || c.StreamsQuarantined != 1 {
				t.Fatalf("adopted a damaged object: %+v", c)
			}
			condemned(t, e, key, len(refs))
		})
	}
}

// flipReadBack flips one byte of the body of the first GET of a settled
// key's first bytes (the read-back that checks an assembly the server
// could not verify reads the object in ranged windows from offset 0), as
// a server that stored wrong bytes would serve them.
type flipReadBack struct {
	next    http.RoundTripper
	flipped atomic.Int64
	deletes atomic.Int64
}

func (f *flipReadBack) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.Contains(req.URL.RawQuery, "delete") {
		f.deletes.Add(1)
	}
	if req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "/streams/") {
		f.deletes.Add(1)
	}
	resp, err := f.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || !strings.HasPrefix(req.Header.Get("Range"), "bytes=0-") ||
		!strings.Contains(req.URL.Path, "/streams/") || resp.StatusCode/100 != 2 || f.flipped.Load() > 0 {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		return nil, rerr
	}
	if len(body) > 0 {
		body[len(body)/2] ^= 0x01
		f.flipped.Add(1)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// TestFailedReadBackNeverDeletesDirectly: an assembly whose read-back
// disagrees with the expected CRC leaves its object for the reap step
// (fenced, behind the catalog re-check) instead of deleting the key from
// inside the store, and quarantines the stream naming the key.
func TestFailedReadBackNeverDeletesDirectly(t *testing.T) {
	fl := &flipReadBack{next: http.DefaultTransport}
	b := s3Backend("s3-flip", "flip", fl, func(c *objstore.S3Config) { c.MaxAttempts = 2 })
	e, _ := newEnv(t, b, 1, 0)
	// One 6 MiB flight: its chunk is copied server side, so the object is
	// a multipart upload, which is read back.
	if _, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: "s1", Flights: 1, FlightBytes: 6 << 20,
		FlightInterval: time.Minute, Session: 1}); err != nil {
		t.Fatal(err)
	}
	streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	refs, _ := writepath.New(e.db).RefsOfStream(e.ctx, streams[0].ID)
	s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending}, settle.Config{CapBytes: 16 << 20, TargetBytes: 4 << 20, MaxStreams: 10, MaxBytes: 1 << 40,
		Concurrency: 1, ReapGrace: time.Hour})
	c, err := e.cycle("s1", s)
	if err != nil {
		t.Fatal(err)
	}
	if fl.flipped.Load() != 1 || c.StreamsQuarantined != 1 || c.ObjectsPublished != 0 {
		t.Fatalf("flipped %d read-backs; counts %+v", fl.flipped.Load(), c)
	}
	if n := fl.deletes.Load(); n != 0 {
		t.Fatalf("%d deletes from the settle step itself", n)
	}
	rb, _ := e.db.Settle().Intents(e.ctx, "s1", "reap", 0)
	if len(rb) != 1 {
		t.Fatalf("reap intents: %+v", rb)
	}
	condemned(t, e, rb[0].ObjectKey, len(refs))
}
