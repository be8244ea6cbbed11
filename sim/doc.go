// Package sim is novasim's engine, and the write path of the tests: it
// plays Nova's write path against the real metastore and object store
// exactly as docs/metastore.md ("The absorb transaction", fencing) and
// docs/format.md describe it, and checks what a settler made of it.
//
// It is not part of the auditor. cmd/novasim drives it, and the
// integration tests of settle, trim and cmd/auditor write through it; no
// package the auditor is built from imports it (internal/repocheck's
// TestImportsPointOneWay holds that). It sits at the top level rather than
// under cmd/novasim/internal because those tests import it.
//
//   - Setup creates stars and streams and records each star's content
//     profile (Content) in nova.sim_stars, so Check needs no flags.
//   - Write runs writer sessions over one star: producer batches from a
//     skewed traffic model (Traffic) are gathered into flights, rendered once
//     with bundlefmt, PUT create-once into the star's next chain slots (every
//     bucket of the express set for an express star) with up to fence_window
//     PUTs in flight, and absorbed in seq order in absorb batches. Faults on
//     request: writer failover, lost flights, crashes between PUT and absorb,
//     lost PUT replies.
//   - Check walks every stream's catalog entries and settled objects and,
//     for what is not yet settled, its span refs and slots, regenerates every
//     record with Gen and compares bytes and timestamps; it also checks the
//     contract's invariants over the metastore and the chain.
//
// A record's content is a pure function of (seed, stream, record number)
// (Gen), so nothing written is stored and a lost flight's reused record
// numbers regenerate identically. Package sim owns no SQL (catalog and
// catalog/writepath do) and makes no S3 call (objstore does).
package sim
