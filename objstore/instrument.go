package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the object-store metrics (docs/operations.md#operator-surface), registered
// on an injected registry.
type Metrics struct {
	requests     *prometheus.CounterVec
	bytes        *prometheus.CounterVec
	fallthroughs *prometheus.CounterVec
	retries      *prometheus.CounterVec
	latency      *prometheus.HistogramVec
}

// Operations are the S3 operations the S3 backend reports (see InitSeries).
var Operations = []string{"GetObject", "HeadObject", "PutObject", "DeleteObject", "DeleteObjects", "ListObjectsV2",
	"CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload", "AbortMultipartUpload",
	"ListParts", "ListMultipartUploads"}

// NewMetrics builds the metrics and registers them on reg (never the
// default registerer). A name already registered there is an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_s3_requests_total",
			Help: "S3 requests sent (each attempt), by operation and HTTP status (\"error\": no response, \"timeout\").",
		}, []string{"operation", "status"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_bytes_total",
			Help: "Object bytes moved, by path: copied server side, fetched into the process, uploaded from it, read back (fetched to check an assembly the server could not verify).",
		}, []string{"path"}),
		fallthroughs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_store_fallthrough_total",
			Help: "Reads that fell through from a zone's bucket to the next one (a miss or a failure), by the zone that missed.",
		}, []string{"zone"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nova_auditor_s3_retries_total",
			Help: "S3 requests retried after throttling, a 5xx, a reset or a timeout, by operation.",
		}, []string{"operation"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nova_auditor_s3_request_duration_seconds",
			Help:    "Time one S3 request attempt waited for its answer (failed attempts included), by operation.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"operation"}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.requests, m.bytes, m.fallthroughs, m.retries, m.latency} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("object store metrics: %w", err)
	}
	for _, p := range []string{"copied", "fetched", "uploaded", "read_back"} {
		m.bytes.WithLabelValues(p)
	}
	return m, nil
}

// InitSeries pre-initialises the series whose label values are known up
// front, so that rate() and the dashboard have them (at zero) before the
// first event: the retries and latencies of every S3 operation (only for a
// store that speaks S3: a file-backed star would report phantom series)
// and the fall-throughs of every express zone.
func (m *Metrics) InitSeries(s3 bool, zones []string) {
	if s3 {
		for _, op := range Operations {
			m.retries.WithLabelValues(op)
			m.latency.WithLabelValues(op)
		}
	}
	for _, z := range zones {
		m.fallthroughs.WithLabelValues(z)
	}
}

// Requests exposes the requests series; it and the four below are for
// tests and dashboards built in code.
func (m *Metrics) Requests() *prometheus.CounterVec { return m.requests }

// Bytes exposes the bytes series.
func (m *Metrics) Bytes() *prometheus.CounterVec { return m.bytes }

// FallThroughs exposes the fall-throughs series.
func (m *Metrics) FallThroughs() *prometheus.CounterVec { return m.fallthroughs }

// Retries exposes the retries series.
func (m *Metrics) Retries() *prometheus.CounterVec { return m.retries }

// Latency exposes the latency series.
func (m *Metrics) Latency() *prometheus.HistogramVec { return m.latency }

// Instrument wraps store so that its calls feed m: requests and retries
// reported by the backend (see Observer), bytes by path, and read
// fall-throughs of a BucketSet built on the wrapped store.
func Instrument(store Store, m *Metrics) Store {
	return &instrumented{Store: store, m: m}
}

type instrumented struct {
	Store
	m *Metrics
}

var _ FallThroughCounter = (*instrumented)(nil)

// observer feeds m and passes events on to an outer observer, if any.
type observer struct {
	m     *Metrics
	outer Observer
}

func (o observer) Request(op, status string, took time.Duration) {
	o.m.requests.WithLabelValues(op, status).Inc()
	o.m.latency.WithLabelValues(op).Observe(took.Seconds())
	o.outer.Request(op, status, took)
}

func (o observer) Retry(op string) {
	o.m.retries.WithLabelValues(op).Inc()
	o.outer.Retry(op)
}

func (s *instrumented) ctx(ctx context.Context) context.Context {
	return WithObserver(ctx, observer{m: s.m, outer: ObserverFrom(ctx)})
}

func (s *instrumented) add(path string, n int64) {
	if n > 0 {
		s.m.bytes.WithLabelValues(path).Add(float64(n))
	}
}

func (s *instrumented) CountFallThrough(zone string) {
	s.m.fallthroughs.WithLabelValues(zone).Inc()
}

func (s *instrumented) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	data, size, err := s.Store.GetRange(s.ctx(ctx), bucket, key, off, n)
	s.add("fetched", int64(len(data)))
	return data, size, err
}

func (s *instrumented) GetSuffix(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
	data, size, err := s.Store.GetSuffix(s.ctx(ctx), bucket, key, n)
	s.add("fetched", int64(len(data)))
	return data, size, err
}

func (s *instrumented) Head(ctx context.Context, bucket, key string) (Attrs, error) {
	return s.Store.Head(s.ctx(ctx), bucket, key)
}

func (s *instrumented) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	err := s.Store.PutIfAbsent(s.ctx(ctx), bucket, key, data)
	if err == nil {
		s.add("uploaded", int64(len(data)))
	}
	return err
}

func (s *instrumented) Delete(ctx context.Context, bucket string, keys []string) error {
	return s.Store.Delete(s.ctx(ctx), bucket, keys)
}

func (s *instrumented) List(ctx context.Context, bucket, prefix string, fn func(ObjectInfo) error) error {
	return s.Store.List(s.ctx(ctx), bucket, prefix, fn)
}

// Assemble adds the bytes the assembly reports, also when it failed part
// way (they moved all the same). The bytes it read back to check the
// published object are their own path, apart from the fetched ones: a
// cost of the server (one that cannot check copied parts), not of the
// plan.
func (s *instrumented) Assemble(ctx context.Context, req AssembleRequest) (AssembleResult, error) {
	res, err := s.Store.Assemble(s.ctx(ctx), req)
	s.add("copied", res.BytesCopied)
	s.add("fetched", res.BytesFetched-res.BytesReadBack)
	s.add("read_back", res.BytesReadBack)
	s.add("uploaded", res.BytesUploaded)
	return res, err
}

func (s *instrumented) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	return s.Store.AbortAssembly(s.ctx(ctx), bucket, key, uploadID)
}

func (s *instrumented) ListParts(ctx context.Context, bucket, key, uploadID string) ([]PartInfo, error) {
	return s.Store.ListParts(s.ctx(ctx), bucket, key, uploadID)
}

func (s *instrumented) ListAssemblies(ctx context.Context, bucket, key string) ([]string, error) {
	return s.Store.ListAssemblies(s.ctx(ctx), bucket, key)
}

// Unwrap returns the wrapped store.
func (s *instrumented) Unwrap() Store { return s.Store }

// Limits are the part-planning limits of the wrapped store (an S3 store's
// configured ones), DefaultLimits when it plans no parts of its own.
func (s *instrumented) Limits() Limits {
	if l, ok := s.Store.(interface{ Limits() Limits }); ok {
		return l.Limits()
	}
	return DefaultLimits
}
