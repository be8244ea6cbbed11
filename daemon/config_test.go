package daemon_test

import (
	"strings"
	"testing"

	"github.com/nova/auditor/daemon"
)

// TestNewRefusesAnIncompleteConfig: the daemon takes a complete
// configuration; a zero interval is an error naming it, not a default
// applied behind the caller's back.
func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	for name, zero := range map[string]func(*daemon.Config){
		"AdminPoll":        func(c *daemon.Config) { c.AdminPoll = 0 },
		"GaugeInterval":    func(c *daemon.Config) { c.GaugeInterval = 0 },
		"RetryMax":         func(c *daemon.Config) { c.RetryMax = 0 },
		"RulesInterval":    func(c *daemon.Config) { c.RulesInterval = 0 },
		"DBRetryMax":       func(c *daemon.Config) { c.DBRetryMax = 0 },
		"PruneBatch":       func(c *daemon.Config) { c.PruneBatch = 0 },
		"LeaseCallTimeout": func(c *daemon.Config) { c.LeaseCallTimeout = 0 },
	} {
		cfg := testConfig(t, "h")
		zero(&cfg)
		if _, err := daemon.New(cfg, daemon.Deps{}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s zero: %v, want an error naming it", name, err)
		}
	}
	if _, err := daemon.New(testConfig(t, "h"), daemon.Deps{}); err == nil || strings.Contains(err.Error(), "positive") {
		t.Errorf("complete configuration without a database: %v, want only the missing database", err)
	}
}
