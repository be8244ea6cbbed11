package pendingobj

import (
	"errors"
	"fmt"
	"io/fs"
)

// Error classes. Branch on them with errors.Is:
//
//   - fs.ErrExist: Install found the final file already in place.
//   - fs.ErrNotExist: the final file (or the directory) is missing.
//   - ErrCorrupt: the file's bytes are damaged or were written wrongly.
//   - ErrChecksum: the object bytes do not match the recorded SHA-256; it is a
//     kind of ErrCorrupt with its own sentinel so bit rot can be counted apart.
//   - ErrFormatID: the file is intact as far as can be told but was written
//     under another format ID. Like an unknown format version it is a deploy
//     problem, not corruption, and does not match ErrCorrupt.
//   - ErrInvalidArgument: a caller mistake; it also matches fs.ErrInvalid.
//
// File-content failures are returned as *FormatError, which names the
// position, path and byte offset of the failing field.
var (
	ErrCorrupt         = errors.New("pendingobj: corrupt sidecar")
	ErrChecksum        = errors.New("pendingobj: checksum mismatch")
	ErrFormatID        = errors.New("pendingobj: format ID mismatch")
	ErrInvalidArgument = fmt.Errorf("pendingobj: %w", fs.ErrInvalid)
)

// FormatError reports a sidecar whose bytes fail validation.
type FormatError struct {
	Position uint64
	Path     string
	Offset   int64  // first byte of the failing field (docs/format.md#pending-object-sidecar layout)
	What     string // what failed, in words
	Err      error  // ErrCorrupt, ErrChecksum or ErrFormatID
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: position %d, %s, offset %d: %s", e.Err, e.Position, e.Path, e.Offset, e.What)
}

func (e *FormatError) Unwrap() error { return e.Err }

// Is makes a checksum mismatch match ErrCorrupt as well as ErrChecksum.
func (e *FormatError) Is(target error) bool {
	return target == ErrCorrupt && e.Err == ErrChecksum
}

// argError is a caller mistake; its text leaves the package prefix to the
// operation that wraps it.
type argError struct{ msg string }

func (e *argError) Error() string { return "invalid argument: " + e.msg }

func (e *argError) Is(target error) bool {
	return target == ErrInvalidArgument || target == fs.ErrInvalid
}

func invalidf(format string, args ...any) error {
	return &argError{msg: fmt.Sprintf(format, args...)}
}
