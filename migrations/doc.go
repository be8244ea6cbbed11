// Package migrations holds the embedded, forward-only SQL migrations of the
// nova schema (docs/metastore.md) and the runner that applies them under an
// advisory lock, records the version and refuses a database newer than the
// binary.
package migrations
