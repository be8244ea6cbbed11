package settle

import (
	"context"

	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// counted runs a step with an objstore.Tally on its context and takes the
// step's S3 requests and bytes from it once the step ends: every request
// the store sends for the step and every byte it moves is counted where it
// happens, by the backend (objstore.Observer), whether the object it
// served was published, adopted or given up. Read-back bytes are fetched
// bytes (the ledger's bytes_fetched: every byte read through the auditor),
// and also BytesReadBack.
func counted(ctx context.Context, step func(ctx context.Context) (cycle.Counts, error)) (cycle.Counts, error) {
	ctx, tally := objstore.Count(ctx)
	c, err := step(ctx)
	t := tally.Totals()
	c.S3Requests = t.Requests
	c.BytesCopied = t.Copied
	c.BytesFetched = t.Fetched + t.ReadBack
	c.BytesUploaded = t.Uploaded
	c.BytesReadBack = t.ReadBack
	return c, err
}
