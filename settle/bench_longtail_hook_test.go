package settle_test

import "github.com/nova/auditor/catalog"

// The long-tail benchmark (TestLongTailStar) runs the settle at the
// cost-aware due rule's fraction 0 (today's rule: every due stream settles
// at linger) and at its default, side by side. The rule (issue 25: the
// fraction catalog.DuePolicy.TailGrowth, key --denorm-tail-growth) is not
// in this build yet: these two functions are the only place the benchmark
// touches it. Wire them when it lands:
//
//	func withTailGrowth(p *catalog.DuePolicy, f float64) bool { p.TailGrowth = f; return true }
//	func defaultTailGrowth() (float64, bool) { return config.Defaults().DenormTailGrowth, true }

// withTailGrowth sets the due rule's fraction f on p; false when this
// build cannot (only fraction 0, today's rule, needs nothing set).
func withTailGrowth(_ *catalog.DuePolicy, f float64) bool { return f == 0 }

// defaultTailGrowth is --denorm-tail-growth's default; false when this
// build has no such key.
func defaultTailGrowth() (float64, bool) { return 0, false }
