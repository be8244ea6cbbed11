// Package catalog is the metastore: every SQL statement of the project lives
// here, over a pgx/v5 pool. It exposes typed accessors for the tables of
// docs/metastore.md and the fenced transactions of the auditor
// cycle; it knows nothing of object storage. The write path's side of the
// contract (absorb, fencing, novasim's own table) is the subpackage
// catalog/writepath, which the auditor never imports.
package catalog
