package main

import (
	"context"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/verify"
)

// settledRoot is where every settled key of the explorer's stars lies
// (their streams' bucket, "b0", under it).
const settledRoot = "buckets/"

// oracle checks a quiesced episode (docs/architecture.md#the-fault-explorer):
// novasim check clean (no record lost, duplicated or wrong), auditor verify
// clean, every cataloged key present and read back whole, no object
// overwritten and no late DELETE that removed a key written after it, no
// quarantine, no settled object the catalog does not name (after every
// grace), nothing left open.
func (ep *episode) oracle(ctx context.Context) {
	raw := ep.b.Store
	// After a restore the write path's chain (its refs, slots and epochs)
	// still holds the future the backup forgot, which its restored rows do
	// not account for: the write path's own loss, which reconcile does not
	// rebuild. As in the restore drill (restore_test.go) the check reads
	// the settled records only, against the restored head: at rest that
	// is every record the restored metastore knows.
	rep, err := sim.Check(ctx, ep.db, sim.Storage{Store: raw, Standard: ep.b.Std},
		sim.CheckOptions{Stars: []string{ep.star}, MaxFindings: 5, SettledOnly: ep.restored})
	switch {
	case err != nil:
		ep.fail("novasim check: %v", err)
	case !rep.OK() || rep.Unsettled > 0:
		ep.fail("novasim check (settled only: %v): %d missing, %d duplicated, %d wrong, %d unsettled, %d violations: %v",
			ep.restored, rep.Missing, rep.Duplicated, rep.Wrong, rep.Unsettled, rep.Violations, rep.Findings)
	}
	vr, err := verify.Verify(ctx, ep.db.Streams(), bundle.NewReader(teststore.Topology(ep.x.t, raw, ep.b.Std, nil, nil)), verify.Options{Star: ep.star, Concurrency: 4})
	switch {
	case err != nil:
		ep.fail("verify: %v", err)
	case len(vr.Findings) > 0:
		ep.fail("verify: %v", vr.Findings)
	}
	keys, err := ep.catalogKeys(ctx)
	if err != nil {
		ep.fail("catalog keys: %v", err)
		return
	}
	for key := range keys {
		a, err := raw.Head(ctx, ep.b.Std, key)
		if err != nil {
			ep.fail("cataloged object %s: %v", key, err)
			continue
		}
		if _, _, err := raw.GetRange(ctx, ep.b.Std, key, 0, a.Size); err != nil {
			ep.fail("cataloged object %s does not read back: %v", key, err)
		}
	}
	err = raw.List(ctx, ep.b.Std, settledRoot, func(o objstore.ObjectInfo) error {
		ep.inj.Watch(ctx, raw, ep.b.Std, o.Key)
		if !keys[o.Key] {
			ep.fail("orphan: settled object %s is named by no catalog entry after every grace", o.Key)
		}
		return nil
	})
	if err != nil {
		ep.fail("list the settled objects: %v", err)
	}
	for _, p := range ep.inj.Problems() {
		ep.fail("%s", p)
	}
	ep.checkQuarantine(ctx)
	if q, err := ep.db.Settle().Quarantined(ctx, ep.star); err != nil || len(q) > 0 {
		ep.fail("quarantine left after quiescing: %d rows %v", len(q), err)
	}
	if s := ep.settled(ctx); s != "" {
		ep.fail("not at rest: %s", s)
	}
}

// catalogKeys is the key of every catalog entry of the star.
func (ep *episode) catalogKeys(ctx context.Context) (map[string]bool, error) {
	streams, err := ep.db.Streams().StreamsOfStar(ctx, ep.star)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, st := range streams {
		entries, err := ep.db.Streams().EntriesOfStream(ctx, st.ID)
		if err != nil {
			return nil, fmt.Errorf("entries of %s: %w", st.ID, err)
		}
		for _, en := range entries {
			keys[bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))] = true
		}
	}
	return keys, nil
}
