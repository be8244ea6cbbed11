package daemon_test

import (
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
)

// busyFleet has every section of the fleet's status filled: members live,
// draining and expired, one above its cap and one below its floor,
// selectors of every form (all, names with spaces, a pattern, a bad
// pattern), unowned stars handed off, lost and never owned, one no live
// member selects, a star led outside the fleet, and more moves in the
// window than listed.
func busyFleet() (catalog.FleetView, []catalog.FleetMove, []catalog.MoveCount) {
	v := catalog.FleetView{Now: statusNow,
		Members: []catalog.Member{
			{Member: "auditor-0", Instance: "i0", StartedAt: ago(3 * time.Hour), HeartbeatAt: ago(time.Second),
				ExpiresAt: ago(-9 * time.Second), Stars: "a-*,w1", Alive: true},
			{Member: "auditor-1", Instance: "i1", StartedAt: ago(2 * time.Hour), HeartbeatAt: ago(2 * time.Second),
				ExpiresAt: ago(-8 * time.Second), Stars: "a-*", Alive: true},
			{Member: "auditor-2", Instance: "i2", StartedAt: ago(time.Hour), HeartbeatAt: ago(1500 * time.Millisecond),
				ExpiresAt: ago(-8 * time.Second), Stars: " b1, b2 ", Alive: true},
			{Member: "auditor-3", Instance: "i3", StartedAt: ago(time.Hour), HeartbeatAt: ago(time.Second),
				ExpiresAt: ago(-9 * time.Second), Stars: "[", Alive: true, Draining: true},
			{Member: "auditor-4", Instance: "i4", StartedAt: ago(5 * time.Hour), HeartbeatAt: ago(2 * time.Minute),
				ExpiresAt: ago(110 * time.Second), Stars: "all"},
		},
		Stars: []catalog.FleetStar{
			{Star: "a-1", Holder: "auditor-0", Token: 3, ExpiresAt: ago(-10 * time.Second), Live: true, LastMove: time.Hour},
			{Star: "a-2", Holder: "auditor-0", Token: 5, ExpiresAt: ago(-10 * time.Second), Live: true, LastMove: 20 * time.Minute,
				ReleasedWhy: "balance", HandoffAge: 20 * time.Minute},
			{Star: "a-3", Holder: "auditor-0", Token: 1, ExpiresAt: ago(-10 * time.Second), Live: true, LastMove: -time.Second},
			{Star: "a-5", Holder: "auditor-0", Token: 1, ExpiresAt: ago(-10 * time.Second), Live: true, LastMove: 5 * time.Minute},
			{Star: "a-4", Holder: "auditor-4", Token: 7, ExpiresAt: ago(100 * time.Second), Unowned: 100 * time.Second, LastMove: 2 * time.Hour},
			{Star: "b1", Holder: "auditor-3", Token: 2, ExpiresAt: ago(3 * time.Second), Unowned: 3 * time.Second, LastMove: time.Hour,
				ReleasedWhy: "drain", HandoffAge: 3 * time.Second, HandoffTo: "auditor-2"},
			{Star: "b2", Holder: "auditor-2", Token: 2, ExpiresAt: ago(-10 * time.Second), Live: true, LastMove: time.Minute},
			{Star: "c1", ExpiresAt: ago(0), LastMove: -time.Second},
			{Star: "w1", Holder: "solo-0", Token: 9, ExpiresAt: ago(-15 * time.Second), Live: true, LastMove: -time.Second},
		},
	}
	moves := []catalog.FleetMove{
		{At: ago(time.Minute), Star: "b2", From: "auditor-3", To: "auditor-2", Reason: "drain", OverCap: true, Unowned: 40 * time.Millisecond, Token: 2},
		{At: ago(20 * time.Minute), Star: "a-2", From: "auditor-1", To: "auditor-0", Reason: "balance", OverCap: true, Unowned: 12 * time.Millisecond, Token: 5},
		{At: ago(50 * time.Minute), Star: "a-1", From: "auditor-4", To: "auditor-0", Reason: "lost", Unowned: 21 * time.Second, Token: 3},
	}
	counts := []catalog.MoveCount{{Reason: "new", Count: 4}, {Reason: "released"}, {Reason: "drain", Count: 1},
		{Reason: "balance", Count: 1}, {Reason: "stuck"}, {Reason: "lost", Count: 1}}
	return v, moves, counts
}

// TestFleetStatusRendering: the text and the JSON of fleets built from
// constructed reads, byte for byte against testdata (-rewrite rewrites
// them), and the text again from the JSON read back. No database.
func TestFleetStatusRendering(t *testing.T) {
	busyV, busyMoves, busyCounts := busyFleet()
	empty := catalog.FleetView{Now: statusNow}
	for _, tc := range []struct {
		name   string
		s      daemon.FleetStatus
		check  func(daemon.FleetStatus) bool
		expect string
	}{
		{"fleet_busy", daemon.FleetStatusOf(busyV, busyMoves, busyCounts, daemon.FleetStatusOptions{MovesWindow: time.Hour, Moves: 3}),
			func(s daemon.FleetStatus) bool {
				sum := s.Summary
				// N = auditor-0..2; M = a-1..a-5, b1, b2, w1 (not c1):
				// cap 3, floor 2.
				return sum.Stars == 9 && sum.LiveMembers == 3 && sum.SelectedStars == 8 && sum.Cap == 3 && sum.Floor == 2 &&
					sum.Imbalance == 4 && sum.LongestUnowned == 100 && s.Members[0].Balance == daemon.FleetBalanceAboveCap &&
					s.Members[1].Balance == daemon.FleetBalanceBelowFloor && s.Moves.Total == 7 &&
					len(s.Unowned) == 3 && s.Unowned[0].Star == "a-4" && s.Unowned[2].Star == "c1" && !s.Unowned[2].Selected
			}, "9 stars, 8 selected, cap 3, floor 2, imbalance 4 (auditor-0 leads 4, auditor-1 none), 7 moves"},
		{"fleet_empty", daemon.FleetStatusOf(empty, nil, nil, daemon.FleetStatusOptions{MovesWindow: time.Hour, Moves: 20}),
			func(s daemon.FleetStatus) bool {
				return s.Summary == daemon.FleetSummary{} && len(s.Members) == 0 && s.Members != nil && s.Moves.Recent != nil
			}, "zero figures and empty lists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.check(tc.s) {
				t.Errorf("status %+v, want %s", tc.s, tc.expect)
			}
			renderRoundTrip(t, "status_"+tc.name, tc.s)
		})
	}
}
