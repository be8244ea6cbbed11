package settle

import "github.com/nova/auditor/internal/crashpoint"

// Crash points of the settle step (docs/architecture.md#crash-points-and-the-crash-matrix),
// in the order a publish passes them; Deps.Crash is called with each.
const (
	CrashAfterIntent        crashpoint.Point = "settle.after-intent"         // a batch's publish intents are committed, none of their objects written
	CrashAfterUploadCreated crashpoint.Point = "settle.after-upload-created" // the multipart upload's ID is recorded
	CrashAfterSidecarStaged crashpoint.Point = "settle.after-sidecar-staged" // a gathered part is staged and recorded
	CrashAfterPartCopied    crashpoint.Point = "settle.after-part-copied"    // a part was copied server side
	CrashAfterPartGathered  crashpoint.Point = "settle.after-part-gathered"  // a gathered part was uploaded
	CrashAfterComplete      crashpoint.Point = "settle.after-complete"       // the object is complete, not yet committed
	CrashAfterAdoptionRead  crashpoint.Point = "settle.after-adoption-read"  // a standing object was read for adoption
	CrashBeforeCommit       crashpoint.Point = "settle.before-commit"        // just before the settle commit
	CrashAfterCommit        crashpoint.Point = "settle.after-commit"         // just after it
	CrashAfterReapArmed     crashpoint.Point = "settle.after-reap-armed"     // a rewrite's commit armed the old revision's reap
)

// CrashBatchMidCommit is inside a grouped commit (groupCommit), after a
// stream's savepoint is released, before the transaction commits.
const CrashBatchMidCommit crashpoint.Point = "settle.batch-mid-commit"

// Crash points of the erasure step (docs/architecture.md#erasure): its
// rewrite publishes through settle's path under its own names, then the
// erasure is applied.
const (
	CrashEraseAfterIntent        crashpoint.Point = "erase.after-intent"
	CrashEraseAfterUploadCreated crashpoint.Point = "erase.after-upload-created"
	CrashEraseAfterSidecarStaged crashpoint.Point = "erase.after-sidecar-staged"
	CrashEraseAfterPartCopied    crashpoint.Point = "erase.after-part-copied"
	CrashEraseAfterPartGathered  crashpoint.Point = "erase.after-part-gathered"
	CrashEraseAfterComplete      crashpoint.Point = "erase.after-complete"
	CrashEraseAfterAdoptionRead  crashpoint.Point = "erase.after-adoption-read"
	CrashEraseBeforeCommit       crashpoint.Point = "erase.before-commit"
	CrashEraseAfterCommit        crashpoint.Point = "erase.after-commit"
	CrashEraseAfterApplied       crashpoint.Point = "erase.after-applied" // an erasure's applied_at is set
)

// CrashPoints lists the crash points of the settle and erasure steps in
// cycle order.
func CrashPoints() []crashpoint.Point {
	return []crashpoint.Point{CrashAfterIntent, CrashAfterUploadCreated, CrashAfterSidecarStaged, CrashAfterPartCopied,
		CrashAfterPartGathered, CrashAfterComplete, CrashAfterAdoptionRead, CrashBeforeCommit, CrashBatchMidCommit, CrashAfterCommit,
		CrashAfterReapArmed, CrashEraseAfterIntent, CrashEraseAfterUploadCreated, CrashEraseAfterSidecarStaged,
		CrashEraseAfterPartCopied, CrashEraseAfterPartGathered, CrashEraseAfterComplete, CrashEraseAfterAdoptionRead,
		CrashEraseBeforeCommit, CrashEraseAfterCommit, CrashEraseAfterApplied}
}
