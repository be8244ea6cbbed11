package catalog

import "time"

// TrimView is trim's decision for a star (docs/architecture.md#trim) and
// what is armed for reaping (docs/architecture.md#reap), as status and the
// daemon's gauges show it. trim computes it (trim.Viewer); the daemon only
// shows it, so the daemon does not import trim.
type TrimView struct {
	Cursor, Bound, Head SlotPos // the cursor, min(earliest ref, head, first fence in progress), the absorbed head
	Releasable          int64   // slots between cursor and bound
	// Lag is the slots between the cursor and the head; an epoch whose
	// fence is in progress counts nothing.
	Lag       int64
	FenceWait *TrimFenceWait // a past epoch without end_seq that trim waits at
	Hold      *TrimHold      // the oldest slot a quarantined stream's refs hold
	// Armed reaps: slots and objects past their reap_after (due) or not.
	SlotsDue, SlotsWaiting     int64
	ObjectsDue, ObjectsWaiting int64
}

// TrimFenceWait is a past epoch without end_seq: trim waits at it.
type TrimFenceWait struct {
	Epoch int64
	Since time.Time // when the next epoch started (the fence's step 1)
}

// TrimHold is the oldest slot held by a quarantined stream's refs.
type TrimHold struct {
	Slot     SlotPos
	Stream   StreamID
	Record   int64 // the holding ref's first record
	Streams  int64 // quarantined streams with refs
	Bounding bool  // this slot is the trim bound: trim is held by quarantine
}
