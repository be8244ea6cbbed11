package objstore

import (
	"context"
	"sync/atomic"
	"time"
)

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
