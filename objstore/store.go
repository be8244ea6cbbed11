package objstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// The Store contract: the interface every backend implements and the
// values it passes (pieces, attributes, assembly requests and results, the
// hooks and the stager), the keys it accepts, the S3 encoding of a CRC-32C,
// and the Observer a backend reports its requests and bytes to through the
// context.

// Store is object storage as settle, trim, verify and novasim use it. Every
// method takes a bucket and a logical key; the backend prepends its
// configured key prefix. Objects are create-once: nothing here overwrites.
//
// Keys are what docs/format.md#keys derives (slash-separated, no empty,
// "." or ".." segments, no leading slash); backends may reject others with
// ErrInvalidKey. A missing bucket is ErrBucketNotFound, never ErrNotFound.
// Failures worth retrying later satisfy IsRetryable.
type Store interface {
	// GetRange returns the bytes [off, off+n) of the object, fewer only when
	// the object ends first, and the object's total size. n must be > 0.
	// A missing key is ErrNotFound; off at or past the end, ErrInvalidRange.
	GetRange(ctx context.Context, bucket, key string, off, n int64) (data []byte, size int64, err error)

	// GetSuffix returns the last n bytes of the object (all of it when it is
	// shorter, nothing for an empty object) and its total size. n must be
	// > 0. A missing key is ErrNotFound.
	GetSuffix(ctx context.Context, bucket, key string, n int64) (data []byte, size int64, err error)

	// Head returns the object's size and ETag. A missing key is ErrNotFound.
	Head(ctx context.Context, bucket, key string) (Attrs, error)

	// PutIfAbsent creates the object with If-None-Match: * and a checksum
	// (CRC-32C unless the S3 backend's PutChecksum says otherwise). An existing key is ErrExists and keeps its bytes.
	PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error

	// Delete removes the keys; absence is success. Keys that could not be
	// deleted are listed in a *DeleteError so the caller can retry just them.
	Delete(ctx context.Context, bucket string, keys []string) error

	// List calls fn for every object under prefix, in no promised order;
	// fn's error stops the walk and is returned. For finding strays and for
	// tests only: nothing in Nova finds data by listing
	// (docs/metastore.md#no-listing).
	List(ctx context.Context, bucket, prefix string, fn func(ObjectInfo) error) error

	// Assemble builds req.Key create-once from req.Pieces (see
	// AssembleRequest). Completion onto a taken key is ErrExists: the
	// standing object is untouched and the upload (result.UploadID, also
	// reported through Hooks.UploadCreated) stays open until the caller
	// aborts it. A source that no longer matches its pin is
	// ErrSourceChanged; bytes that do not match an expected CRC, ErrChecksum;
	// a resumed upload that no longer exists, ErrNoUpload.
	Assemble(ctx context.Context, req AssembleRequest) (AssembleResult, error)

	// AbortAssembly discards an upload and its parts. An absent upload
	// (already aborted or completed) is success.
	AbortAssembly(ctx context.Context, bucket, key, uploadID string) error

	// ListParts returns the parts an open upload holds, by part number. An
	// absent upload is ErrNoUpload.
	ListParts(ctx context.Context, bucket, key, uploadID string) ([]PartInfo, error)

	// ListAssemblies returns the upload IDs of every open assembly building
	// exactly key, in no promised order (none: an empty list). Recovery
	// uses it to find an upload whose ID a crash kept from being recorded.
	ListAssemblies(ctx context.Context, bucket, key string) ([]string, error)
}

// ObjectInfo is one object a listing found.
type ObjectInfo struct {
	Key  string // the logical key (without the backend's key prefix)
	Size int64
	// LastModified is when the object was created, by the store's clock
	// (S3: the listing's LastModified; the file backend: the file's mtime).
	LastModified time.Time
}

// ListedTimeResolution is the coarsest resolution a store's LastModified
// comes in: S3 servers may truncate it to the second (versitygw does).
const ListedTimeResolution = time.Second

// MinAge is the least the object can be old at now: now less
// LastModified, less ListedTimeResolution, as a truncated LastModified
// makes an object look up to that much older than it is. A guard on an
// object's age (the strays') compares with this, never with more.
func (o ObjectInfo) MinAge(now time.Time) time.Duration {
	return now.Sub(o.LastModified) - ListedTimeResolution
}

// Attrs describes a stored object.
type Attrs struct {
	Size int64
	// ETag identifies this version of the object; pass it as Piece.SrcETag
	// to pin a source.
	ETag string
}

// PartInfo is one part of an open upload.
type PartInfo struct {
	Number    int
	Size      int64
	ETag      string
	CRC32C    uint32
	HasCRC32C bool // the server reported a per-part CRC-32C
}

// Piece is one input of an assembly: either a byte range of an existing
// object (SrcKey set) or local bytes (Data).
type Piece struct {
	SrcBucket string
	SrcKey    string
	Off, Len  int64
	// SrcETag, when set, pins the source: a different object at SrcKey
	// fails the assembly with ErrSourceChanged.
	SrcETag string

	// CRC32C is the expected CRC-32C of this piece's bytes (a DataCRC).
	// When HasCRC32C is set, bytes fetched through the process are checked
	// against it; bytes copied server side are covered by the request's
	// ExpectedCRC32C instead.
	CRC32C    uint32
	HasCRC32C bool

	Data []byte
}

// RangePiece is a piece holding bytes [off, off+n) of bucket/key.
func RangePiece(bucket, key string, off, n int64) Piece {
	return Piece{SrcBucket: bucket, SrcKey: key, Off: off, Len: n}
}

// DataPiece is a piece holding local bytes.
func DataPiece(b []byte) Piece { return Piece{Data: b} }

// Size is the number of bytes the piece contributes.
func (p Piece) Size() int64 {
	if p.SrcKey != "" {
		return p.Len
	}
	return int64(len(p.Data))
}

// Validate checks the piece's shape.
func (p Piece) Validate() error {
	switch {
	case p.SrcKey != "" && p.Data != nil:
		return fmt.Errorf("piece has both a source (%s) and data", p.SrcKey)
	case p.SrcKey != "" && p.SrcBucket == "":
		return fmt.Errorf("piece %s has no source bucket", p.SrcKey)
	case p.SrcKey != "" && (p.Off < 0 || p.Len < 0):
		return fmt.Errorf("piece %s has negative range %d+%d", p.SrcKey, p.Off, p.Len)
	case p.SrcKey == "" && (p.Off != 0 || p.Len != 0 || p.SrcETag != ""):
		return fmt.Errorf("data piece has a source range")
	}
	return nil
}

// Stager keeps gathered parts on local disk while they are uploaded, so that
// memory holds a few parts at a time and a crashed assembly resumes without
// refetching. The auditor implements it over pendingobj (docs/architecture.md#local-pending-sidecars).
type Stager interface {
	// Stage durably stores part's bytes. It is called again for a part
	// whose Load failed (absent or corrupt), with rebuilt bytes, and must
	// then replace the bad copy.
	Stage(part int, data []byte) error
	// Load returns a staged part's bytes after verifying them; an error if
	// the part is absent or corrupt (the assembler then rebuilds it). The
	// assembler uploads loaded bytes only when their length and CRC-32C
	// are the part plan's (a part staged for another plan of the key is
	// rebuilt), so it loads none for a part whose CRC the pieces do not
	// tell (a source range split between parts, or pieces without CRCs).
	Load(part int) ([]byte, error)
}

// Hooks are optional callbacks that let the caller record progress durably
// and place crash points. They are called from one goroutine at a time; an
// error from any of them stops the assembly and is returned.
type Hooks struct {
	// UploadCreated runs right after the upload is created, before any part.
	// If it fails, the upload is aborted.
	UploadCreated func(uploadID string) error
	// PartStaged runs after a gathered part is in the Stager, before upload.
	PartStaged func(part int) error
	// PartDone runs after a part is uploaded (copied: server side).
	PartDone func(part int, copied bool) error
	// Completed runs after the object is published.
	Completed func() error
	// Put runs with the object's bytes when the store PUT it whole from
	// the process (one PutObject, gathered from the pieces), once it is
	// published and before Completed. The bytes must not be changed.
	Put func(data []byte)
}

// AssembleRequest asks for Key in Bucket to be built create-once from Pieces,
// concatenated in order.
type AssembleRequest struct {
	Bucket, Key string
	Pieces      []Piece

	// ExpectedCRC32C is the CRC-32C of the whole object (computed by
	// combine); when HasExpectedCRC32C is set the store refuses to publish,
	// or with read-back verification removes, an object that does not match.
	ExpectedCRC32C    uint32
	HasExpectedCRC32C bool

	// Stager holds gathered parts on disk; nil keeps them in memory only
	// (then a resumed assembly refetches them).
	Stager Stager
	// Source, when set, is asked for the bytes of each source piece the
	// store is about to fetch whole through the process (into a gathered
	// part or a single PUT), before it fetches them: bytes it returns are
	// used as fetched ones would be (checked against the piece's CRC),
	// nil leaves the fetch to the store. A piece the store copies, or
	// fetches only part of, is never asked for; the store plans once,
	// and the caller learns what it fetches by being asked. The piece
	// asked for may be several contiguous pieces of the request, merged
	// (their CRC combined). It may be called concurrently.
	Source func(ctx context.Context, p Piece) ([]byte, error)
	// UploadID, when set, resumes that upload instead of creating one. The
	// pieces may differ from the interrupted call's (another plan of the
	// same key): a part the upload holds, or the Stager has, is used only
	// when it is shown to be this request's part (its CRC-32C is the one
	// the pieces give, or its bytes are those gathered for it), never on
	// its size alone; any other is rebuilt from the pieces.
	UploadID string
	Hooks    Hooks
}

// Size is the length of the object the request builds.
func (r AssembleRequest) Size() int64 {
	var n int64
	for _, p := range r.Pieces {
		n += p.Size()
	}
	return n
}

// AssembleResult reports what an assembly did; the instrumentation wrapper
// adds its byte counts to the metrics.
type AssembleResult struct {
	UploadID string // "" when the object was one PutObject
	Size     int64
	Parts    int
	// BytesCopied moved server side; BytesFetched came through the process
	// by ranged GET (and read-back); BytesUploaded went up from the process.
	BytesCopied, BytesFetched, BytesUploaded int64
	// BytesReadBack is the part of BytesFetched that read the published
	// object back (0 when the server checked it).
	BytesReadBack int64
	// Verified: the whole object's CRC-32C was checked against the
	// expected one, by the server at completion (a full-object upload),
	// in the process before one PutObject, or by reading it back.
	Verified bool
	Requests int
}

// CallUploadCreated runs UploadCreated if set. The Call methods are for
// backends.
func (h Hooks) CallUploadCreated(id string) error {
	if h.UploadCreated == nil {
		return nil
	}
	return h.UploadCreated(id)
}

// CallPartStaged runs PartStaged if set.
func (h Hooks) CallPartStaged(part int) error {
	if h.PartStaged == nil {
		return nil
	}
	return h.PartStaged(part)
}

// CallPartDone runs PartDone if set.
func (h Hooks) CallPartDone(part int, copied bool) error {
	if h.PartDone == nil {
		return nil
	}
	return h.PartDone(part, copied)
}

// CallPut runs Put if set.
func (h Hooks) CallPut(data []byte) {
	if h.Put != nil {
		h.Put(data)
	}
}

// CallCompleted runs Completed if set.
func (h Hooks) CallCompleted() error {
	if h.Completed == nil {
		return nil
	}
	return h.Completed()
}

// ReservedPrefix starts names the stores keep for themselves (temporary
// files, probes); no key segment may start with it.
const ReservedPrefix = ".nova-"

// ValidKey checks a logical key: non-empty, no leading or trailing slash, no
// empty, "." or ".." segment, no NUL, and no segment starting with
// ReservedPrefix.
func ValidKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: %q: empty or longer than 1024 bytes", ErrInvalidKey, key)
	}
	if strings.IndexByte(key, 0) >= 0 {
		return fmt.Errorf("%w: %q: NUL byte", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return fmt.Errorf("%w: %q: empty, \".\" or \"..\" segment", ErrInvalidKey, key)
		case strings.HasPrefix(seg, ReservedPrefix):
			return fmt.Errorf("%w: %q: segment uses the reserved prefix %q", ErrInvalidKey, key, ReservedPrefix)
		}
	}
	return nil
}

// EncodeCRC32C renders crc as S3's x-amz-checksum-crc32c value (base64 of
// the big-endian bytes).
func EncodeCRC32C(crc uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc)
	return base64.StdEncoding.EncodeToString(b[:])
}

// DecodeCRC32C parses an x-amz-checksum-crc32c value. Multipart composite
// values ("...-N") are rejected: they are not a CRC of the bytes.
func DecodeCRC32C(s string) (uint32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("objstore: bad crc32c value %q", s)
	}
	return binary.BigEndian.Uint32(b), nil
}

// Observer receives what a backend does inside one Store call: each request
// it sends (op is the S3 operation, status the HTTP status or "error", took
// how long the attempt waited for its answer), each retry, and the object
// bytes it moved, by path (Copied, Fetched, Uploaded, ReadBack), where they
// moved. The instrumentation wrapper installs one in the context, so the
// backends carry no metrics of their own; a step installs another to count
// its work (Tally).
//
// The file-backed store reports each call as the S3 operation it stands
// for (an assembly as one CompleteMultipartUpload), with status "200", or
// "error" when it failed.
type Observer interface {
	Request(op, status string, took time.Duration)
	Retry(op string)
	Bytes(path string, n int64)
}

// The paths of Observer.Bytes (the path label of nova_auditor_bytes_total).
const (
	// Copied: moved server side (UploadPartCopy; the file store's local
	// copies), never through the process.
	Copied = "copied"
	// Fetched: read into the process (ranged GETs, pieces gathered for an
	// upload), but for ReadBack.
	Fetched = "fetched"
	// Uploaded: sent from the process (PutObject, UploadPart).
	Uploaded = "uploaded"
	// ReadBack: read to check a published object the server could not
	// check (read-back verification; the file store's whole-file CRC).
	// Bytes through the process like Fetched, reported apart.
	ReadBack = "read_back"
)

// Paths are the paths of Observer.Bytes.
var Paths = []string{Copied, Fetched, Uploaded, ReadBack}

type observerKey struct{}

// WithObserver returns ctx carrying o.
func WithObserver(ctx context.Context, o Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserverFrom returns the context's observer, or one that ignores all.
func ObserverFrom(ctx context.Context) Observer {
	if o, ok := ctx.Value(observerKey{}).(Observer); ok {
		return o
	}
	return nopObserver{}
}

type nopObserver struct{}

func (nopObserver) Request(string, string, time.Duration) {}
func (nopObserver) Retry(string)                          {}
func (nopObserver) Bytes(string, int64)                   {}

// Tally counts the requests and bytes reported to it, and passes every
// event on to the observer ctx carried when it was installed (Count).
// Safe for concurrent use.
type Tally struct {
	outer                               Observer
	requests, retries                   atomic.Int64
	copied, fetched, uploaded, readBack atomic.Int64
}

// Count returns ctx carrying a fresh Tally, which sees every request made
// with ctx (or a context derived from it), and the Tally.
func Count(ctx context.Context) (context.Context, *Tally) {
	t := &Tally{outer: ObserverFrom(ctx)}
	return WithObserver(ctx, t), t
}

// Request implements Observer.
func (t *Tally) Request(op, status string, took time.Duration) {
	t.requests.Add(1)
	t.outer.Request(op, status, took)
}

// Retry implements Observer.
func (t *Tally) Retry(op string) {
	t.retries.Add(1)
	t.outer.Retry(op)
}

// Bytes implements Observer.
func (t *Tally) Bytes(path string, n int64) {
	switch path {
	case Copied:
		t.copied.Add(n)
	case Fetched:
		t.fetched.Add(n)
	case Uploaded:
		t.uploaded.Add(n)
	case ReadBack:
		t.readBack.Add(n)
	}
	t.outer.Bytes(path, n)
}

// Totals are what a Tally counted.
type Totals struct {
	Requests, Retries                   int64
	Copied, Fetched, Uploaded, ReadBack int64
}

// Totals returns what t counted so far.
func (t *Tally) Totals() Totals {
	return Totals{Requests: t.requests.Load(), Retries: t.retries.Load(),
		Copied: t.copied.Load(), Fetched: t.fetched.Load(), Uploaded: t.uploaded.Load(), ReadBack: t.readBack.Load()}
}
