package daemon

import (
	"fmt"
	"path"
	"strings"
)

// StarSelector is the stars a fleet member serves (--stars,
// docs/architecture.md#the-fleet): "all", or a comma-separated list of
// star names and patterns (path.Match: *, ?, [...]). The one rule for
// serve --stars and status --fleet.
type StarSelector struct {
	spec  string
	all   bool
	items []string
}

// ParseStarSelector parses --stars.
func ParseStarSelector(spec string) (StarSelector, error) {
	s := StarSelector{spec: strings.TrimSpace(spec)}
	switch s.spec {
	case "":
		return s, fmt.Errorf("no stars selected")
	case "all":
		s.all = true
		return s, nil
	}
	for _, it := range strings.Split(s.spec, ",") {
		it = strings.TrimSpace(it)
		if it == "" {
			return s, fmt.Errorf("%q: an empty item in the list", s.spec)
		}
		if _, err := path.Match(it, ""); err != nil {
			return s, fmt.Errorf("%q: pattern %q: %w", s.spec, it, err)
		}
		s.items = append(s.items, it)
	}
	return s, nil
}

// String is the selector as given.
func (s StarSelector) String() string { return s.spec }

// Match reports whether the selector selects star.
func (s StarSelector) Match(star string) bool {
	if s.all {
		return true
	}
	for _, it := range s.items {
		if ok, _ := path.Match(it, star); ok {
			return true
		}
	}
	return false
}
