// Package pendingobj is the durable, checksummed pending-object sidecar store
// of the kcode-pending-object-store 0.1.x specification (FORMAT.md section 10).
// It owns installation, validation, reconciliation and deletion of sidecar
// files in one directory; the caller owns the directory, position assignment,
// lifecycle policy and serialisation of conflicting operations.
package pendingobj
