package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/sim"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
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
}

func (p *zoneProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() && (r.URL.Path == "/"+p.bucket || strings.HasPrefix(r.URL.Path, "/"+p.bucket+"/")) {
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
	s3e := testenv.S3(t)
	direct, err := s3store.New(ctx, objstore.S3Config{Endpoint: s3e.Endpoint, Region: s3e.Region, PathStyle: true,
		AccessKey: s3e.AccessKey, SecretKey: s3e.SecretKey, Checksum: objstore.ChecksumParts})
	if err != nil {
		t.Fatal(err)
	}
	std, za, zb := testenv.BucketName("zone"), testenv.BucketName("zone-a"), testenv.BucketName("zone-b")
	for _, b := range []string{std, za, zb} {
		if _, err := direct.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b}); err != nil {
			t.Fatal(err)
		}
	}
	target, _ := url.Parse(s3e.Endpoint)
	zp := &zoneProxy{proxy: httputil.NewSingleHostReverseProxy(target), bucket: za, stallFor: 3 * time.Second}
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
			"--s3-endpoint", srv.URL, "--s3-path-style", "true", "--bucket", std,
			"--s3-express-buckets", "za="+za+",zb="+zb, "--location", "za",
			"--s3-attempt-timeout", "500ms", "--s3-max-attempts", "3", "--data-dir", filepath.Join(root, "data"),
			"--express-denorm-linger", "0s", "--reap-grace", "1s", "--holder", "zone-test",
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
		st, err := db.ReadTrimState(ctx, "s1-x")
		if err != nil {
			t.Fatal(err)
		}
		err = direct.List(ctx, bucket, "", func(key string, _ int64) error {
			star, ep, seq, err := bundlefmt.ParseSlotKey(key)
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
	if q, _ := db.Quarantined(ctx, "s1-x"); len(q) != 0 {
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
	due, err := db.SlotReaps(ctx, "s1-x")
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
	if due, _ := db.SlotReaps(ctx, "s1-x"); len(due) != 0 {
		t.Fatalf("slot reaps left after the zone came back: %+v", due)
	}
	rep, err = sim.Check(ctx, db, sim.Storage{Store: direct, Standard: std, Express: []string{za, zb}}, sim.CheckOptions{SettledOnly: true})
	if err != nil || !rep.OK() {
		t.Fatalf("novasim check after recovery: %+v %v", rep, err)
	}
	t.Logf("zone a refused %d requests, %d GETs stalled past the deadline; %d slots reaped from zone a after it came back",
		zp.refused.Load(), zp.stalled.Load(), allA)
}
