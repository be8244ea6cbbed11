// Package bundlefmt reads and writes every Nova artifact of format v1 byte-exactly:
// slot envelopes, stored records, chunks, directory entries, index rows and
// trailers, for transit bundles (chain slots) and settled objects, plus the
// object keys of both and CRC-32C combine. The normative contract is
// docs/format.md; this package owns no I/O.
//
// Reading follows the four levels of docs/format.md#validation-and-errors, by what the
// caller holds:
//
//   - the envelope alone (60 bytes): DecodeEnvelope, ValidateEnvelope;
//   - footer + trailer: OpenFooter (trailer, window, bounds, index CRC, every
//     row rule), then VerifyDirectory, or ValidateFooter for all of it in
//     the order of docs/format.md#order; DecodeTrailer first when only the object size is known;
//   - one entry: Footer.Find, then Footer.EntryView (no allocation) or
//     Footer.Entry, each verified by its entry CRC;
//   - the whole object: ValidateObject, every rule including every DataCRC.
//
// Every decoding error is a *FormatError (key, offset, field) wrapping one
// of ErrCorrupt, ErrChecksum (itself a kind of ErrCorrupt) or
// ErrUnsupportedVersion. Encoders reject bad input with ErrInvalid.
//
// Files, by concern: conventions.go (every field's offset and width,
// CRC-32C, keys), format.go (sizes, kinds, stream IDs, errors), decode.go
// (envelope, trailer, and the Footer of a footer window), entry.go
// (directory entries, and the footer written from them), record.go
// (stored records), chunk.go (chunks built and merged), encode.go (whole
// objects), erase.go (a chunk's records erased or truncated) and
// validate.go (every rule, at the footer and whole-object levels).
package bundlefmt
