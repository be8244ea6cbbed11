package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nova/auditor/catalog"
)

// FleetStatus is what `auditor status --fleet --json` prints: the fleet of
// `auditor serve --stars` (docs/architecture.md#the-fleet) as the
// metastore has it, by the database clock: the members, the stars each
// leads, the stars no one leads, the cap and the imbalance, and the recent
// moves. Like Status it is plain data built from the database alone
// (BuildFleetStatus) and rendered from the value alone.
type FleetStatus struct {
	Now     time.Time           `json:"now"`
	Summary FleetSummary        `json:"summary"`
	Members []FleetMemberStatus `json:"members"` // by name, alive or expired
	Stars   []FleetStarStatus   `json:"stars"`   // every star of the metastore, by name
	// Unowned are the stars without a live lease, the longest unowned
	// first.
	Unowned []FleetStarStatus `json:"unowned"`
	// Outside are the stars led by a holder that is no member: a
	// single-star `auditor serve`, or a member whose row was pruned.
	Outside []FleetStarStatus `json:"led_outside_fleet"`
	Moves   FleetMovesStatus  `json:"moves"`
}

// FleetSummary is the fleet in figures. N is the live members that are
// not draining, M the stars one of them selects (its --stars); the cap is
// ceil(M/N) and the floor floor(M/N), both 0 without such a member.
type FleetSummary struct {
	Members         int `json:"members"`          // member rows, alive or expired
	LiveMembers     int `json:"live_members"`     // alive and not draining: N
	DrainingMembers int `json:"draining_members"` // alive and draining
	ExpiredMembers  int `json:"expired_members"`
	Stars           int `json:"stars"`          // in the metastore
	SelectedStars   int `json:"selected_stars"` // M
	LedStars        int `json:"led_stars"`      // with a live lease
	UnownedStars    int `json:"unowned_stars"`
	Cap             int `json:"cap"`
	Floor           int `json:"floor"`
	// Imbalance is the most minus the fewest stars led by a live member
	// that is not draining.
	Imbalance int `json:"imbalance"`
	// LongestUnowned is how long the longest unowned star has had no live
	// owner.
	LongestUnowned float64 `json:"longest_unowned_seconds"`
}

// The balance of a live member that is not draining: its stars led
// against the floor and the cap.
const (
	FleetBalanceOK         = "ok"
	FleetBalanceBelowFloor = "below_floor"
	FleetBalanceAboveCap   = "above_cap"
)

// FleetMemberStatus is a member row and the stars its name leads.
type FleetMemberStatus struct {
	Member   string   `json:"member"`
	Instance string   `json:"instance"`
	Alive    bool     `json:"alive"` // its row has not expired
	Draining bool     `json:"draining"`
	Selector string   `json:"stars_selector"` // its --stars
	Led      int      `json:"led"`
	StarsLed []string `json:"stars_led"`
	// Balance is FleetBalanceOK, FleetBalanceBelowFloor or
	// FleetBalanceAboveCap for a live member that is not draining, empty
	// for the others.
	Balance      string    `json:"balance,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	HeartbeatAt  time.Time `json:"heartbeat_at"`
	HeartbeatAge float64   `json:"heartbeat_age_seconds"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// FleetStarStatus is a star's lease as the fleet sees it.
type FleetStarStatus struct {
	Star      string    `json:"star"`
	Holder    string    `json:"holder,omitempty"` // the lease's holder, live or not ("" never owned)
	Token     int64     `json:"token"`
	Live      bool      `json:"live"`
	ExpiresAt time.Time `json:"expires_at"`
	Unowned   float64   `json:"unowned_seconds"` // 0 when live
	// Selected says a live member that is not draining selects the star.
	Selected bool `json:"selected"`
	// ReleasedWhy and ReleasedAgo are the last release on purpose
	// (released, drain, balance, stuck), HandoffTo the member it named.
	ReleasedWhy string   `json:"released_why,omitempty"`
	ReleasedAgo *float64 `json:"released_seconds_ago,omitempty"`
	HandoffTo   string   `json:"handoff_to,omitempty"`
	// LastMoveAgo is how long ago a member last claimed it (absent: never).
	LastMoveAgo *float64 `json:"last_move_seconds_ago,omitempty"`
}

// FleetMovesStatus is the claims of the window: how many by reason (new,
// released, drain, balance, stuck, lost; see nova.auditor_fleet_moves)
// and the newest ones.
type FleetMovesStatus struct {
	Window   float64           `json:"window_seconds"`
	Total    int               `json:"total"`
	ByReason map[string]int    `json:"by_reason"`
	Limit    int               `json:"limit"`  // most listed in recent
	Recent   []FleetMoveStatus `json:"recent"` // newest first
}

// FleetMoveStatus is one claim of a star by a member.
type FleetMoveStatus struct {
	At      time.Time `json:"at"`
	Star    string    `json:"star"`
	From    string    `json:"from,omitempty"` // "" never owned
	To      string    `json:"to"`
	Reason  string    `json:"reason"`
	OverCap bool      `json:"over_cap"` // beyond the claimer's cap: a hand-off or the liveness rule
	Unowned float64   `json:"unowned_seconds"`
	Token   int64     `json:"token"`
}

// FleetStatusReader is what BuildFleetStatus reads (*catalog.Fleet): read
// only, no lease.
type FleetStatusReader interface {
	FleetView(ctx context.Context, budgetWindow time.Duration) (catalog.FleetView, error)
	FleetMoves(ctx context.Context, window time.Duration, limit int) ([]catalog.FleetMove, error)
	FleetMoveCounts(ctx context.Context, window time.Duration) ([]catalog.MoveCount, error)
}

// FleetStatusOptions say how much of the move log BuildFleetStatus reads.
type FleetStatusOptions struct {
	MovesWindow time.Duration // default an hour
	Moves       int           // moves listed (default 20)
}

// BuildFleetStatus reads the fleet from the metastore. The moves are read
// before the fleet, so none is newer than the fleet's clock.
func BuildFleetStatus(ctx context.Context, db FleetStatusReader, o FleetStatusOptions) (FleetStatus, error) {
	if o.MovesWindow <= 0 {
		o.MovesWindow = time.Hour
	}
	if o.Moves <= 0 {
		o.Moves = 20
	}
	moves, err := db.FleetMoves(ctx, o.MovesWindow, o.Moves)
	if err != nil {
		return FleetStatus{}, err
	}
	counts, err := db.FleetMoveCounts(ctx, o.MovesWindow)
	if err != nil {
		return FleetStatus{}, err
	}
	v, err := db.FleetView(ctx, o.MovesWindow)
	if err != nil {
		return FleetStatus{}, err
	}
	return FleetStatusOf(v, moves, counts, o), nil
}

// FleetStatusOf computes the fleet's status from what BuildFleetStatus
// read.
func FleetStatusOf(v catalog.FleetView, moves []catalog.FleetMove, counts []catalog.MoveCount, o FleetStatusOptions) FleetStatus {
	s := FleetStatus{Now: v.Now, Members: []FleetMemberStatus{}, Stars: []FleetStarStatus{}, Unowned: []FleetStarStatus{},
		Outside: []FleetStarStatus{}, Moves: FleetMovesStatus{Window: o.MovesWindow.Seconds(), Limit: o.Moves,
			ByReason: map[string]int{}, Recent: []FleetMoveStatus{}}}
	byName := map[string]int{}
	var selectors []string
	for _, m := range v.Members {
		byName[m.Member] = len(s.Members)
		s.Members = append(s.Members, FleetMemberStatus{Member: m.Member, Instance: m.Instance, Alive: m.Alive,
			Draining: m.Draining, Selector: m.Stars, StarsLed: []string{}, StartedAt: m.StartedAt,
			HeartbeatAt: m.HeartbeatAt, HeartbeatAge: v.Now.Sub(m.HeartbeatAt).Seconds(), ExpiresAt: m.ExpiresAt})
		switch {
		case !m.Alive:
			s.Summary.ExpiredMembers++
		case m.Draining:
			s.Summary.DrainingMembers++
		default:
			s.Summary.LiveMembers++
			selectors = append(selectors, m.Stars)
		}
	}
	s.Summary.Members = len(v.Members)
	for _, fs := range v.Stars {
		st := FleetStarStatus{Star: fs.Star, Holder: fs.Holder, Token: fs.Token, Live: fs.Live, ExpiresAt: fs.ExpiresAt,
			Unowned: fs.Unowned.Seconds(), ReleasedWhy: fs.ReleasedWhy, HandoffTo: fs.HandoffTo}
		for _, sel := range selectors {
			st.Selected = st.Selected || selects(sel, fs.Star)
		}
		if fs.ReleasedWhy != "" {
			ago := fs.HandoffAge.Seconds()
			st.ReleasedAgo = &ago
		}
		if fs.LastMove >= 0 {
			ago := fs.LastMove.Seconds()
			st.LastMoveAgo = &ago
		}
		s.Stars = append(s.Stars, st)
		if st.Selected {
			s.Summary.SelectedStars++
		}
		i, member := byName[fs.Holder]
		switch {
		case !fs.Live:
			s.Unowned = append(s.Unowned, st)
			s.Summary.LongestUnowned = max(s.Summary.LongestUnowned, st.Unowned)
		case member:
			s.Members[i].Led++
			s.Members[i].StarsLed = append(s.Members[i].StarsLed, fs.Star)
		default:
			s.Outside = append(s.Outside, st)
		}
	}
	s.Summary.Stars = len(v.Stars)
	s.Summary.UnownedStars = len(s.Unowned)
	s.Summary.LedStars = s.Summary.Stars - s.Summary.UnownedStars
	sort.SliceStable(s.Unowned, func(i, j int) bool { return s.Unowned[i].Unowned > s.Unowned[j].Unowned })
	if n := s.Summary.LiveMembers; n > 0 {
		m := s.Summary.SelectedStars
		s.Summary.Floor, s.Summary.Cap = m/n, (m+n-1)/n
	}
	most, fewest := -1, -1
	for i, m := range s.Members {
		if !m.Alive || m.Draining {
			continue
		}
		switch {
		case m.Led < s.Summary.Floor:
			s.Members[i].Balance = FleetBalanceBelowFloor
		case m.Led > s.Summary.Cap:
			s.Members[i].Balance = FleetBalanceAboveCap
		default:
			s.Members[i].Balance = FleetBalanceOK
		}
		if most < 0 || m.Led > most {
			most = m.Led
		}
		if fewest < 0 || m.Led < fewest {
			fewest = m.Led
		}
	}
	if most >= 0 {
		s.Summary.Imbalance = most - fewest
	}
	for _, c := range counts {
		s.Moves.ByReason[c.Reason] = c.Count
		s.Moves.Total += c.Count
	}
	for _, m := range moves {
		s.Moves.Recent = append(s.Moves.Recent, FleetMoveStatus{At: m.At, Star: m.Star, From: m.From, To: m.To,
			Reason: m.Reason, OverCap: m.OverCap, Unowned: m.Unowned.Seconds(), Token: m.Token})
	}
	return s
}

// selects says whether a member's --stars selects a star (a selector
// that does not parse selects none).
func selects(selector, star string) bool {
	sel, err := ParseStarSelector(selector)
	return err == nil && sel.Match(star)
}

// WriteJSON writes the fleet's status as indented JSON: the document
// `auditor status --fleet --json` prints.
func (s FleetStatus) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("encode the fleet's status: %w", err)
	}
	return nil
}

// WriteText prints the fleet's status as tables for a person, in the look
// of Status.WriteText.
func (s FleetStatus) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	ago := func(t time.Time) string { return dur(s.Now.Sub(t)) + " ago" }
	s.writeFleetSummary(p, ts)
	s.writeFleetMembers(p, ts, ago)
	s.writeFleetStars(p, ts)
	s.writeFleetMoves(p, ago)
	return tw.Flush()
}

// writeFleetSummary prints the members, the stars, the cap and imbalance
// and the move counts.
func (s FleetStatus) writeFleetSummary(p func(string, ...any), ts func(time.Time) string) {
	sum := s.Summary
	if sum.Members == 0 {
		p("fleet\tno members: no auditor serve --stars has run against this metastore\t(database clock %s)\n", ts(s.Now))
	} else {
		p("fleet\t%d members: %d live, %d draining, %d expired\t(database clock %s)\n",
			sum.Members, sum.LiveMembers, sum.DrainingMembers, sum.ExpiredMembers, ts(s.Now))
	}
	longest := ""
	if sum.UnownedStars > 0 {
		longest = fmt.Sprintf(" (the longest for %s)", dur(secs(sum.LongestUnowned)))
	}
	p("stars\t%d in the metastore, %d selected by live members; %d led, %d unowned%s\n",
		sum.Stars, sum.SelectedStars, sum.LedStars, sum.UnownedStars, longest)
	if sum.LiveMembers == 0 {
		p("balance\tno live member that is not draining: no cap\n")
	} else {
		p("balance\tcap %d, floor %d over %d live members; imbalance %d (most minus fewest led)\n",
			sum.Cap, sum.Floor, sum.LiveMembers, sum.Imbalance)
	}
	var reasons []string
	for r, n := range s.Moves.ByReason {
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
		}
	}
	sort.Strings(reasons)
	by := ""
	if len(reasons) > 0 {
		by = ": " + strings.Join(reasons, ", ")
	}
	p("moves\t%d in the last %s%s\n", s.Moves.Total, dur(secs(s.Moves.Window)), by)
}

// writeFleetMembers prints a line per member, then the stars each leads.
func (s FleetStatus) writeFleetMembers(p func(string, ...any), ts, ago func(time.Time) string) {
	if len(s.Members) == 0 {
		return
	}
	p("\nMEMBER\tINSTANCE\tSTATE\tLED\tBALANCE\tHEARTBEAT\tSTARTED\tSELECTS\n")
	for _, m := range s.Members {
		state := "live"
		switch {
		case !m.Alive:
			state = "EXPIRED " + ago(m.ExpiresAt)
		case m.Draining:
			state = "draining"
		}
		balance := "-"
		switch m.Balance {
		case FleetBalanceOK:
			balance = "ok"
		case FleetBalanceBelowFloor:
			balance = "BELOW FLOOR"
		case FleetBalanceAboveCap:
			balance = "ABOVE CAP"
		}
		p("%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.Member, m.Instance, state, m.Led, balance,
			dur(secs(m.HeartbeatAge))+" ago", ts(m.StartedAt), strings.TrimSpace(m.Selector))
	}
	p("\nLEADS\tSTARS\n")
	for _, m := range s.Members {
		led := strings.Join(m.StarsLed, ", ")
		if led == "" {
			led = "none"
		}
		p("%s\t%s\n", m.Member, led)
	}
}

// writeFleetStars prints the unowned stars and those led outside the
// fleet.
func (s FleetStatus) writeFleetStars(p func(string, ...any), ts func(time.Time) string) {
	if len(s.Unowned) > 0 {
		p("\nUNOWNED (%d)\tFOR\tLAST HOLDER\tRELEASED\tHANDED TO\tSELECTED\n", len(s.Unowned))
		for _, u := range s.Unowned {
			last := "never owned"
			if u.Holder != "" {
				last = fmt.Sprintf("%s (token %d)", u.Holder, u.Token)
			}
			released := "-"
			if u.ReleasedWhy != "" && u.ReleasedAgo != nil {
				released = u.ReleasedWhy + " " + dur(secs(*u.ReleasedAgo)) + " ago"
			}
			to := u.HandoffTo
			if to == "" {
				to = "-"
			}
			selected := "yes"
			if !u.Selected {
				selected = "NO LIVE MEMBER SELECTS IT"
			}
			p("%s\t%s\t%s\t%s\t%s\t%s\n", u.Star, dur(secs(u.Unowned)), last, released, to, selected)
		}
	}
	if len(s.Outside) > 0 {
		p("\nLED OUTSIDE THE FLEET\tHOLDER\tTOKEN\tLEASE UNTIL\n")
		for _, o := range s.Outside {
			p("%s\t%s\t%d\t%s\n", o.Star, o.Holder, o.Token, ts(o.ExpiresAt))
		}
	}
}

// writeFleetMoves prints the newest moves.
func (s FleetStatus) writeFleetMoves(p func(string, ...any), ago func(time.Time) string) {
	if len(s.Moves.Recent) == 0 {
		return
	}
	p("\nMOVED\tSTAR\tFROM\tTO\tREASON\tOVER CAP\tUNOWNED\tTOKEN\n")
	for _, m := range s.Moves.Recent {
		from, over := m.From, "no"
		if from == "" {
			from = "-"
		}
		if m.OverCap {
			over = "yes"
		}
		p("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", ago(m.At), m.Star, from, m.To, m.Reason, over, dur(secs(m.Unowned)), m.Token)
	}
	if n := s.Moves.Total - len(s.Moves.Recent); n > 0 {
		p("... and %d more in the last %s\n", n, dur(secs(s.Moves.Window))) // no cell: the columns keep their width
	}
}
