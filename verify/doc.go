// Package verify is `auditor verify`, the offline fsck of a star
// (docs/operations.md#operator-surface): the catalog's entries tile each
// stream up to settled_through, and every entry's settled object exists,
// decodes as a bundle of its stream (every CRC checked), matches its row
// and holds the records of applied erasures as tombstones only. It reads
// the metastore and the store and changes neither; it needs no lease.
package verify
