// Package bundlefmt reads and writes every Nova artifact of format v1 byte-exactly:
// slot envelopes, stored records, chunks, directory entries, index rows and
// trailers, for transit bundles (chain slots) and settled objects, plus the
// object keys of both and CRC-32C combine. The normative contract is
// ../shared/design/FORMAT.md; this package owns no I/O.
package bundlefmt
