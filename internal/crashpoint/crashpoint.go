// Package crashpoint places named crash points at every boundary of the
// auditor cycle: NOVA_AUDITOR_CRASHPOINT=name[:n] makes
// the process kill itself with SIGKILL at the n-th hit of that point (n
// defaults to 1). NOVA_AUDITOR_PAUSEPOINT=name[:n] makes it stop itself
// with SIGSTOP there instead, until a SIGCONT: a leader frozen at that step
// (GC, a frozen VM), whose requests may then land late
// (docs/architecture.md#no-late-delete). NOVA_AUDITOR_STALLPOINT=name[:n]
// blocks the goroutine that reaches it forever, the rest of the process
// running on: a cycle stuck on a call that never returns, which a fleet
// member must notice and give up (docs/architecture.md#the-fleet). With
// none of them set, a point is a nil check.
package crashpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvVar arms one crash point.
const EnvVar = "NOVA_AUDITOR_CRASHPOINT"

// PauseVar arms one pause point: the same names as the crash points.
const PauseVar = "NOVA_AUDITOR_PAUSEPOINT"

// StallVar arms one stall point: the same names as the crash points.
const StallVar = "NOVA_AUDITOR_STALLPOINT"

// Point names a crash point. Each package that places points declares
// them as Point constants beside the code and lists them in its
// CrashPoints function; cmd/auditor concatenates those lists in cycle
// order (`auditor crashpoints`), and that list is what Parse accepts.
// Names are <step>.<when>, like settle.after-intent.
type Point string

// Set is the armed points (a crash, a pause, or both); a nil *Set never
// acts.
type Set struct {
	arms []*arm
}

// arm is one armed point and what happens at its n-th hit.
type arm struct {
	name     Point
	n        int64
	variable string // the environment variable that armed it
	hits     atomic.Int64
	act      func()
}

// Armed is one armed point, for the warning and the metric that say a
// process runs with fault injection on.
type Armed struct {
	// Kind is crash, pause or stall (NOVA_AUDITOR_CRASHPOINT,
	// NOVA_AUDITOR_PAUSEPOINT, NOVA_AUDITOR_STALLPOINT).
	Kind  string
	Point Point
	N     int64 // the hit it acts at
}

// kinds are the kinds of point by the variable that arms them.
var kinds = map[string]string{EnvVar: "crash", PauseVar: "pause", StallVar: "stall"}

// Armed lists the armed points, in the order of their variables (crash,
// pause, stall); none for a nil Set.
func (s *Set) Armed() []Armed {
	if s == nil {
		return nil
	}
	out := make([]Armed, 0, len(s.arms))
	for _, a := range s.arms {
		out = append(out, Armed{Kind: kinds[a.variable], Point: a.name, N: a.n})
	}
	return out
}

// String is the point as its variable arms it: crash settle.after-intent:2.
func (a Armed) String() string { return fmt.Sprintf("%s %s:%d", a.Kind, a.Point, a.N) }

// FromEnv arms the crash point named by NOVA_AUDITOR_CRASHPOINT, the
// pause point named by NOVA_AUDITOR_PAUSEPOINT and the stall point named
// by NOVA_AUDITOR_STALLPOINT, or returns nil when none is set. A name not in known or a bad count is an error.
func FromEnv(getenv func(string) string, known []Point) (*Set, error) {
	var s *Set
	for _, v := range []struct {
		name string
		act  func()
	}{
		{EnvVar, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }},
		{PauseVar, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }},
		{StallVar, func() { select {} }},
	} {
		val := getenv(v.name)
		if val == "" {
			continue
		}
		one, err := parse(v.name, val, known, v.act)
		if err != nil {
			return nil, err
		}
		if s == nil {
			s = one
		} else {
			s.arms = append(s.arms, one.arms...)
		}
	}
	return s, nil
}

// Parse arms name[:n], name one of known, with the given crash action
// (tests pass their own).
func Parse(v string, known []Point, crash func()) (*Set, error) {
	return parse(EnvVar, v, known, crash)
}

func parse(variable, v string, known []Point, act func()) (*Set, error) {
	name, count, hasCount := strings.Cut(v, ":")
	n := int64(1)
	if hasCount {
		var err error
		if n, err = strconv.ParseInt(count, 10, 64); err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: the count must be a positive integer", variable, v)
		}
	}
	if !slices.Contains(known, Point(name)) {
		return nil, fmt.Errorf("%s=%q: unknown crash point (auditor crashpoints lists them)", variable, v)
	}
	return &Set{arms: []*arm{{name: Point(name), n: n, variable: variable, act: act}}}, nil
}

// Hit marks one pass through the named point and acts at the n-th.
func (s *Set) Hit(name Point) {
	if s == nil {
		return
	}
	for _, a := range s.arms {
		if name == a.name && a.hits.Add(1) == a.n {
			a.act()
		}
	}
}

// Func returns Hit as a plain function (nil-safe) for packages that take a
// crash hook.
func (s *Set) Func() func(Point) {
	if s == nil {
		return nil
	}
	return s.Hit
}
