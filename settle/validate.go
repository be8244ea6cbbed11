package settle

import (
	"errors"
	"fmt"
	"math"

	"github.com/nova/auditor/catalog"
)

// Validate checks that the configuration is complete: New refuses a zero or
// out-of-range field rather than defaulting it. The defaults live in one
// place each: internal/config for the keys an operator sets (cmd/auditor
// maps them), the Default* constants of this package for the window
// bounds, which have no key.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("settle config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.CapBytes < 1 {
		bad("CapBytes", "%d must be at least 1", c.CapBytes)
	}
	if c.TargetBytes < 1 || c.TargetBytes > c.CapBytes {
		bad("TargetBytes", "%d must be between 1 and CapBytes (%d)", c.TargetBytes, c.CapBytes)
	}
	for field, v := range map[string]int64{"MaxStreams": int64(c.MaxStreams), "MaxBytes": c.MaxBytes,
		"Concurrency": int64(c.Concurrency), "FooterCacheBytes": c.FooterCacheBytes, "WindowRefs": int64(c.WindowRefs),
		"WindowRecords": c.WindowRecords, "HotStreams": int64(c.HotStreams),
		"MaxPendingErasures": int64(c.MaxPendingErasures)} {
		if v < 1 {
			bad(field, "%d must be at least 1", v)
		}
	}
	if c.BatchStreams < 0 {
		bad("BatchStreams", "%d is negative", c.BatchStreams)
	}
	if c.SlotReadGap < 0 {
		bad("SlotReadGap", "%d must not be negative (0 is bundle.DefaultSlotReadGap)", c.SlotReadGap)
	}
	if c.SlotReadBytes < 0 || c.TailCacheBytes < 0 || c.TailSpillBytes < 0 {
		bad("SlotReadBytes/TailCacheBytes/TailSpillBytes", "%d/%d/%d must not be negative (0 turns one off)", c.SlotReadBytes, c.TailCacheBytes, c.TailSpillBytes)
	}
	if c.ReapGrace < 0 {
		bad("ReapGrace", "%s is negative", c.ReapGrace)
	}
	if c.StrayGuard < 0 {
		bad("StrayGuard", "%s is negative", c.StrayGuard)
	}
	if p := c.Policy; p.Linger < 0 || p.AgeCap < 0 || p.ExpressLinger < 0 || p.ExpressAgeCap < 0 {
		bad("Policy", "%+v has a negative duration", p)
	}
	if p := c.Policy; !(p.TailGrowth >= 0) || math.IsInf(p.TailGrowth, 1) {
		bad("Policy.TailGrowth", "%v must be a finite fraction, at least 0", p.TailGrowth)
	} else if p.TailGrowth > 0 && p.CopyFloor < 1 {
		bad("Policy.CopyFloor", "%d must be at least 1 with the tail-growth rule on (objstore.Limits.CopyFloor)", p.CopyFloor)
	}
	if p := c.Policy; p.Cohorts < 0 || p.Cohorts > catalog.MaxCohorts {
		bad("Policy.Cohorts", "%d must be between 0 and %d", p.Cohorts, catalog.MaxCohorts)
	}
	return errors.Join(errs...)
}
