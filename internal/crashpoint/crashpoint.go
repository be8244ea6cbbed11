// Package crashpoint places named crash points at every boundary of the
// auditor cycle (issue "Prove it"): NOVA_AUDITOR_CRASHPOINT=name[:n] makes
// the process kill itself with SIGKILL at the n-th hit of that point (n
// defaults to 1). With the variable unset, a point is a nil check.
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

// Point names a crash point. Each package that places points declares
// them as Point constants beside the code and lists them in its
// CrashPoints function; cmd/auditor concatenates those lists in cycle
// order (`auditor crashpoints`), and that list is what Parse accepts.
// Names are <step>.<when>, like settle.after-intent.
type Point string

// Set is an armed crash point; a nil *Set never crashes.
type Set struct {
	name  Point
	n     int64
	hits  atomic.Int64
	crash func()
}

// FromEnv arms the crash point named by NOVA_AUDITOR_CRASHPOINT, or returns
// nil when it is unset. A name not in known or a bad count is an error.
func FromEnv(getenv func(string) string, known []Point) (*Set, error) {
	v := getenv(EnvVar)
	if v == "" {
		return nil, nil
	}
	return Parse(v, known, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
}

// Parse arms name[:n], name one of known, with the given crash action
// (tests pass their own).
func Parse(v string, known []Point, crash func()) (*Set, error) {
	name, count, hasCount := strings.Cut(v, ":")
	n := int64(1)
	if hasCount {
		var err error
		if n, err = strconv.ParseInt(count, 10, 64); err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: the count must be a positive integer", EnvVar, v)
		}
	}
	if !slices.Contains(known, Point(name)) {
		return nil, fmt.Errorf("%s=%q: unknown crash point (auditor crashpoints lists them)", EnvVar, v)
	}
	return &Set{name: Point(name), n: n, crash: crash}, nil
}

// Hit marks one pass through the named point and crashes at the n-th.
func (s *Set) Hit(name Point) {
	if s == nil || name != s.name {
		return
	}
	if s.hits.Add(1) == s.n {
		s.crash()
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
