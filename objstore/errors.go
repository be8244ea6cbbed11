package objstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors. Backends wrap them with context; test with errors.Is.
var (
	// ErrNotFound: the key holds no object (or, in Assemble, a source is gone).
	ErrNotFound = errors.New("objstore: object not found")
	// ErrExists: a create-once write found the key taken (HTTP 412). The
	// standing object is untouched.
	ErrExists = errors.New("objstore: object already exists")
	// ErrSourceChanged: a source no longer matches its pinned ETag
	// (x-amz-copy-source-if-match or If-Match failed).
	ErrSourceChanged = errors.New("objstore: source object changed")
	// ErrNoUpload: the multipart upload to resume does not exist (aborted,
	// completed, or never created).
	ErrNoUpload = errors.New("objstore: upload not found")
	// ErrInvalidRange: the requested range starts at or beyond the object's end.
	ErrInvalidRange = errors.New("objstore: range not satisfiable")
	// ErrBucketNotFound: the bucket does not exist; a configuration problem,
	// never reported as a missing object.
	ErrBucketNotFound = errors.New("objstore: bucket not found")
	// ErrChecksum: bytes did not match their expected CRC-32C (a source piece,
	// a staged part, or the assembled object).
	ErrChecksum = errors.New("objstore: checksum mismatch")
	// ErrPublishedBad: an assembly completed, so the key now holds the
	// object, but the check that follows the completion (a read-back)
	// found it wrong. It comes with ErrChecksum. The store never deletes
	// it itself: only the auditor's reap step deletes, behind its catalog
	// re-check, so a stale leader cannot delete an object that a new one
	// has adopted and cataloged meanwhile.
	ErrPublishedBad = errors.New("objstore: published object failed its check")
	// ErrInvalidKey: the key or bucket name is not acceptable to the store.
	ErrInvalidKey = errors.New("objstore: invalid key")
)

// TransientError marks a failure worth retrying later: throttling, a 5xx,
// a lost connection, a timeout. Backends return it once their own retry
// policy has given up.
type TransientError struct {
	Op  string
	Err error
}

func (e *TransientError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// SourceError is a failure to read one piece's source during an assembly
// (a ranged GET of it, or a server-side copy out of it that failed for a
// reason other than the upload itself). A caller that holds the same bytes
// under the same key in another bucket (an express slot in another zone)
// may assemble again from there.
type SourceError struct {
	Bucket, Key string
	Err         error
}

func (e *SourceError) Error() string { return e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is worth retrying later with the same
// arguments: a transient failure, a deadline, or a DeleteError whose every
// failure is transient. Not-found, exists, source-changed, checksum and
// other 4xx answers are not.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var de *DeleteError
	if errors.As(err, &de) {
		for _, e := range de.Failed {
			if !IsRetryable(e) {
				return false
			}
		}
		return len(de.Failed) > 0
	}
	var te *TransientError
	if errors.As(err, &te) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// DeleteError lists the keys of one Delete call that were not deleted, each
// with its own error, so the caller can retry exactly those.
type DeleteError struct {
	Bucket string
	Failed map[string]error
}

// Keys returns the failed keys in lexical order.
func (e *DeleteError) Keys() []string {
	keys := make([]string, 0, len(e.Failed))
	for k := range e.Failed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (e *DeleteError) Error() string {
	keys := e.Keys()
	var b strings.Builder
	fmt.Fprintf(&b, "delete %d keys in %s", len(keys), e.Bucket)
	for i, k := range keys {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(keys)-3)
			break
		}
		fmt.Fprintf(&b, "; %s: %v", k, e.Failed[k])
	}
	return b.String()
}
