package main

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/trim"
)

// trimReader is the daemon's view of trim (status, /status, the gauges):
// trim.ReadStatus, whose decisions it shows as they are.
func trimReader(db *catalog.DB) daemon.TrimReader {
	return func(ctx context.Context, star string, reapGrace time.Duration) (daemon.TrimView, error) {
		ts, err := trim.ReadStatus(ctx, db, star, reapGrace)
		if err != nil {
			return daemon.TrimView{}, err
		}
		v := daemon.TrimView{Cursor: ts.Cursor, Bound: ts.Bound, Head: ts.Head, Releasable: ts.Slots, Lag: ts.Lag,
			SlotsDue: ts.Backlog.SlotsDue, SlotsWaiting: ts.Backlog.SlotsWaiting,
			ObjectsDue: ts.Backlog.ObjectsDue, ObjectsWaiting: ts.Backlog.ObjectsWaiting}
		if w := ts.FenceWait; w != nil {
			v.FenceWait = &daemon.FenceWaitStatus{Epoch: w.Epoch, Since: w.Since}
		}
		if q := ts.Quarantine; q != nil {
			v.Hold = &daemon.TrimHold{Slot: q.Slot, Stream: q.Stream, Record: q.Record, Streams: q.Streams, Bounding: q.Bounding}
		}
		return v, nil
	}
}
