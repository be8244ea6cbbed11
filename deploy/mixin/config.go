// Package mixin generates the auditor's Prometheus alert rules
// (deploy/prometheus/alerts.yaml) from a template and a configuration, the
// _config of the monitoring-mixin convention: the scrape jobs' selectors,
// the alerts' thresholds and the runbook base URL. `make mixin` writes the
// default configuration's rules; `go run ./deploy/mixin/gen -config FILE
// -out FILE` writes an operator's own.
package mixin

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// Config is the mixin's _config. Selectors are PromQL label matchers
// without braces (`job="nova-auditor"`); durations are Prometheus
// durations ("15m", "2h", "1d").
type Config struct {
	// SingleStarSelector selects the scrape job of single-star instances
	// (auditor serve --star), whose targets carry `star`.
	SingleStarSelector string `json:"singleStarSelector"`
	// FleetSelector selects the scrape job of fleet members (auditor serve
	// --stars), whose targets carry no `star`.
	FleetSelector string `json:"fleetSelector"`
	// AnySelector selects the targets of both jobs, for
	// NovaAuditorAbsent (nothing of the auditor is scraped): keep it the
	// union of the two above.
	AnySelector string `json:"anySelector"`
	// RunbookBaseURL is where deploy/RUNBOOK.md is published: every
	// alert's runbook_url is <base>#<alert name in lower case>, unless the
	// Prometheus has the external label runbook_base_url, which wins.
	RunbookBaseURL string `json:"runbookBaseURL"`

	NoLeaderFor            model.Duration `json:"noLeaderFor"`            // NovaAuditorNoLeader's for
	StarDownFor            model.Duration `json:"starDownFor"`            // NovaAuditorStarDown's for
	StarGoneWindow         model.Duration `json:"starGoneWindow"`         // NovaAuditorStarGone: how long a star's targets are remembered
	AbsentFor              model.Duration `json:"absentFor"`              // NovaAuditorAbsent's for
	LeaseLossWindow        model.Duration `json:"leaseLossWindow"`        // NovaAuditorLeaseFlapping's window
	LeaseLossesAbove       int            `json:"leaseLossesAbove"`       // NovaAuditorLeaseFlapping: losses in the window
	NoSuccessfulCycleAfter model.Duration `json:"noSuccessfulCycleAfter"` // NovaAuditorNoSuccessfulCycle: keep it well above --schedule
	GaugesStaleAfter       model.Duration `json:"gaugesStaleAfter"`       // NovaAuditorGaugesStale
	SettleLagAbove         model.Duration `json:"settleLagAbove"`         // NovaAuditorSettleLag
	AgeCapHeadroom         float64        `json:"ageCapHeadroom"`         // NovaAuditorAgeCapHeadroom: the fraction of the age cap left
	FenceWaitAbove         model.Duration `json:"fenceWaitAbove"`         // NovaAuditorFenceInProgress
	S3ErrorRatio           float64        `json:"s3ErrorRatio"`           // NovaAuditorS3Errors: the fraction of requests failing
	PausedLongFor          model.Duration `json:"pausedLongFor"`          // NovaAuditorPausedLong's for

	FleetStarUnownedAfter    model.Duration `json:"fleetStarUnownedAfter"`    // NovaAuditorFleetStarUnowned
	FleetStarNoProgressAfter model.Duration `json:"fleetStarNoProgressAfter"` // NovaAuditorFleetStarNoProgress: keep it equal to --fleet-progress-bound
	FleetImbalanceAbove      int            `json:"fleetImbalanceAbove"`      // NovaAuditorFleetImbalance: most minus fewest stars per member
	FleetImbalanceFor        model.Duration `json:"fleetImbalanceFor"`        // NovaAuditorFleetImbalance's for
}

// DefaultRunbookBaseURL is deploy/RUNBOOK.md in the repository the module
// path (github.com/nova/auditor) names.
const DefaultRunbookBaseURL = "https://github.com/nova/auditor/blob/main/deploy/RUNBOOK.md"

// Default is the configuration of the committed rules: the jobs of
// deploy/prometheus/scrape.yaml and the auditor's default flags.
func Default() Config {
	d := func(s string) model.Duration {
		v, err := model.ParseDuration(s)
		if err != nil {
			panic(err)
		}
		return v
	}
	return Config{
		SingleStarSelector:       `job="nova-auditor"`,
		FleetSelector:            `job="nova-auditor-fleet"`,
		AnySelector:              `job=~"nova-auditor|nova-auditor-fleet"`,
		RunbookBaseURL:           DefaultRunbookBaseURL,
		NoLeaderFor:              d("2m"),
		StarDownFor:              d("5m"),
		StarGoneWindow:           d("1d"),
		AbsentFor:                d("5m"),
		LeaseLossWindow:          d("30m"),
		LeaseLossesAbove:         2,
		NoSuccessfulCycleAfter:   d("15m"),
		GaugesStaleAfter:         d("5m"),
		SettleLagAbove:           d("30m"),
		AgeCapHeadroom:           0.25,
		FenceWaitAbove:           d("10m"),
		S3ErrorRatio:             0.05,
		PausedLongFor:            d("2h"),
		FleetStarUnownedAfter:    d("2m"),
		FleetStarNoProgressAfter: d("15m"),
		FleetImbalanceAbove:      1,
		FleetImbalanceFor:        d("30m"),
	}
}

// LoadConfig reads a _config file (YAML or JSON): {"_config": {...}} with
// any of Config's fields; the others keep their defaults. An unknown
// field is an error.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(b)
}

// ParseConfig is LoadConfig of the file's contents.
func ParseConfig(b []byte) (Config, error) {
	doc := struct {
		Config *Config `json:"_config"`
	}{Config: new(Config)}
	*doc.Config = Default()
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		return Config{}, fmt.Errorf("mixin config: %w", err)
	}
	if doc.Config == nil {
		return Config{}, errors.New("mixin config: _config is null")
	}
	return *doc.Config, doc.Config.Validate()
}

// Validate rejects what would make invalid rules.
func (c Config) Validate() error {
	var errs []error
	for name, sel := range map[string]string{"singleStarSelector": c.SingleStarSelector, "fleetSelector": c.FleetSelector, "anySelector": c.AnySelector} {
		if strings.TrimSpace(sel) == "" || strings.ContainsAny(sel, "{}\n") {
			errs = append(errs, fmt.Errorf("%s %q: want label matchers without braces, e.g. job=\"nova-auditor\"", name, sel))
		}
	}
	if u, err := url.Parse(c.RunbookBaseURL); err != nil || u.Scheme == "" || u.Host == "" || u.Fragment != "" || strings.ContainsAny(c.RunbookBaseURL, "'{} \n") {
		errs = append(errs, fmt.Errorf("runbookBaseURL %q: want an absolute URL without a fragment", c.RunbookBaseURL))
	}
	for name, d := range map[string]model.Duration{
		"noLeaderFor": c.NoLeaderFor, "starDownFor": c.StarDownFor, "starGoneWindow": c.StarGoneWindow, "absentFor": c.AbsentFor,
		"leaseLossWindow": c.LeaseLossWindow, "noSuccessfulCycleAfter": c.NoSuccessfulCycleAfter, "gaugesStaleAfter": c.GaugesStaleAfter,
		"settleLagAbove": c.SettleLagAbove, "fenceWaitAbove": c.FenceWaitAbove, "pausedLongFor": c.PausedLongFor,
		"fleetStarUnownedAfter": c.FleetStarUnownedAfter, "fleetStarNoProgressAfter": c.FleetStarNoProgressAfter, "fleetImbalanceFor": c.FleetImbalanceFor,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a positive duration", name))
		}
	}
	if c.LeaseLossesAbove < 0 || c.FleetImbalanceAbove < 0 {
		errs = append(errs, errors.New("leaseLossesAbove and fleetImbalanceAbove: want 0 or more"))
	}
	if !(c.AgeCapHeadroom > 0 && c.AgeCapHeadroom < 1) || !(c.S3ErrorRatio > 0 && c.S3ErrorRatio < 1) {
		errs = append(errs, errors.New("ageCapHeadroom and s3ErrorRatio: want a fraction between 0 and 1"))
	}
	return errors.Join(errs...)
}

//go:embed alerts.yaml.tmpl
var alertsTemplate string

// Rules renders the alert rules of c. The template's actions are {% %}:
// {{ }} is Prometheus's own templating of the annotations.
func Rules(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	t, err := template.New("alerts.yaml").Delims("{%", "%}").Option("missingkey=error").Funcs(template.FuncMap{
		"dur":   func(d model.Duration) string { return d.String() },
		"secs":  func(d model.Duration) string { return strconv.FormatInt(int64(time.Duration(d)/time.Second), 10) },
		"human": human,
		"pct":   func(f float64) string { return strconv.FormatFloat(math.Round(f*1e4)/100, 'f', -1, 64) + "%" },
		"runbook": func(alert string) string {
			return "{{ with $externalLabels.runbook_base_url }}{{ . }}{{ else }}" + c.RunbookBaseURL + "{{ end }}#" + strings.ToLower(alert)
		},
	}).Parse(alertsTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, c); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// human says a duration in words: "2 minutes", "1 day", "90 seconds".
func human(d model.Duration) string {
	s := int64(time.Duration(d) / time.Second)
	for _, u := range []struct {
		secs int64
		name string
	}{{86400, "day"}, {3600, "hour"}, {60, "minute"}, {1, "second"}} {
		if s >= u.secs && s%u.secs == 0 {
			n := s / u.secs
			if n == 1 {
				return "1 " + u.name
			}
			return strconv.FormatInt(n, 10) + " " + u.name + "s"
		}
	}
	return d.String()
}
