package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
)

// TestStatusFleet: `auditor status --fleet` (no --star) names the members
// (live, draining, expired), the stars each leads, the unowned stars with
// their last holder, the star led outside the fleet, the cap and the
// imbalance, and the moves with their reasons, in text and in JSON.
func TestStatusFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db := migratedDBNoStar(t)
	for _, s := range []string{"s1", "s2", "s3", "s4", "s5", "t1", "w1"} {
		if err := writepath.New(db).CreateStar(ctx, s, catalog.ClassStandard, 1); err != nil {
			t.Fatal(err)
		}
	}
	// w1 is led by a single-star serve.
	if _, err := db.Leases().AcquireLeaseInstance(ctx, "w1", "solo", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	// m1 and m2 are live and select s1..s5 between them; no live member
	// selects t1 or w1; m3 will expire, m4 drains.
	for _, m := range []struct {
		name, stars string
		draining    bool
	}{{"m1", "s1,s2,s4", false}, {"m2", "s[3-5]", false}, {"m3", "all", false}, {"m4", "all", true}} {
		if _, err := db.Fleet().Heartbeat(ctx, m.name, "i-"+m.name, m.stars, m.draining, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Fleet().FleetView(ctx, time.Hour); err != nil { // the lease rows of the new stars
		t.Fatal(err)
	}
	claim := func(member string, n int, c ...catalog.Claim) []catalog.Claimed {
		t.Helper()
		ls, err := db.Fleet().ClaimStars(ctx, member, "i-"+member, c, n, time.Minute, time.Minute)
		if err != nil || len(ls) != len(c) {
			t.Fatalf("%s claims %+v: %+v, %v", member, c, ls, err)
		}
		return ls
	}
	m1 := claim("m1", 2, catalog.Claim{Star: "s1"}, catalog.Claim{Star: "s2"})
	claim("m2", 1, catalog.Claim{Star: "s3"})
	claim("m3", 1, catalog.Claim{Star: "s4"})
	// m1 hands s2 to m2, which claims it beyond its cap.
	if err := db.Fleet().HandOff(ctx, m1[1].Fence, "m2", "balance"); err != nil {
		t.Fatal(err)
	}
	claim("m2", 1, catalog.Claim{Star: "s2", OverCap: true})
	// m3 died: its row and its lease expired.
	if _, err := db.Pool().Exec(ctx, `UPDATE nova.auditor_members SET expires_at = now() - interval '1 minute' WHERE member = 'm3'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now() - interval '30 seconds' WHERE star = 's4'`); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runCLI(t, "status", "--fleet", "--json", "--database-url", url)
	if code != exitOK {
		t.Fatalf("status --fleet --json: exit %d %s", code, errs)
	}
	for _, field := range []string{`"summary"`, `"live_members"`, `"selected_stars"`, `"imbalance"`, `"stars_led"`,
		`"stars_selector"`, `"heartbeat_age_seconds"`, `"unowned_seconds"`, `"led_outside_fleet"`, `"by_reason"`, `"over_cap"`} {
		if !strings.Contains(out, field) {
			t.Errorf("the JSON has no %s", field)
		}
	}
	var s daemon.FleetStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	want := daemon.FleetSummary{Members: 4, LiveMembers: 2, DrainingMembers: 1, ExpiredMembers: 1, Stars: 7,
		SelectedStars: 5, LedStars: 4, UnownedStars: 3, Cap: 3, Floor: 2, Imbalance: 1}
	got := s.Summary
	if got.LongestUnowned < 29 || got.LongestUnowned > 120 {
		t.Errorf("longest unowned %vs, want about 30s", got.LongestUnowned)
	}
	got.LongestUnowned = 0
	if got != want {
		t.Errorf("summary\n got %+v\nwant %+v", got, want)
	}
	type member struct {
		name            string
		alive, draining bool
		led             []string
		balance         string
	}
	var members []member
	for _, m := range s.Members {
		members = append(members, member{m.Member, m.Alive, m.Draining, m.StarsLed, m.Balance})
	}
	wantMembers := []member{{"m1", true, false, []string{"s1"}, daemon.FleetBalanceBelowFloor},
		{"m2", true, false, []string{"s2", "s3"}, daemon.FleetBalanceOK}, {"m3", false, false, []string{}, ""},
		{"m4", true, true, []string{}, ""}}
	if !slices.EqualFunc(members, wantMembers, func(a, b member) bool {
		return a.name == b.name && a.alive == b.alive && a.draining == b.draining && slices.Equal(a.led, b.led) && a.balance == b.balance
	}) {
		t.Errorf("members\n got %+v\nwant %+v", members, wantMembers)
	}
	if len(s.Unowned) != 3 || s.Unowned[0].Star != "s4" || s.Unowned[0].Holder != "m3" || !s.Unowned[0].Selected ||
		s.Unowned[1].Star != "s5" || s.Unowned[1].Holder != "" || !s.Unowned[1].Selected ||
		s.Unowned[2].Star != "t1" || s.Unowned[2].Selected {
		t.Errorf("unowned: %+v", s.Unowned)
	}
	if len(s.Outside) != 1 || s.Outside[0].Star != "w1" || s.Outside[0].Holder != "solo" || !s.Outside[0].Live {
		t.Errorf("led outside the fleet: %+v", s.Outside)
	}
	if len(s.Stars) != 7 || s.Stars[1].Star != "s2" || s.Stars[1].Holder != "m2" || s.Stars[1].ReleasedWhy != "balance" ||
		s.Stars[1].LastMoveAgo == nil || s.Stars[4].LastMoveAgo != nil {
		t.Errorf("stars: %+v", s.Stars)
	}
	mv := s.Moves
	if mv.Window != 3600 || mv.Total != 5 || mv.ByReason["new"] != 4 || mv.ByReason["balance"] != 1 || len(mv.ByReason) != 6 {
		t.Errorf("move counts: %+v", mv)
	}
	if len(mv.Recent) != 5 {
		t.Fatalf("recent moves: %+v", mv.Recent)
	}
	if r := mv.Recent[0]; r.Star != "s2" || r.From != "m1" || r.To != "m2" || r.Reason != "balance" || !r.OverCap || r.Token != 2 {
		t.Errorf("the newest move: %+v", r)
	}
	if r := mv.Recent[4]; r.Star != "s1" || r.From != "" || r.To != "m1" || r.Reason != "new" || r.OverCap {
		t.Errorf("the oldest move: %+v", r)
	}

	code, out, errs = runCLI(t, "status", "--fleet", "--database-url", url)
	if code != exitOK {
		t.Fatalf("status --fleet: exit %d %s", code, errs)
	}
	for _, line := range []string{
		`(?m)^fleet +4 members: 2 live, 1 draining, 1 expired +\(database clock `,
		`(?m)^stars +7 in the metastore, 5 selected by live members; 4 led, 3 unowned \(the longest for 3\ds\)$`,
		`(?m)^balance +cap 3, floor 2 over 2 live members; imbalance 1 `,
		`(?m)^moves +5 in the last 1h0m: balance 1, new 4$`,
		`(?m)^m1 +i-m1 +live +1 +BELOW FLOOR +\S+ ago +\S+ +s1,s2,s4$`,
		`(?m)^m2 +i-m2 +live +2 +ok +\S+ ago +\S+ +s\[3-5\]$`,
		`(?m)^m3 +i-m3 +EXPIRED 1m\ds ago +0 +- `,
		`(?m)^m4 +i-m4 +draining +0 +- `,
		`(?m)^m1 +s1$`, `(?m)^m2 +s2, s3$`, `(?m)^m3 +none$`,
		`(?m)^UNOWNED \(3\) +FOR +LAST HOLDER`,
		`(?m)^s4 +3\ds +m3 \(token 1\) +- +- +yes$`,
		`(?m)^s5 +\S+ +never owned +- +- +yes$`,
		`(?m)^t1 +\S+ +never owned +- +- +NO LIVE MEMBER SELECTS IT$`,
		`(?m)^w1 +solo +1 `,
		`(?m)^\S+ ago +s2 +m1 +m2 +balance +yes +\S+ +2$`,
		`(?m)^\S+ ago +s1 +- +m1 +new +no +\S+ +1$`,
	} {
		if !regexp.MustCompile(line).MatchString(out) {
			t.Errorf("the text has no line matching %s:\n%s", line, out)
		}
	}

	t.Logf("status --fleet:\n%s", out)
	// Without --fleet, --star is still required.
	if code, _, errs := runCLI(t, "status", "--database-url", url); code != exitUsage || !strings.Contains(errs, "star") {
		t.Errorf("status without --star nor --fleet: exit %d %q", code, errs)
	}
}
