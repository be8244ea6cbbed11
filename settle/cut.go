package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
)

// Crash points of a cut (PublishCut), on the publish path's places.
const (
	CrashCutAfterIntent   crashpoint.Point = "reconcile.cut-after-intent"   // the cut's publish intent is committed
	CrashCutAfterComplete crashpoint.Point = "reconcile.cut-after-complete" // the cut object stands, not yet cataloged
)

var cutPoints = points{afterIntent: CrashCutAfterIntent, afterComplete: CrashCutAfterComplete}

// ErrCannotCut is a cut the standing object cannot give: the records
// below the end do not end a chunk's batch, or the end lies outside the
// object.
var ErrCannotCut = errors.New("cannot cut the object there")

// Cut is a settled object a cut published: its catalog entry, and the
// publish intent the caller's commit must close.
type Cut struct {
	Entry    catalog.Entry
	Key      string
	IntentID int64
	Adopted  bool
}

// PublishCut publishes the records [first, end) of the settled object at
// key (first is its first record, entries its footer's chunks) as an
// object of its own at the same key base, above every revision the base
// used (the intent decides: docs/architecture.md#no-late-delete), for
// `auditor reconcile`: after a metastore restored from backup, a stream's
// newest object may hold records past the next_record the metastore
// knows, whose numbers the write path will give to other records. The
// chunks wholly below end are copied server side from the object itself;
// the chunk holding end is fetched, checked against its DataCRC, and cut
// (bundlefmt.TruncateRecords). It leaves the publish intent open: the
// caller's commit catalogs the entry and closes it.
func (s *Settler) PublishCut(ctx context.Context, f catalog.Fence, st catalog.Stream, key string, entries []bundlefmt.Entry, end uint64) (Cut, error) {
	parts, err := bundlefmt.ParseSettledKey(key)
	if err != nil {
		return Cut{}, err
	}
	if len(entries) == 0 || end <= entries[0].FirstRecord || end > entries[len(entries)-1].EndRecord() {
		return Cut{}, fmt.Errorf("%w: %s at record %d", ErrCannotCut, key, end)
	}
	t := &Tail{Key: key, FirstRecord: parts.FirstRecord, Revision: parts.Revision}
	var known []knownChunk
	for _, e := range entries {
		if e.FirstRecord >= end {
			break
		}
		var local []byte
		if e.EndRecord() > end {
			data, err := s.read.Chunk(ctx, bundle.Settled(key), e) // checked against its DataCRC
			if err != nil {
				return Cut{}, fmt.Errorf("cut %s at record %d: %w", key, end, err)
			}
			if e, local, err = bundlefmt.TruncateRecords(key, e, data, int(end-e.FirstRecord)); err != nil {
				return Cut{}, fmt.Errorf("%w: %s at record %d: %w", ErrCannotCut, key, end, err)
			}
		}
		t.Entries = append(t.Entries, e)
		t.Local = append(t.Local, local)
		known = append(known, knownChunk{e: e})
	}
	in := PlanInput{Stream: st.ID, Bucket: st.Bucket, StreamEpoch: uint64(st.Epoch), CapBytes: s.c.CapBytes, TargetBytes: s.c.TargetBytes}
	o, err := buildOutput(in, t.FirstRecord, t.Revision+1, t, nil, MeterAll(t.Entries))
	if err != nil {
		return Cut{}, fmt.Errorf("plan the cut of %s at record %d: %w", key, end, err)
	}
	p, intentID, err := s.publish(ctx, f, o, known, cutPoints)
	if err != nil {
		return Cut{}, fmt.Errorf("publish the cut of %s at record %d: %w", key, end, err)
	}
	if p.first != o.FirstRecord || p.end() != end {
		return Cut{}, fmt.Errorf("the cut of %s at record %d: the object at %s covers [%d, %d)", key, end, p.key, p.first, p.end())
	}
	return Cut{Entry: p.catalogEntry(st.ID, st.Epoch), Key: p.key, IntentID: intentID, Adopted: p.adopted}, nil
}
