// Package crashpoint places named crash points at every boundary of the
// auditor cycle (issue "Prove it"): NOVA_AUDITOR_CRASHPOINT=name[:n] makes
// the process kill itself with SIGKILL at the n-th hit of that point (n
// defaults to 1). With the variable unset, a point is a nil check.
package crashpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvVar arms one crash point.
const EnvVar = "NOVA_AUDITOR_CRASHPOINT"

// The crash points, in cycle order. Every name used in the code is listed
// here, so `auditor crashpoints` and the crash test cannot miss one.
const (
	AfterIntent        = "settle.after-intent"
	AfterUploadCreated = "settle.after-upload-created"
	AfterSidecarStaged = "settle.after-sidecar-staged"
	AfterPartCopied    = "settle.after-part-copied"
	AfterPartGathered  = "settle.after-part-gathered"
	AfterComplete      = "settle.after-complete"
	AfterAdoptionRead  = "settle.after-adoption-read"
	BeforeCommit       = "settle.before-commit"
	AfterCommit        = "settle.after-commit"
	AfterReapArmed     = "settle.after-reap-armed"
	// The erasure step's rewrite (docs/architecture.md#erasure) publishes
	// through the same path, under its own names.
	EraseAfterIntent        = "erase.after-intent"
	EraseAfterUploadCreated = "erase.after-upload-created"
	EraseAfterSidecarStaged = "erase.after-sidecar-staged"
	EraseAfterPartCopied    = "erase.after-part-copied"
	EraseAfterPartGathered  = "erase.after-part-gathered"
	EraseAfterComplete      = "erase.after-complete"
	EraseAfterAdoptionRead  = "erase.after-adoption-read"
	EraseBeforeCommit       = "erase.before-commit"
	EraseAfterCommit        = "erase.after-commit"
	EraseAfterApplied       = "erase.after-applied"       // an erasure's applied_at is set
	AfterRetention          = "retention-committed"       // trim package: after a retention batch commits
	AfterTrimCommit         = "trim-cursor-committed"     // trim package: after the trim cursor commit
	BeforeSlotDelete        = "reap-slots-before-delete"  // trim package: before each slot range's deletes
	AfterSlotDelete         = "reap-slots-after-delete"   // trim package: after them
	BeforeObjectReap        = "reap-object-before-delete" // trim package: before each batch of object deletes
	AfterObjectReap         = "reap-object-after-delete"  // trim package: after them
	AfterLeaseRenew         = "lease.after-renew"
)

// All lists every crash point.
func All() []string {
	return []string{AfterIntent, AfterUploadCreated, AfterSidecarStaged, AfterPartCopied, AfterPartGathered,
		AfterComplete, AfterAdoptionRead, BeforeCommit, AfterCommit, AfterReapArmed, AfterRetention,
		EraseAfterIntent, EraseAfterUploadCreated, EraseAfterSidecarStaged, EraseAfterPartCopied, EraseAfterPartGathered,
		EraseAfterComplete, EraseAfterAdoptionRead, EraseBeforeCommit, EraseAfterCommit, EraseAfterApplied, AfterTrimCommit,
		BeforeSlotDelete, AfterSlotDelete, BeforeObjectReap, AfterObjectReap, AfterLeaseRenew}
}

// Set is an armed crash point; a nil *Set never crashes.
type Set struct {
	name  string
	n     int64
	hits  atomic.Int64
	crash func()
}

// FromEnv arms the crash point named by NOVA_AUDITOR_CRASHPOINT, or returns
// nil when it is unset. An unknown name or a bad count is an error.
func FromEnv(getenv func(string) string) (*Set, error) {
	v := getenv(EnvVar)
	if v == "" {
		return nil, nil
	}
	return Parse(v, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
}

// Parse arms name[:n] with the given crash action (tests pass their own).
func Parse(v string, crash func()) (*Set, error) {
	name, count, hasCount := strings.Cut(v, ":")
	n := int64(1)
	if hasCount {
		var err error
		if n, err = strconv.ParseInt(count, 10, 64); err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: the count must be a positive integer", EnvVar, v)
		}
	}
	if !slices.Contains(All(), name) {
		return nil, fmt.Errorf("%s=%q: unknown crash point (auditor crashpoints lists them)", EnvVar, v)
	}
	return &Set{name: name, n: n, crash: crash}, nil
}

// Hit marks one pass through the named point and crashes at the n-th.
func (s *Set) Hit(name string) {
	if s == nil || name != s.name {
		return
	}
	if s.hits.Add(1) == s.n {
		s.crash()
	}
}

// Func returns Hit as a plain function (nil-safe) for packages that take a
// crash hook.
func (s *Set) Func() func(string) {
	if s == nil {
		return nil
	}
	return s.Hit
}
