package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/nova/auditor/objstore"
)

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
