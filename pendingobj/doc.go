// Package pendingobj is the durable, checksummed pending-object sidecar store
// of the kcode-pending-object-store 0.1.x specification; docs/format.md#pending-object-sidecar
// is the byte layout and format.go draws it. The auditor stages every locally
// gathered upload part here before uploading it (docs/architecture.md#local-pending-sidecars).
//
// It owns installation, validation, reconciliation and deletion of the
// sidecar files of one namespace in one directory. It does not own the
// directory (the caller creates it), position assignment, lifecycle policy,
// reference tracking, or serialisation of conflicting operations.
//
// # Durability
//
// Install writes a temporary file, syncs it, links it to the final name
// (link fails rather than replacing, so an existing final file is never
// overwritten), unlinks the temporary name and syncs the directory; the
// comment in Store.install says why link stands in for the spec's rename.
// Whatever point a crash interrupts it at, a position is left with nothing,
// a temporary file that Reconcile removes, or a complete final file.
//
// # Errors
//
// See the variables in errors.go: fs.ErrExist, fs.ErrNotExist, ErrCorrupt
// (with ErrChecksum as its bit-rot subclass), ErrFormatID (a deploy
// problem, deliberately not ErrCorrupt) and ErrInvalidArgument. A sidecar
// failing verification with ErrCorrupt or ErrFormatID must be rebuilt from
// source, never uploaded.
//
// # Concurrency boundary
//
// The store does not coordinate concurrent callers; the caller serialises
// conflicting operations. A Store's fields never change after New, so it may
// be shared between goroutines, and these may run at the same time: Read and
// VerifyAll of anything, and Install of distinct positions. Everything else
// conflicts. In particular two Installs of one position can each unlink the
// other's temporary file, and one may then link the other's half-written
// file into place: the one way to get a torn final file, and the caller's to
// prevent. Reconcile and DeleteAll conflict with every Install, whose
// temporary file they may remove. Nothing guards against other processes or
// hands modifying the directory: one store user per directory (the auditor
// is a singleton per star).
//
// # Memory
//
// Install writes the caller's slice as is (objects from 256 KiB are hashed
// while they are written, not before). Read checks the declared lengths
// against the file's real size before allocating, then holds the object
// once; VerifyAll and Reconcile stream each object through SHA-256 in 1 MiB
// chunks without holding it.
package pendingobj
