package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
)

// A dry run plans what the star's leader would do, so it plans with the
// policy the leader recorded when it took the lease (catalog.Runtime)
// rather than the local configuration's, which may differ from the
// deployment's; a flag given on the command line overrides the leader's
// value, and the output says so. With no leader's record it plans with
// the local configuration and says that.

// PolicySetting is one key of the dry run's policy and where its value
// came from.
type PolicySetting struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`           // leader, flag (overrides the leader's), local (no leader's record)
	Leader string `json:"leader,omitempty"` // the leader's value a flag overrides
}

// DryRunPolicy is the policy a dry run planned with.
type DryRunPolicy struct {
	Recorded   bool            `json:"recorded"` // a leader recorded a policy
	Holder     string          `json:"holder,omitempty"`
	Token      int64           `json:"token,omitempty"`
	Version    string          `json:"version,omitempty"`
	RecordedAt *time.Time      `json:"recorded_at,omitempty"`
	Settings   []PolicySetting `json:"settings"`
}

// DryRunReport is what `auditor run --dry-run --json` prints: the policy,
// the plan's lines as the steps print them, and the counts.
type DryRunReport struct {
	Star   string            `json:"star"`
	Policy DryRunPolicy      `json:"policy"`
	Plan   []string          `json:"plan"`
	Counts catalog.RunCounts `json:"counts"`
}

// runtimeReader is what leaderPolicy reads of the metastore.
type runtimeReader interface {
	Runtime(ctx context.Context, star string) (catalog.Runtime, error)
}

// policyKey is a key of the due policy the leader records: its value in
// the leader's record and in the configuration.
type policyKey struct {
	name   string
	leader func(catalog.Runtime) string
	set    func(*config.Config, catalog.Runtime) // the leader's value into the configuration
	local  func(config.Config) string
}

func durationPolicyKey(name string, rt func(catalog.Runtime) time.Duration, cfg func(*config.Config) *time.Duration) policyKey {
	return policyKey{name: name,
		leader: func(r catalog.Runtime) string { return rt(r).String() },
		set:    func(c *config.Config, r catalog.Runtime) { *cfg(c) = rt(r) },
		local:  func(c config.Config) string { return cfg(&c).String() }}
}

// policyKeys are the keys a leader records (catalog.Ledger.RecordRuntime) that
// the configuration sets. The copy floor is no key: buildParts takes the
// leader's.
func policyKeys() []policyKey {
	return []policyKey{
		durationPolicyKey("denorm-linger", func(r catalog.Runtime) time.Duration { return r.Policy.Linger },
			func(c *config.Config) *time.Duration { return &c.DenormLinger }),
		durationPolicyKey("denorm-age-cap", func(r catalog.Runtime) time.Duration { return r.Policy.AgeCap },
			func(c *config.Config) *time.Duration { return &c.DenormAgeCap }),
		durationPolicyKey("express-denorm-linger", func(r catalog.Runtime) time.Duration { return r.Policy.ExpressLinger },
			func(c *config.Config) *time.Duration { return &c.ExpressDenormLinger }),
		durationPolicyKey("express-denorm-age-cap", func(r catalog.Runtime) time.Duration { return r.Policy.ExpressAgeCap },
			func(c *config.Config) *time.Duration { return &c.ExpressDenormAgeCap }),
		{name: "denorm-tail-growth",
			leader: func(r catalog.Runtime) string { return strconv.FormatFloat(r.Policy.TailGrowth, 'g', -1, 64) },
			set:    func(c *config.Config, r catalog.Runtime) { c.DenormTailGrowth = r.Policy.TailGrowth },
			local:  func(c config.Config) string { return strconv.FormatFloat(c.DenormTailGrowth, 'g', -1, 64) }},
		{name: "denorm-tail-cohorts",
			leader: func(r catalog.Runtime) string { return strconv.Itoa(r.Policy.Cohorts) },
			set:    func(c *config.Config, r catalog.Runtime) { c.DenormTailCohorts = int64(r.Policy.Cohorts) },
			local:  func(c config.Config) string { return strconv.FormatInt(c.DenormTailCohorts, 10) }},
		durationPolicyKey("reap-grace", func(r catalog.Runtime) time.Duration { return r.ReapGrace },
			func(c *config.Config) *time.Duration { return &c.ReapGrace }),
	}
}

// leaderPolicy sets cfg's policy keys to the leader's recorded values,
// but for those given as flags (fs), and says where each came from. A
// mix of the leader's values and flags that does not validate (an age
// cap below a linger) is a configuration error naming the key.
func leaderPolicy(ctx context.Context, db runtimeReader, cfg *config.Config, fs *pflag.FlagSet) (DryRunPolicy, error) {
	given := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	var p DryRunPolicy
	rt, err := db.Runtime(ctx, cfg.Star)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		return p, err
	default:
		p = DryRunPolicy{Recorded: true, Holder: rt.Holder, Token: rt.Token, Version: rt.Version, RecordedAt: &rt.UpdatedAt}
	}
	for _, k := range policyKeys() {
		s := PolicySetting{Key: k.name, Source: "local"}
		switch {
		case p.Recorded && given[k.name]:
			s.Source, s.Leader = "flag", k.leader(rt)
		case p.Recorded:
			s.Source = "leader"
			k.set(cfg, rt)
		}
		s.Value = k.local(*cfg)
		p.Settings = append(p.Settings, s)
	}
	return p, cfg.Validate()
}

// write prints the policy as the dry run's text output opens.
func (p DryRunPolicy) write(w io.Writer, star string) {
	if !p.Recorded {
		fmt.Fprintf(w, "dry run policy: no leader of star %s has recorded one; planning with the local configuration\n", star)
	} else {
		fmt.Fprintf(w, "dry run policy: the leader's, recorded by %s (token %d, version %s) at %s\n",
			p.Holder, p.Token, p.Version, p.RecordedAt.UTC().Format(time.RFC3339))
	}
	for _, s := range p.Settings {
		switch s.Source {
		case "flag":
			fmt.Fprintf(w, "  %s %s (--%s given: overrides the leader's %s)\n", s.Key, s.Value, s.Key, s.Leader)
		default:
			fmt.Fprintf(w, "  %s %s (%s)\n", s.Key, s.Value, s.Source)
		}
	}
}

// planLines splits the plan the steps printed into its lines.
func planLines(b string) []string {
	lines := strings.Split(strings.TrimRight(b, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return []string{}
	}
	return lines
}

// writeDryRunJSON prints the report.
func writeDryRunJSON(w io.Writer, r DryRunReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
