// Package repocheck holds tests about the repository as a whole: no
// comment points outside it (a fresh clone has only docs/), every docs/
// anchor a comment names exists, the import graph points one way, and the
// docs that describe the code are held to it: docs/metastore.md to the
// migrations (every table, column with its type, and index) and
// deploy/README.md to the metrics registry (every metric by its full
// name); and the scripts install Prometheus without leaving its service
// running. It has no code of its own.
package repocheck
