package objstore

import (
	"context"
	"time"
)

// Observer receives what a backend does inside one Store call: each request
// it sends (op is the S3 operation, status the HTTP status or "error", took
// how long the attempt waited for its answer) and each retry. The
// instrumentation wrapper installs one in the context, so the backends
// carry no metrics of their own.
type Observer interface {
	Request(op, status string, took time.Duration)
	Retry(op string)
}

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
