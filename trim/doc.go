// Package trim closes the data lifecycle of docs/architecture.md#the-cycle with
// four steps of the cycle:
//
//   - Retention (step 3): catalog entries wholly below their stream's
//     low_record are removed and their objects armed for reaping.
//   - Strays (step 5): when the star's sweep is due, the objects no
//     metadata names (FindStrays: the one use of listing) older than the
//     stray guard get their reaps armed (docs/architecture.md#strays).
//   - Trim (step 6): the star's trim cursor moves to its bound (Decide): the
//     earliest slot named by a remaining span ref of the star, capped by the
//     absorbed head and by the first past epoch whose fence is in progress;
//     the passed slots are armed in slot_reaps, in the same fenced
//     transaction.
//   - Reap (step 7): armed slots and objects past their grace are deleted
//     from every bucket of their class, in DeleteObjects batches; see Reap for
//     why every such delete is safe even when it lands late.
//
// Slots to delete are enumerated from star_epochs.end_seq, never by
// listing. Every SQL
// statement is in package catalog (catalog/trim.go, retention.go,
// reaps.go); every S3 call goes
// through the storage topology (objstore.Topology), whose bucket sets fan
// deletes out and share the zone health. Settling, recovery of publish intents and erasure are not
// here. Only this package deletes objects.
package trim
