package cycle

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
)

// The error vocabulary of a cycle (docs/architecture.md#error-classes).
// Every error a step meets is one of four kinds, tested in this order:
//
//   - lease lost (IsLeaseLost, catalog.ErrStaleToken): another process may
//     lead now; stop at once, commit nothing more;
//   - halt (IsHalt: ErrHalt, or catalog.ErrInvariant from a commit): an
//     invariant is broken; no more cycles until an operator has looked;
//   - quarantine (IsQuarantine: a *QuarantineError): bad data scoped to
//     one stream; the step sets the stream aside and goes on with the
//     others, so it never leaves Step.Run;
//   - retry (IsRetry): anything else (network, throttling, a busy
//     database); nothing changed beyond committed progress, and the next
//     cycle tries again. A step that did the rest of its work returns it
//     as a *PartialError, so the cycle's later steps still run.

// ErrHalt marks an error that must halt the auditor.
var ErrHalt = errors.New("halt")

// Haltf returns an error that halts the auditor, formatted as fmt.Errorf
// (%w wraps a cause).
func Haltf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrHalt}, args...)...)
}

// IsHalt reports whether err must halt the auditor.
func IsHalt(err error) bool {
	return errors.Is(err, ErrHalt) || errors.Is(err, catalog.ErrInvariant)
}

// ReasonRewound begins the persisted halt reason of a star whose metastore
// is behind its object store (a restore from backup, a failover to a
// replica that lost commits): no cycle runs until `auditor reconcile`
// (docs/architecture.md#rewind-detection).
const ReasonRewound = "metastore_rewound"

// RewoundError halts a star whose metastore has forgotten commits the
// object store remembers. It is a halt (IsHalt), and its text, which
// begins with ReasonRewound, is the reason the halt persists (HaltReason).
type RewoundError struct{ Detail string }

func (e *RewoundError) Error() string { return ReasonRewound + ": " + e.Detail }

// Is makes a RewoundError a halt.
func (e *RewoundError) Is(target error) bool { return target == ErrHalt }

// HaltReason is the reason a halt persists: a named reason's own text (a
// RewoundError), else the whole error's.
func HaltReason(err error) string {
	var rw *RewoundError
	if errors.As(err, &rw) {
		return rw.Error()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// IsRewoundReason reports whether a persisted halt reason is a metastore
// behind the store's (HaltReason of a RewoundError).
func IsRewoundReason(reason string) bool { return strings.HasPrefix(reason, ReasonRewound+":") }

// IsLeaseLost reports whether err says the lease was lost: stop at once.
func IsLeaseLost(err error) bool {
	return errors.Is(err, catalog.ErrStaleToken)
}

// Quarantine classes: the error_class of a quarantine row (and of status).
// The format's three are its own class names (bundlefmt.ClassOf).
const (
	ClassCorrupt     = bundlefmt.ClassCorrupt
	ClassChecksum    = bundlefmt.ClassChecksum
	ClassUnsupported = bundlefmt.ClassUnsupported
	ClassMissing     = "missing"
	ClassTiling      = "tiling"
	ClassAdoption    = "invalid_standing_object"
)

// QuarantineClasses lists every quarantine class.
func QuarantineClasses() []string {
	return []string{ClassCorrupt, ClassChecksum, ClassUnsupported, ClassMissing, ClassTiling, ClassAdoption}
}

// QuarantineError is bad data scoped to one stream: the stream is set aside
// with the reason and the cycle goes on with the others.
type QuarantineError struct {
	SlotKey string
	Class   string
	Err     error
	// Condemn is the key of an uncataloged standing object whose bytes are
	// known to be wrong (an assembly or adoption that failed its data
	// check): the quarantine turns its publish intent into a reap, so the
	// object is deleted while the stream is set aside and the key can be
	// published again from the sources once it is released.
	Condemn string
}

func (e *QuarantineError) Error() string {
	if e.SlotKey == "" {
		return fmt.Sprintf("%s: %v", e.Class, e.Err)
	}
	return fmt.Sprintf("%s in %s: %v", e.Class, e.SlotKey, e.Err)
}

func (e *QuarantineError) Unwrap() error { return e.Err }

// AsQuarantine returns the *QuarantineError in err's chain, if any.
func AsQuarantine(err error) (*QuarantineError, bool) {
	var q *QuarantineError
	ok := errors.As(err, &q)
	return q, ok
}

// IsQuarantine reports whether err sets a stream aside.
func IsQuarantine(err error) bool {
	_, ok := AsQuarantine(err)
	return ok
}

// IsRetry reports whether err is none of the other kinds: a failure that
// the next cycle retries.
func IsRetry(err error) bool {
	return err != nil && !IsLeaseLost(err) && !IsHalt(err) && !IsQuarantine(err)
}

// PartialError is a step's failure that left the rest of the cycle safe to
// run: the step did what it could (settle finished every other stream), and
// what failed is retried by a later cycle. The cycle runs its later steps
// (retention, trim and reap never depend on a failed stream's progress:
// its refs still hold the trim bound) and then ends failed. Without it, one
// stream failing every cycle would stop trim and reap for the whole star.
type PartialError struct{ Err error }

func (e *PartialError) Error() string { return e.Err.Error() }
func (e *PartialError) Unwrap() error { return e.Err }

// IsPartial reports whether err lets the cycle go on with its later steps.
func IsPartial(err error) bool {
	var p *PartialError
	return errors.As(err, &p) && !IsHalt(err) && !IsLeaseLost(err)
}
