package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/sim"
)

// zoneProxy stands between the auditor and versitygw: while down is set it
// refuses every request for one bucket (a zone outage: 503 ServiceUnavailable),
// and it stalls the first stalls GETs past the auditor's attempt deadline
// (the request is answered only after the client gave up on it).
type zoneProxy struct {
	proxy    *httputil.ReverseProxy
	bucket   string
	down     atomic.Bool
	stalls   atomic.Int64 // stalls left to inject
	refused  atomic.Int64
	stalled  atomic.Int64
	stallFor time.Duration
	// blackhole: every request for bucket is accepted and never answered
	// (a zone that stalls rather than refusing); seen counts them
	blackhole atomic.Bool
	seen      atomic.Int64

	// rate: the share of all requests answered 503 SlowDown, and of GETs
	// whose body is cut mid-way (while flaky is set)
	rate          float64
	flaky         atomic.Bool
	mu            sync.Mutex
	rnd           *rand.Rand
	slowDowns     atomic.Int64
	resets        atomic.Int64
	resetsPending sync.Map // *http.Request -> true: cut this response's body
}

func (p *zoneProxy) roll() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rnd.Float64()
}

func (p *zoneProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.flaky.Load() {
		switch x := p.roll(); {
		case x < p.rate:
			p.slowDowns.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>slow down (injected)</Message></Error>`)
			return
		case x < 1.5*p.rate && r.Method == http.MethodGet:
			p.resets.Add(1)
			p.resetsPending.Store(r, true)
		}
	}
	mine := r.URL.Path == "/"+p.bucket || strings.HasPrefix(r.URL.Path, "/"+p.bucket+"/")
	if mine {
		p.seen.Add(1)
	}
	if p.blackhole.Load() && mine {
		// Read the body first: net/http notices that the client gave up
		// (its request context is done) only once the body is read, and a
		// PUT's handler would otherwise outlive the request forever.
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		<-r.Context().Done()
		return
	}
	if p.down.Load() && mine {
		p.refused.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>zone down (injected)</Message></Error>`)
		return
	}
	if r.Method == http.MethodGet && r.Header.Get("Range") != "" && p.stalls.Add(-1) >= 0 {
		p.stalled.Add(1)
		select {
		case <-r.Context().Done():
		case <-time.After(p.stallFor):
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// TestExpressZoneOutageAndStalls runs the real auditor on an express star
// whose local zone refuses everything for two whole cycles, while some
// ranged GETs stall past the attempt deadline. Settle reads every slot from
// the other zone and settles everything (nothing quarantined); trim
// advances; the reaps of the down zone's copies stay due (the cycle does
// not fail) and complete once the zone is back, leaving no slot behind the
// cursor in either zone.
func TestExpressZoneOutageAndStalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	bin := auditorBinary(t)
	ctx := context.Background()
	s3e, direct, std, za, zb := zoneBuckets(t, "zone")
	zp := newZoneProxy(t, s3e.Endpoint)
	zp.bucket, zp.stallFor = za, 3*time.Second
	srv := httptest.NewServer(zp)
	defer srv.Close()

	db, dbURL := testenv.MigratedDB(t)
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s0", ExpressStar: "s1-x", Streams: 6, ExpressShare: 1,
		FenceWindow: 2, Content: sim.DefaultContent(11)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: direct, Standard: std, Express: []string{za, zb}},
		sim.WriteOptions{Star: "s1-x", Flights: 12, FlightBytes: 128 << 10, FlightInterval: time.Minute,
			Faults: sim.Faults{Failover: 0.05}, Session: 1}); err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	run := func(what string) string {
		t.Helper()
		cmd := exec.Command(bin, "run", "--once", "--star", "s1-x", "--database-url", dbURL,
			"--s3-endpoint", srv.URL, "--s3-path-style", "--bucket", std,
			"--s3-express-buckets", "za="+za+",zb="+zb, "--location", "za",
			"--s3-attempt-timeout", "500ms", "--s3-max-attempts", "3", "--data-dir", filepath.Join(root, "data"),
			"--express-denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "1s", "--holder", "zone-test",
			"--log-format", "json", "--log-level", "warn")
		cmd.Env = append(cmd.Environ(), "AWS_ACCESS_KEY_ID="+s3e.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3e.SecretKey)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	slotsBehind := func(bucket string) (behind, all int) {
		t.Helper()
		st, err := db.Trim().TrimState(ctx, "s1-x")
		if err != nil {
			t.Fatal(err)
		}
		err = direct.List(ctx, bucket, "", func(o objstore.ObjectInfo) error {
			star, ep, seq, err := bundlefmt.ParseSlotKey(o.Key)
			if err != nil || star != "s1-x" {
				return nil
			}
			all++
			if st.HasCursor && (int64(ep) < st.Cursor.Epoch || (int64(ep) == st.Cursor.Epoch && int64(seq) < st.Cursor.Seq)) {
				behind++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return behind, all
	}

	zp.down.Store(true)
	zp.stalls.Store(3)
	run("cycle 1, zone a down")
	time.Sleep(1100 * time.Millisecond) // the slot reaps fall due
	run("cycle 2, zone a down")
	if zp.refused.Load() == 0 || zp.stalled.Load() == 0 {
		t.Fatalf("faults not exercised: %d refused, %d stalled", zp.refused.Load(), zp.stalled.Load())
	}
	rep, err := sim.Check(ctx, db, sim.Storage{Store: direct, Standard: std, Express: []string{zb}}, sim.CheckOptions{SettledOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Checked == 0 {
		t.Fatalf("novasim check during the outage: %+v", rep)
	}
	if q, _ := db.Settle().Quarantined(ctx, "s1-x"); len(q) != 0 {
		t.Fatalf("the outage quarantined streams: %+v", q)
	}
	behindA, allA := slotsBehind(za)
	behindB, _ := slotsBehind(zb)
	if behindA == 0 || behindA != allA {
		t.Fatalf("zone a (down): %d of %d slots behind the cursor; want all kept, due", behindA, allA)
	}
	if behindB != 0 {
		t.Fatalf("zone b (up): %d slots behind the cursor not reaped", behindB)
	}
	due, err := db.Trim().SlotReaps(ctx, "s1-x")
	if err != nil {
		t.Fatal(err)
	}
	if len(due) == 0 {
		t.Fatal("no slot reap left due for the down zone")
	}

	zp.down.Store(false)
	run("cycle 3, zone a back")
	if behind, _ := slotsBehind(za); behind != 0 {
		t.Fatalf("zone a (back): %d slots behind the cursor not reaped", behind)
	}
	if due, _ := db.Trim().SlotReaps(ctx, "s1-x"); len(due) != 0 {
		t.Fatalf("slot reaps left after the zone came back: %+v", due)
	}
	rep, err = sim.Check(ctx, db, sim.Storage{Store: direct, Standard: std, Express: []string{za, zb}}, sim.CheckOptions{SettledOnly: true})
	if err != nil || !rep.OK() {
		t.Fatalf("novasim check after recovery: %+v %v", rep, err)
	}
	t.Logf("zone a refused %d requests, %d GETs stalled past the deadline; %d slots reaped from zone a after it came back",
		zp.refused.Load(), zp.stalled.Load(), allA)
}

// newZoneProxy proxies to the S3 server at endpoint; a response whose
// request was marked for a reset has its body cut after a few bytes (the
// client sees the connection drop mid-body).
func newZoneProxy(t *testing.T, endpoint string) *zoneProxy {
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &zoneProxy{proxy: httputil.NewSingleHostReverseProxy(target), rnd: rand.New(rand.NewPCG(7, 7))}
	p.proxy.ModifyResponse = func(resp *http.Response) error {
		if _, cut := p.resetsPending.LoadAndDelete(resp.Request); cut {
			resp.Body = &cutBody{r: resp.Body, left: 5}
		}
		return nil
	}
	return p
}

type cutBody struct {
	r    io.ReadCloser
	left int
}

func (b *cutBody) Read(q []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection reset (injected)")
	}
	if len(q) > b.left {
		q = q[:b.left]
	}
	n, err := b.r.Read(q)
	b.left -= n
	return n, err
}

func (b *cutBody) Close() error { return b.r.Close() }

// TestFullCycleUnderS3Faults runs whole cycles of the real binary (settle,
// retention, trim, reap) through a proxy that answers 15% of requests 503
// SlowDown and cuts 7.5% of GET bodies mid-way, with two attempts per
// request, so some cycles fail part-way and the next ones carry on. Cycles
// are repeated until one succeeds; then the crash matrix's invariants must
// hold in every state, and after the grace nothing is left over.
func TestFullCycleUnderS3Faults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	bin := auditorBinary(t)
	var fp *zoneProxy
	e := newCrashEnv(t, bin, func(t *testing.T, root string) (objstore.Store, []string, []string, int64, string) {
		st, flags, env, flightBytes, capMiB := s3CrashStore(t, root)
		fp = newZoneProxy(t, testenv.S3(t).Endpoint)
		fp.rate = 0.15
		srv := httptest.NewServer(fp)
		t.Cleanup(srv.Close)
		bucket := flags[len(flags)-1]
		return st, []string{"--s3-endpoint", srv.URL, "--s3-path-style", "--s3-max-attempts", "2",
			"--s3-attempt-timeout", "5s", "--bucket", bucket}, env, flightBytes, capMiB
	})
	failed := 0
	var cursors []pos
	untilOK := func(what string) {
		t.Helper()
		for i := 0; i < 15; i++ {
			code, out := e.run("")
			e.snapshot()
			e.checkReferenced()
			cursors = append(cursors, e.cursor())
			if code == 0 {
				return
			}
			if code != exitFailure {
				t.Fatalf("%s: exit %d: %s", what, code, out)
			}
			failed++
		}
		t.Fatalf("%s: no successful cycle in 15 tries", what)
	}
	fp.flaky.Store(true)
	for round := uint64(1); round <= 3; round++ {
		if round < 3 {
			e.write(round, sim.Faults{Failover: 0.05, Lost: 0.05})
		}
		if round == 2 {
			e.retentionMove()
		}
		e.skipGrace()
		untilOK(fmt.Sprintf("round %d", round))
		untilOK(fmt.Sprintf("round %d, second cycle", round))
		e.checkSettled()
	}
	fp.flaky.Store(false)
	e.skipGrace()
	untilOK("after the grace, faults off")
	for i := 1; i < len(cursors); i++ {
		if cursors[i].less(cursors[i-1]) {
			t.Fatalf("trim cursor moved backwards: %v", cursors)
		}
	}
	e.checkSettled()
	e.checkClean()
	if q, _ := e.db.Settle().Quarantined(e.ctx, "s1"); len(q) != 0 {
		t.Fatalf("transient faults quarantined streams: %+v", q)
	}
	if fp.slowDowns.Load() == 0 || fp.resets.Load() == 0 {
		t.Fatalf("faults not exercised: %d 503s, %d resets", fp.slowDowns.Load(), fp.resets.Load())
	}
	t.Logf("%d 503s and %d cut bodies injected; %d cycles failed part-way and the next carried on",
		fp.slowDowns.Load(), fp.resets.Load(), failed)
}

// TestStallingZoneCostsLittle: the local express zone accepts every request
// and never answers, while the daemon runs a cycle every second and the
// write path keeps absorbing. The stall is detected once (attempts x the
// attempt timeout) and the zone is then held off for at least that long
// by the health record shared by reads, copies and deletes, across
// cycles: the stalled zone gets no request per cycle after the first
// detection, and express streams keep settling from the other zone.
func TestStallingZoneCostsLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	ctx := context.Background()
	s3e, direct, std, za, zb := zoneBuckets(t, "stall")
	zp := newZoneProxy(t, s3e.Endpoint)
	zp.bucket = za
	srv := httptest.NewServer(zp)
	defer srv.Close()
	url, db := migratedDBNoStar(t)
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s0", ExpressStar: "s1-x", Streams: 6, ExpressShare: 1,
		FenceWindow: 2, Content: sim.DefaultContent(17)}); err != nil {
		t.Fatal(err)
	}
	storage := sim.Storage{Store: direct, Standard: std, Express: []string{za, zb}}
	if _, err := sim.Write(ctx, db, storage, sim.WriteOptions{Star: "s1-x", Flights: 4, FlightBytes: 64 << 10,
		FlightInterval: time.Minute, Session: 1}); err != nil {
		t.Fatal(err)
	}
	zp.blackhole.Store(true)
	t.Setenv("AWS_ACCESS_KEY_ID", s3e.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3e.SecretKey)
	p := startServe(t, "stall", url, "--star", "s1-x", "--schedule", "@every 1s", "--express-denorm-linger", "0s", "--denorm-tail-growth", "0",
		"--reap-grace", "1s", "--s3-endpoint", srv.URL, "--s3-path-style", "--bucket", std,
		"--s3-express-buckets", "za="+za+",zb="+zb, "--location", "za",
		"--s3-attempt-timeout", "2s", "--s3-max-attempts", "2", "--log-level", "info",
		"--denorm-output-cap-mib", "1", "--denorm-chunk-target-kib", "64")
	eventually(t, 15*time.Second, "leads", func() bool { return value(p.metrics(), "nova_auditor_leader", nil) == 1 })

	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		_, err := sim.Write(ctx, db, storage, sim.WriteOptions{Star: "s1-x", Duration: 2 * time.Minute, FlightBytes: 64 << 10,
			FlightInterval: 200 * time.Millisecond, Rate: 32 << 10, Session: 2, Stop: stop})
		wrote <- err
	}()
	cycles := func() float64 {
		return value(p.metrics(), "nova_auditor_cycles_total", map[string]string{"outcome": "ok"})
	}
	eventually(t, 30*time.Second, "the stall detected and cycles succeeding again", func() bool { return cycles() >= 3 })
	seen0, cycles0 := zp.seen.Load(), cycles()
	eventually(t, 60*time.Second, "eight more successful cycles during the stall", func() bool { return cycles() >= cycles0+8 })
	seen1, cycles1 := zp.seen.Load(), cycles()
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	t.Logf("stalled zone: %d requests before cycle %.0f (the detection), %d during the %.0f cycles after",
		seen0, cycles0, seen1-seen0, cycles1-cycles0)
	if seen1-seen0 > 0 {
		t.Fatalf("the stalled zone got %d requests in %.0f cycles after its detection: the hold-off did not last across cycles",
			seen1-seen0, cycles1-cycles0)
	}
	if seen0 == 0 {
		t.Fatal("the stalled zone was never tried: the test exercised nothing")
	}
	// Express streams keep settling from the other zone: everything the
	// writer absorbed settles while the local zone is still dark.
	if code, _, errs := runCLI(t, "trigger", "--star", "s1-x", "--database-url", url, "--wait", "60s"); code != 0 {
		t.Fatalf("trigger: %s", errs)
	}
	eventually(t, 60*time.Second, "every absorbed record settled", func() bool {
		ms, err := db.Streams().DueMarkers(ctx, "s1-x")
		return err == nil && len(ms) == 0
	})
	if q, _ := db.Settle().Quarantined(ctx, "s1-x"); len(q) != 0 {
		t.Fatalf("the stall quarantined streams: %+v", q)
	}
	rep, err := sim.Check(ctx, db, sim.Storage{Store: direct, Standard: std, Express: []string{zb}}, sim.CheckOptions{SettledOnly: true})
	if err != nil || !rep.OK() || rep.Checked == 0 {
		t.Fatalf("novasim check: %+v %v", rep, err)
	}
}

// zoneBuckets makes a standard bucket and two zone buckets named after
// prefix on the test S3 server, and a store that reaches them directly.
func zoneBuckets(t *testing.T, prefix string) (testenv.S3Env, *s3store.Store, string, string, string) {
	t.Helper()
	direct, s3e := teststore.S3Store(t, teststore.Options{})
	std, za, zb := testenv.BucketName(prefix), testenv.BucketName(prefix+"-a"), testenv.BucketName(prefix+"-b")
	for _, b := range []string{std, za, zb} {
		teststore.CreateBucket(t, direct, b)
	}
	return s3e, direct, std, za, zb
}
