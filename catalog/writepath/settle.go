package writepath

import (
	"context"

	"github.com/nova/auditor/catalog"
)

// The settle step's metastore operations take batches; tests that publish
// an object by hand open and commit one at a time through these.

// OpenIntent opens one publish intent: catalog.Settle.OpenPublishIntents
// with a batch of one.
func OpenIntent(ctx context.Context, db *catalog.DB, f catalog.Fence, t catalog.PublishTarget, class string) (catalog.Intent, error) {
	ins, errs, err := db.Settle().OpenPublishIntents(ctx, f, []catalog.IntentRequest{{Target: t, Class: class}})
	if err != nil {
		return catalog.Intent{}, err
	}
	if errs[0] != nil {
		return catalog.Intent{}, errs[0]
	}
	return ins[0], nil
}

// CommitSettle commits one settled object: catalog.Settle.CommitSettles
// with a group of one.
func CommitSettle(ctx context.Context, db *catalog.DB, f catalog.Fence, c catalog.SettleCommit) error {
	errs, err := db.Settle().CommitSettles(ctx, f, []catalog.StreamCommit{{Stream: c.Entry.Stream, Commits: []catalog.SettleCommit{c}}}, nil)
	if err != nil {
		return err
	}
	return errs[0]
}
