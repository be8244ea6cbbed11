// Package writepath is the write path's side of the metastore contract
// (docs/metastore.md#tables-the-write-path-owns): creating stars and
// streams, the absorb transaction, fencing a failed writer, raising
// low_record, over the same pool as package catalog. It also holds
// novasim's own table (nova.sim_stars, outside the contract) and the
// statements tests use to break rows on purpose or to skip the grace.
//
// The write-path simulator (novasim, package sim) and the tests use it,
// exactly as a Nova writer would; the auditor never does (no production
// package imports it: internal/repocheck checks this).
package writepath
