// Package catalog is the metastore: every SQL statement of the project lives
// here, over a pgx/v5 pool. It exposes typed accessors for the tables of
// docs/metastore.md and the fenced transactions of the auditor
// cycle; it knows nothing of object storage. The write path's side of the
// contract (absorb, fencing, novasim's own table) is the subpackage
// catalog/writepath, which the auditor never imports; so are the
// statements only tests run.
//
// DB owns the pool, the fence (fenced), the transaction plumbing (tx,
// ReadOnly snapshots: db.go) and the pool's health (monitor.go). The row
// types and their scanners are types.go. It hands out one small type
// per concern over the same pool (stores.go), each the implementation of
// one step's interface, which the step's own package defines:
//
//   - Streams: stars, streams, refs and catalog entries (status, ls,
//     verify, the operator's commands; verify.CatalogReader)
//   - Settle: the recover, settle and erase steps (settle.Metastore)
//   - Erasures: the erasure rows (auditor erase, the erase step's commits)
//   - Trim: retention, trim, reap, the stray sweep and the idle check
//     (trim.Metastore, trim.IdleReader)
//   - Leases: the star's lease (daemon.Leases)
//   - Fleet: the fleet's members, claims and moves (fleet.Metastore,
//     daemon.FleetStatusReader), on the member's own pool
//   - Requests: the operator's admin requests (daemon.Requests)
//   - Ledger: the run ledger, daemon state, runtime, gauges and status
//     (daemon.Metastore)
//   - Restore: the rewind check's marks and reconcile (rewind.Catalog,
//     reconcile.Catalog)
//
// A read that another concern's interface also needs is declared there as
// well, delegating to its owner: every statement has one home.
//
// Names: a method that reads one thing is named for the thing it returns,
// with no Get or Read (Stream, Star, Run, Runtime, DaemonState, Backlog,
// Mark, TrimState, IdleState, FleetView, ReconcileView); one that reads
// many is named for them (StreamsOfStar, DueStreams, LastRuns, Intents).
// A suffix says how it reads when that matters to the caller (MarkFenced:
// inside the fence). Verbs are for writes (Commit…, Record…, Apply…,
// Arm…, Finish…), and ReadOnly runs reads in one snapshot.
package catalog
