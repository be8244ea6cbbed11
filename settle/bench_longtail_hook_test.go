package settle_test

import (
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/objstore"
)

// The long-tail benchmark (TestLongTailStar) runs the settle at the
// cost-aware due rule's fraction 0 (every due stream settles at linger)
// and at its default, side by side; these two functions are the only
// place it touches the rule.

// withTailGrowth sets the due rule's fraction f on p, with the copy floor
// the daemon uses (the part minimum, or the output cap when smaller:
// cmd/auditor's duePolicy).
func withTailGrowth(p *catalog.DuePolicy, f float64) bool {
	p.TailGrowth = f
	if p.CopyFloor == 0 {
		p.CopyFloor = objstore.DefaultLimits.CopyFloor()
	}
	return true
}

// defaultTailGrowth is --denorm-tail-growth's default.
func defaultTailGrowth() (float64, bool) { return config.Defaults().DenormTailGrowth, true }
