// Package objstore is the only place that talks to object storage. It defines
// the Store contract used by settle, trim and novasim, and implements it on S3
// (aws-sdk-go-v2, with server-side copy planning) and on a local directory
// (the file backend), plus the storage topology every step is handed. It
// knows nothing of the metastore, nor of the bundle format beyond its
// CRC-32C (the backends check what they assemble with bundlefmt's).
//
// Layout:
//
//   - this package: the Store contract (store.go: the interface, the
//     values it passes, valid keys, S3 encoding of CRC-32C, the context's
//     Observer) and its errors (errors.go); the pure part planner
//     (plan.go, plan_cuts.go: PlanParts, property-tested against an
//     exhaustive search); the storage Topology (topology.go: the standard
//     bucket, a BucketSet per slot class, the zone Health they share for
//     reads, copy sources and deletes, StarTopology, the bucket policy of
//     a star's classes, and the per-attempt deadlines; bucketfanout.go: a
//     set's deletes, aborts and listings); the Instrument wrapper and its
//     Metrics (instrument.go); bucket rules (bucketrules.go); and the
//     backends' configurations (config.go);
//   - s3store: the S3 backend (retry policy, plan execution, resume, the
//     checksum probe);
//   - filestore: the file backend (create-once by hard link, assembly by
//     reflink or copy_file_range), the demo's embedded default;
//   - storetest: the contract suite both backends pass, the topology over
//     them included.
//
// Choices beyond docs/architecture.md (#publish, #reap, #buckets-and-zone-health):
//
//   - Integrity of an assembly. Uploads always carry CRC-32C. With
//     ChecksumFullObject (AWS) the server checks the whole object's CRC at
//     completion, and the parts' CRCs, as the server reports them for copies,
//     are combined and compared with the expected CRC before completing.
//     versitygw 1.8.0 reports the whole source's stored CRC for a ranged
//     copy of an object stored with CRC-32C (other algorithms, or none,
//     copy correctly), so against it use ChecksumBySource with
//     VerifyReadback: an assembly copying only from sources stored with a
//     server-checked algorithm (HEAD tells) is checked by the server,
//     any other is read back, and a wrong one fails with ErrPublishedBad
//     (the caller condemns it). ChecksumParts reads back every assembly.
//     The S3 backend's ProbeChecksum finds, per source algorithm, what a
//     server supports; ChecksumProbe.Configure picks the mode.
//   - Lost answers. A PutObject or completion whose answer was lost and
//     whose retry finds the key taken checks whether the standing object is
//     its own (MD5 ETag, multipart ETag) and then succeeds; otherwise it is
//     ErrExists and the caller adopts or rejects the standing object.
//   - Reads from a BucketSet report ErrNotFound only when every bucket said
//     so: a miss with a zone down is a retryable error, never absence.
//   - The file backend has no parts to speak of: an interrupted assembly
//     resumes by rebuilding its data file from the start (local copies).
package objstore
