// Package bundle reads stored bundles: the transit slots the write path
// leaves in each class's buckets and the settled objects in the standard
// bucket (docs/format.md). It is the one reader of stored artifacts in the
// auditor: settle's resolve, adoption and tail rewrite, the erasure step,
// verify and inspect all read through a Reader, and nothing else decodes
// a bundle from the store.
//
// A Reader owns, for every read:
//
//   - where the bytes are: the class's bucket set of the storage topology
//     (objstore.Topology), local zone first, falling through a zone the
//     shared health holds off (docs/architecture.md#buckets-and-zone-health);
//     settled objects live with the standard class, in the standard bucket
//     (SettledClass);
//   - what a failure means, in the cycle's one vocabulary
//     (docs/architecture.md#error-classes): bad bytes, a wrong version or a
//     missing slot is a *cycle.QuarantineError naming the key and its class;
//     anything else (network, throttling, a down zone) stays a retry;
//   - the footer cache (FooterCache), kept across cycles and shared by a
//     process's stars: each slot's envelope and footer are read once
//     however many streams and cycles read the slot, while it is held.

// It also lists what the store holds under a stream's settled prefix
// (ListSettled), each key parsed to its coordinates, for the one use
// listing has: finding objects no metadata names
// (docs/metastore.md#no-listing).
//
// What a footer says is bundlefmt's business (decoding, CRCs, bounds);
// which keys exist and who references them is the catalog's. novasim's
// checker reads bundles with code of its own on purpose: an oracle that
// shared this reader would share its bugs.
package bundle
