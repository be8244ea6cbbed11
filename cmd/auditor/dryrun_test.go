package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/sim"
)

// TestDryRunPlansWithTheLeadersPolicy: records written a moment ago are
// inside the local default linger (5m), so a dry run with no leader's
// record plans no publish, and says it planned with the local
// configuration. Once a leader recorded a linger of 0s (catalog runtime),
// the dry run plans their publish with the local flags unchanged, and
// --json says each key came from the leader; --denorm-linger given on the
// command line overrides the leader's, which the output names, and the
// plan is empty again.
func TestDryRunPlansWithTheLeadersPolicy(t *testing.T) {
	t.Parallel()
	url, db := migratedDBNoStar(t)
	ctx := context.Background()
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 3, Content: sim.DefaultContent(9)}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: fs, Standard: "nova"}, sim.WriteOptions{Star: "s1", Flights: 2,
		FlightBytes: 32 << 10}); err != nil {
		t.Fatal(err)
	}
	dryRun := func(extra ...string) (int, string, string) {
		return runCLI(t, append([]string{"run", "--once", "--dry-run", "--star", "s1", "--database-url", url, "--fs-root", root,
			"--data-dir", t.TempDir(), "--log-level", "warn"}, extra...)...)
	}
	publishes := func(out string) int { return strings.Count("\n"+out, "\npublish ") }

	code, out, errs := dryRun()
	if code != 0 || !strings.Contains(out, "no leader of star s1 has recorded one; planning with the local configuration") ||
		!strings.Contains(out, "denorm-linger 5m0s (local)") || publishes(out) != 0 {
		t.Fatalf("dry run with no leader's policy: %d %q %q", code, out, errs)
	}

	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "leader-1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	leader := catalog.DuePolicy{Linger: 0, AgeCap: 24 * time.Hour, ExpressLinger: 0, ExpressAgeCap: time.Hour, CopyFloor: 5 << 20}
	if err := db.Ledger().RecordRuntime(ctx, l.Fence, "1.0.0", leader, time.Minute); err != nil {
		t.Fatal(err)
	}
	code, out, errs = dryRun("--json")
	var rep DryRunReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("dry run --json: %d %v %q %q", code, err, out, errs)
	}
	got := map[string]PolicySetting{}
	for _, s := range rep.Policy.Settings {
		got[s.Key] = s
	}
	if !rep.Policy.Recorded || rep.Policy.Holder != "leader-1" || rep.Policy.Version != "1.0.0" ||
		got["denorm-linger"] != (PolicySetting{Key: "denorm-linger", Value: "0s", Source: "leader"}) ||
		got["reap-grace"] != (PolicySetting{Key: "reap-grace", Value: "1m0s", Source: "leader"}) ||
		got["denorm-tail-growth"].Value != "0" {
		t.Fatalf("dry run --json policy: %+v", rep.Policy)
	}
	n := 0
	for _, line := range rep.Plan {
		if strings.HasPrefix(line, "publish ") {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("dry run with the leader's linger 0s plans no publish: %+v", rep)
	}

	code, out, errs = dryRun("--denorm-linger", "1h")
	if code != 0 || !strings.Contains(out, "denorm-linger 1h0m0s (--denorm-linger given: overrides the leader's 0s)") ||
		!strings.Contains(out, "denorm-age-cap 24h0m0s (leader)") || publishes(out) != 0 {
		t.Fatalf("dry run with --denorm-linger over the leader's: %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, "run", "--once", "--json", "--star", "s1", "--database-url", url, "--fs-root", root); code != exitUsage ||
		!strings.Contains(errs, "json") {
		t.Fatalf("run --json without --dry-run: %d %q", code, errs)
	}
}
