package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"

	"github.com/nova/auditor/objstore"
)

// How one S3 request is sent: the retry policy around its attempts (do),
// the attempt deadline of its operation's class (opClass), how its answer
// is classed (retryable, statusOf), and the SDK's endpoint resolution,
// remembered per bucket (endpointCache).

// sdkStackReserve is the goroutine stack an S3 request makes sure of before
// the SDK runs (reserveStack). The SDK's middleware chain and net/http run
// deep, and a fresh goroutine's small stack would otherwise grow several
// times on the way down, copying every frame each time; grown once at the
// top, where the stack is shallow, it is one small copy. What it saved:
// docs/measurements.md#figures-behind-the-code.
const sdkStackReserve = 32 << 10

// reserveStack makes sure the calling goroutine's stack has about
// sdkStackReserve bytes free below its caller, growing it (the runtime
// doubles a stack until the frame fits) while it is shallow. Its frame is
// the reservation: the array is written and read at a place the compiler
// cannot know (seed, never negative), so the frame keeps it. Each call
// zeroes the 32 KiB, pages the SDK's frames would touch anyway.
//
//go:noinline
func reserveStack(seed int) byte {
	var frame [sdkStackReserve]byte
	frame[seed%len(frame)] = 1
	return frame[(seed*7)%len(frame)]
}

// do runs one S3 operation under the retry policy: each attempt bounded by
// the deadline of the operation's class (AttemptTimeouts, opClass);
// throttling, 5xx, resets and timeouts retried up to MaxAttempts with
// full-jitter exponential backoff, within ctx's deadline; any other answer
// returned at once. The SDK's own retryer is off (see New), so no retry
// quota can switch backoff off in a storm. An attempt cut at its deadline
// says so (attemptDeadlineError), naming the class and the deadline.
func (s *Store) do(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	reserveStack(len(op))
	obs := objstore.ObserverFrom(ctx)
	class, _ := opClass(op)
	limit := s.cfg.AttemptTimeouts.Of(class)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeoutCause(ctx, limit, &attemptDeadlineError{Class: class, Deadline: limit})
		sent := time.Now()
		err := fn(actx)
		took := time.Since(sent)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			var ad *attemptDeadlineError
			if cause := context.Cause(actx); errors.As(cause, &ad) {
				err = fmt.Errorf("%w: %w", ad, err)
			}
		}
		cancel()
		if errors.Is(err, errFoundTaken) {
			return err // the attempt sent nothing: the HEAD before it answered
		}
		obs.Request(op, statusOf(err), took)
		if err == nil {
			return nil
		}
		if !retryable(err) && ctx.Err() == nil {
			return err
		}
		if ctx.Err() != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || retryable(err) {
				return &objstore.TransientError{Op: op, Err: fmt.Errorf("%w (last attempt: %v)", context.Cause(ctx), err)}
			}
			return err // a definite answer that arrived as the deadline passed
		}
		if attempt >= s.cfg.MaxAttempts {
			return &objstore.TransientError{Op: op, Err: fmt.Errorf("gave up after %d attempts: %w", attempt, err)}
		}
		obs.Retry(op)
		t := time.NewTimer(s.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return &objstore.TransientError{Op: op, Err: fmt.Errorf("%w (last attempt: %v)", context.Cause(ctx), err)}
		case <-t.C:
		}
	}
}

// attemptDeadlineError is the cause of an attempt cut at the deadline of
// its operation's class; do wraps the attempt's error in it.
type attemptDeadlineError struct {
	Class    objstore.OpClass
	Deadline time.Duration
}

func (e *attemptDeadlineError) Error() string {
	return fmt.Sprintf("%s attempt deadline (%s) passed", e.Class, e.Deadline)
}

// opClass is the class of each operation do runs, which sets its attempt
// deadline (objstore.AttemptTimeouts). An operation missing here gets the
// longest deadline of all; TestEveryOperationHasAClass keeps it complete.
func opClass(op string) (objstore.OpClass, bool) {
	switch op {
	case "GetObject", "HeadObject":
		return objstore.OpRead, true
	case "PutObject", "UploadPart":
		return objstore.OpWrite, true
	case "UploadPartCopy":
		return objstore.OpCopy, true
	case "DeleteObjects":
		return objstore.OpDelete, true
	case "ListObjectsV2", "ListParts", "ListMultipartUploads":
		return objstore.OpList, true
	case "CreateMultipartUpload", "CompleteMultipartUpload", "AbortMultipartUpload",
		"GetBucketLifecycleConfiguration", "GetBucketEncryption", "GetBucketVersioning", "GetObjectLockConfiguration":
		return objstore.OpControl, true
	}
	return "", false
}

// backoff is full jitter: uniform in [0, min(max, base * 2^(attempt-1))].
func (s *Store) backoff(attempt int) time.Duration {
	d := s.cfg.BackoffBase << min(attempt-1, 20)
	if d <= 0 || d > s.cfg.BackoffMax {
		d = s.cfg.BackoffMax
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// errProtocol marks a response that cannot be right (a body shorter than
// its range, a range the server ignored): retried like a reset.
var errProtocol = errors.New("malformed response")

// retryable classifies one attempt's error.
func retryable(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if ae.ErrorCode() == "NotImplemented" || httpStatus(err) == 501 {
			return false // a definite answer: the server lacks the call
		}
		switch ae.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestThrottled",
			"InternalError", "ServiceUnavailable", "RequestTimeout",
			"ConditionalRequestConflict", "OperationAborted":
			return true
		}
		switch code := httpStatus(err); {
		case code == 429 || code == 408 || code >= 500:
			return true
		case code >= 400:
			return false
		}
		// an error code in a 200 body without a known retryable code
		return false
	}
	var ip *smithy.InvalidParamsError
	if errors.As(err, &ip) || errors.Is(err, context.Canceled) {
		return false
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return false // a definite answer: the endpoint's certificate is not trusted (s3-ca-file)
	}
	// resets, EOFs, attempt timeouts, garbled or short bodies: the request
	// may not have reached the server, or its answer was lost
	return true
}

// httpStatus is the HTTP status of a failed response, 0 if none arrived.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		return re.Response.StatusCode
	}
	return 0
}

// statusOf names an attempt's outcome for metrics.
func statusOf(err error) string {
	switch {
	case err == nil:
		return "200"
	case httpStatus(err) != 0:
		return strconv.Itoa(httpStatus(err))
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "error"
	}
}

// errorCode is the S3 error code of err, "" if none.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// endpointCacheMax bounds the remembered endpoints (one per bucket and
// client setting in practice); a full cache starts over.
const endpointCacheMax = 1 << 10

// endpointCache remembers the SDK's endpoint resolution. The SDK runs its
// S3 rule set for every request; that is a pure function of the
// parameters, and its evaluation (a function with a frame large enough to
// grow a fresh goroutine's stack several times) is a share of the CPU
// a small object's PUT costs. The object key is left out of the cache
// key: the rule set does not read it (TestEndpointIgnoresKey keeps that
// true across SDK upgrades), and keys are what vary from request to
// request. Errors are not remembered.
type endpointCache struct {
	next s3.EndpointResolverV2
	mu   sync.Mutex
	m    map[endpointKey]smithyendpoints.Endpoint
}

func newEndpointCache(next s3.EndpointResolverV2) *endpointCache {
	return &endpointCache{next: next, m: map[endpointKey]smithyendpoints.Endpoint{}}
}

// optString and optBool are a parameter's value and whether it was set.
type optString struct {
	set bool
	v   string
}

type optBool struct {
	set, v bool
}

func strOf(p *string) optString {
	if p == nil {
		return optString{}
	}
	return optString{true, *p}
}

func boolOf(p *bool) optBool {
	if p == nil {
		return optBool{}
	}
	return optBool{true, *p}
}

// endpointKey is every field of s3.EndpointParameters but Key
// (TestEndpointKeyCoversParameters fails when the SDK adds one).
type endpointKey struct {
	bucket, region, endpoint, prefix, copySource optString

	useFIPS, useDualStack, forcePathStyle, accelerate, useGlobalEndpoint,
	useObjectLambdaEndpoint, disableAccessPoints, disableMultiRegionAccessPoints,
	useArnRegion, useS3ExpressControlEndpoint, disableS3ExpressSessionAuth optBool
}

func keyOf(p s3.EndpointParameters) endpointKey {
	return endpointKey{
		bucket: strOf(p.Bucket), region: strOf(p.Region), endpoint: strOf(p.Endpoint),
		prefix: strOf(p.Prefix), copySource: strOf(p.CopySource),
		useFIPS: boolOf(p.UseFIPS), useDualStack: boolOf(p.UseDualStack),
		forcePathStyle: boolOf(p.ForcePathStyle), accelerate: boolOf(p.Accelerate),
		useGlobalEndpoint:              boolOf(p.UseGlobalEndpoint),
		useObjectLambdaEndpoint:        boolOf(p.UseObjectLambdaEndpoint),
		disableAccessPoints:            boolOf(p.DisableAccessPoints),
		disableMultiRegionAccessPoints: boolOf(p.DisableMultiRegionAccessPoints),
		useArnRegion:                   boolOf(p.UseArnRegion),
		useS3ExpressControlEndpoint:    boolOf(p.UseS3ExpressControlEndpoint),
		disableS3ExpressSessionAuth:    boolOf(p.DisableS3ExpressSessionAuth),
	}
}

// ResolveEndpoint implements s3.EndpointResolverV2. Every call gets its
// own copy of the remembered endpoint's properties and auth options: the
// SDK rewrites a resolved endpoint's auth options in place (its auth
// resolver rebases them, and writes into the signer properties of the
// scheme it picks), which on a shared endpoint would race between
// requests.
func (c *endpointCache) ResolveEndpoint(ctx context.Context, p s3.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := keyOf(p)
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return copyEndpoint(e), nil
	}
	e, err := c.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	if len(c.m) >= endpointCacheMax {
		clear(c.m)
	}
	c.m[k] = e
	c.mu.Unlock()
	return copyEndpoint(e), nil
}

// copyEndpoint copies what of e a request may write to: its headers, its
// properties, and the auth options among them (each option and its
// property sets). The URI is a value already.
func copyEndpoint(e smithyendpoints.Endpoint) smithyendpoints.Endpoint {
	out := smithyendpoints.Endpoint{URI: e.URI, Headers: e.Headers.Clone()}
	out.Properties.SetAll(&e.Properties)
	if opts, ok := smithyauth.GetAuthOptions(&e.Properties); ok {
		cp := make([]*smithyauth.Option, len(opts))
		for i, o := range opts {
			c := &smithyauth.Option{SchemeID: o.SchemeID}
			c.IdentityProperties.SetAll(&o.IdentityProperties)
			c.SignerProperties.SetAll(&o.SignerProperties)
			cp[i] = c
		}
		smithyauth.SetAuthOptions(&out.Properties, cp)
	}
	return out
}
