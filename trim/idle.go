package trim

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
)

// IdleReader reads what decides that a star's cycle has nothing to do
// (catalog.Trim.IdleState).
type IdleReader interface {
	IdleState(ctx context.Context, star string, p catalog.DuePolicy, strayEvery time.Duration) (catalog.IdleState, error)
}

// IdleCheck is the daemon's idle check (daemon.Idle,
// docs/architecture.md#idle-cycles): in one read-only snapshot, the work
// the catalog sees for the other steps and trim's decision on the same
// state. Policy is the cycle's due policy, StrayEvery the strays step's
// schedule (StrayConfig.Every).
type IdleCheck struct {
	DB         IdleReader
	Policy     catalog.DuePolicy
	StrayEvery time.Duration
}

// Work implements daemon.Idle: the work a cycle of star would find ("" for
// none) and the database clock.
func (c IdleCheck) Work(ctx context.Context, star string) (string, time.Time, error) {
	st, err := c.DB.IdleState(ctx, star, c.Policy, c.StrayEvery)
	if err != nil {
		return "", time.Time{}, err
	}
	if st.Work != "" {
		return st.Work, st.Trim.Now, nil
	}
	// A state trim cannot decide on is the cycle's to report.
	if dec, err := Decide(st.Trim); err != nil || dec.Move {
		return "trim", st.Trim.Now, nil
	}
	return "", st.Trim.Now, nil
}
