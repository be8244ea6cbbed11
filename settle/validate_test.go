package settle_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/settle"
)

// TestNewRefusesAnIncompleteConfig: New takes a complete configuration and
// names the field it refuses; a zero field is an error, not a silent
// default (settle concurrency used to become 1 here while the
// configuration's default was 16).
func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	full := settle.Config{CapBytes: 1 << 20, TargetBytes: 256 << 10, MaxStreams: 10, MaxBytes: 1 << 30, Concurrency: 4,
		ReapGrace: time.Minute, FooterCacheBytes: 1 << 20, WindowRefs: settle.DefaultWindowRefs,
		WindowRecords: settle.DefaultWindowRecords, HotStreams: settle.DefaultHotStreams,
		MaxPendingErasures: settle.DefaultMaxPendingErasures}
	top, err := bundle.Topology(nil, "nova", nil, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	deps := settle.Deps{Topology: top}
	if _, err := settle.New(deps, full); err != nil {
		t.Fatalf("a complete configuration: %v", err)
	}
	if s, err := settle.New(settle.Deps{}, full); err == nil || s != nil || !strings.Contains(err.Error(), "topology") {
		t.Errorf("no storage topology: settler %v, error %v", s != nil, err)
	}
	for field, zero := range map[string]func(*settle.Config){
		"CapBytes":           func(c *settle.Config) { c.CapBytes = 0 },
		"TargetBytes":        func(c *settle.Config) { c.TargetBytes = c.CapBytes + 1 },
		"MaxStreams":         func(c *settle.Config) { c.MaxStreams = 0 },
		"MaxBytes":           func(c *settle.Config) { c.MaxBytes = 0 },
		"Concurrency":        func(c *settle.Config) { c.Concurrency = 0 },
		"FooterCacheBytes":   func(c *settle.Config) { c.FooterCacheBytes = 0 },
		"WindowRefs":         func(c *settle.Config) { c.WindowRefs = 0 },
		"WindowRecords":      func(c *settle.Config) { c.WindowRecords = 0 },
		"HotStreams":         func(c *settle.Config) { c.HotStreams = 0 },
		"MaxPendingErasures": func(c *settle.Config) { c.MaxPendingErasures = 0 },
		"ReapGrace":          func(c *settle.Config) { c.ReapGrace = -time.Second },
		"TailGrowth":         func(c *settle.Config) { c.Policy.TailGrowth = math.NaN() },
		"CopyFloor":          func(c *settle.Config) { c.Policy.TailGrowth, c.Policy.CopyFloor = 1, 0 },
	} {
		c := full
		zero(&c)
		s, err := settle.New(deps, c)
		if err == nil || s != nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s broken: settler %v, error %v; want an error naming %s", field, s != nil, err, field)
		}
	}
}
