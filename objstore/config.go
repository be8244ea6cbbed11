package objstore

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The backends' configurations: the S3 backend's (its checksum modes and
// what a checksum probe picks, its defaults and their validation) and the
// file backend's.

// ChecksumMode says how an S3 assembly's integrity is checked by the server.
type ChecksumMode string

const (
	// ChecksumFullObject means uploads carry CRC-32C with checksum type
	// FULL_OBJECT and completion sends the whole object's CRC-32C, so the
	// server refuses a wrong assembly (AWS S3).
	ChecksumFullObject ChecksumMode = "full-object"
	// ChecksumParts means each uploaded part and PutObject carries its CRC-32C,
	// but the upload has no checksum type and completion sends none. For
	// servers whose copied parts report wrong checksums (versitygw 1.8.0
	// reports the whole source's CRC for a ranged UploadPartCopy when the
	// source was stored with one). Pair with VerifyReadback.
	ChecksumParts ChecksumMode = "parts"
	// ChecksumBySource decides per assembly: ChecksumFullObject when every
	// source it copies server side is stored with an algorithm in
	// S3Config.ServerChecked (the server computes a ranged copy's CRC-32C
	// from the bytes), ChecksumParts with read-back otherwise. Requires
	// VerifyReadback. ChecksumProbe.Configure picks it for versitygw
	// 1.8.0, whose ranged copies misreport only for sources stored with
	// CRC-32C (docs/architecture.md#publish).
	ChecksumBySource ChecksumMode = "by-source"
)

// ChecksumAlgorithm is an S3 checksum algorithm an object is stored with,
// as HeadObject reports it ("" when it reports none).
type ChecksumAlgorithm string

// The algorithms S3 stores; AlgorithmNone asks PutIfAbsent to send none
// (the server stores its default: CRC-64/NVME on AWS and versitygw).
const (
	AlgorithmCRC32C    ChecksumAlgorithm = "CRC32C"
	AlgorithmCRC32     ChecksumAlgorithm = "CRC32"
	AlgorithmSHA1      ChecksumAlgorithm = "SHA1"
	AlgorithmSHA256    ChecksumAlgorithm = "SHA256"
	AlgorithmCRC64NVME ChecksumAlgorithm = "CRC64NVME"
	AlgorithmNone      ChecksumAlgorithm = "NONE"
)

// PutAlgorithms are the values S3Config.PutChecksum takes.
var PutAlgorithms = []ChecksumAlgorithm{AlgorithmCRC32C, AlgorithmCRC32, AlgorithmSHA256, AlgorithmNone}

// ChecksumProbe is what a server's checksum probe found (the S3 backend's
// ProbeChecksum).
type ChecksumProbe struct {
	// FullObject: the server accepts uploads of checksum type FULL_OBJECT
	// (CRC-32C) and checks the whole object's CRC at completion.
	FullObject bool
	// Copies says, by the algorithm a source is stored with, whether a
	// ranged UploadPartCopy from it reports the CRC-32C of the copied range.
	Copies map[ChecksumAlgorithm]bool
}

// ServerChecked lists the algorithms whose ranged copies the server
// reports correctly, sorted.
func (p ChecksumProbe) ServerChecked() []ChecksumAlgorithm {
	var out []ChecksumAlgorithm
	for a, ok := range p.Copies {
		if ok {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// Configure returns cfg with the checksum mode the probe allows: full
// object when every probed source copies correctly (AWS S3), by source
// (with read-back where the server cannot check) when some do, per-part
// checksums with read-back when none do or the server has no full-object
// checksums.
func (p ChecksumProbe) Configure(cfg S3Config) S3Config {
	good := p.ServerChecked()
	switch {
	case p.FullObject && len(good) == len(p.Copies) && len(good) > 0:
		cfg.Checksum, cfg.ServerChecked = ChecksumFullObject, nil
	case p.FullObject && len(good) > 0:
		cfg.Checksum, cfg.ServerChecked, cfg.VerifyReadback = ChecksumBySource, good, true
	default:
		cfg.Checksum, cfg.ServerChecked, cfg.VerifyReadback = ChecksumParts, nil, true
	}
	return cfg
}

// ReadsBackCopies reports whether assemblies that copy from the auditor's
// own settled objects are read back after their completion: per-part
// checksums with read-back; or by source when the probe found copies from
// CRC-32C sources misreported, since a server-checked assembly's output
// is stored with CRC-32C (versitygw 1.8.0: at least every other rewrite
// of a tail is read back). A tail rewrite then moves the whole tail
// through the process however large it is (TailFloor).
func (c S3Config) ReadsBackCopies() bool {
	switch c.Checksum {
	case ChecksumFullObject:
		return false
	case ChecksumBySource:
		return c.VerifyReadback && !slices.Contains(c.ServerChecked, AlgorithmCRC32C)
	default:
		return c.VerifyReadback
	}
}

// S3Config configures the S3 backend. Start from DefaultS3Config: the
// backend takes a complete configuration, and Validate names a missing or
// offending field.
type S3Config struct {
	Endpoint  string // "" = AWS's endpoint for Region
	Region    string
	PathStyle bool
	KeyPrefix string // "" or ending in "/"
	// AccessKey and SecretKey, when both set, are static credentials;
	// otherwise the SDK's default chain. Never logged.
	AccessKey, SecretKey string

	// MaxAttempts bounds attempts per request (retry policy; the SDK's
	// own retryer is off). AttemptTimeouts bound one attempt, by the
	// class of its operation, so a stalled response is retried;
	// BackoffBase/BackoffMax shape the full-jitter exponential backoff.
	MaxAttempts     int
	AttemptTimeouts AttemptTimeouts
	BackoffBase     time.Duration
	BackoffMax      time.Duration

	HTTPClient *http.Client // tests inject a RoundTripper; nil = the SDK's
	// ConnectTimeout bounds establishing a connection (dial and TLS
	// handshake) when HTTPClient is nil. A zone that does not accept
	// connections (a directory bucket's zone gone dark) is found after this
	// rather than after a whole attempt timeout.
	ConnectTimeout time.Duration
	// CAFile, when set, is a PEM file of the certificate authorities
	// trusted for the endpoint's TLS certificate, instead of the system's
	// roots (and of AWS_CA_BUNDLE's, which the SDK applies when it is
	// empty). A file that cannot be read or holds no certificate fails the
	// store's construction. Only with HTTPClient nil.
	CAFile string

	// PartSize is the largest gathered part (memory per part);
	// CopyConcurrency bounds parts in flight per assembly.
	PartSize        int64
	CopyConcurrency int

	Checksum ChecksumMode
	// VerifyReadback reads an assembled object back and compares its
	// CRC-32C with the expected one when the server could not check it
	// (ChecksumParts); a mismatch fails with ErrPublishedBad (the object is
	// left for the caller's reap). Without it,
	// ChecksumParts checks the expected CRC only when every part's CRC is
	// known locally (no copied parts).
	VerifyReadback bool
	// ServerChecked, for ChecksumBySource, lists the algorithms a copied
	// source may be stored with for the server to check the assembly.
	ServerChecked []ChecksumAlgorithm

	// PutChecksum is the algorithm PutIfAbsent stores objects with
	// (PutAlgorithms; default CRC32C). novasim and the benchmarks choose it
	// for slots: on versitygw 1.8.0 only sources stored without CRC-32C
	// can be copied with a server-checked CRC-32C.
	PutChecksum ChecksumAlgorithm
}

// Defaults of the S3 backend. The ones an operator sets (region, attempts,
// attempt timeouts, copy concurrency) are the defaults of their
// internal/config keys, which name these constants; the rest have no key.
const (
	DefaultRegion                = "us-east-1"
	DefaultMaxAttempts           = 6
	DefaultReadAttemptTimeout    = 2 * time.Minute
	DefaultWriteAttemptTimeout   = 2 * time.Minute
	DefaultCopyAttemptTimeout    = 10 * time.Minute
	DefaultDeleteAttemptTimeout  = time.Minute
	DefaultListAttemptTimeout    = time.Minute
	DefaultControlAttemptTimeout = 5 * time.Minute
	DefaultConnectTimeout        = 5 * time.Second
	DefaultBackoffBase           = 100 * time.Millisecond
	DefaultBackoffMax            = 10 * time.Second
	DefaultCopyConcurrency       = 4
)

// DefaultS3Config is a complete configuration with every default and no
// endpoint, prefix or credentials (AWS's endpoint, the SDK's chain).
func DefaultS3Config() S3Config {
	return S3Config{
		Region:          DefaultRegion,
		MaxAttempts:     DefaultMaxAttempts,
		AttemptTimeouts: DefaultAttemptTimeouts(),
		ConnectTimeout:  DefaultConnectTimeout,
		BackoffBase:     DefaultBackoffBase,
		BackoffMax:      DefaultBackoffMax,
		PartSize:        DefaultLimits.MaxGathered,
		CopyConcurrency: DefaultCopyConcurrency,
		Checksum:        ChecksumFullObject,
		PutChecksum:     AlgorithmCRC32C,
	}
}

// Validate checks that a configuration is complete and consistent: the S3
// backend refuses a zero field rather than defaulting it (start from
// DefaultS3Config).
func (c S3Config) Validate() error {
	var errs []error
	if c.Region == "" {
		errs = append(errs, errors.New("Region: must be set")) //nolint:staticcheck // ST1005: it starts with the field's name
	}
	if err := validPrefix(c.KeyPrefix); err != nil {
		errs = append(errs, fmt.Errorf("KeyPrefix: %w", err))
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		errs = append(errs, errors.New("AccessKey and SecretKey: set both or neither"))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("MaxAttempts: %d is below 1", c.MaxAttempts))
	}
	if err := c.AttemptTimeouts.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase {
		errs = append(errs, errors.New("BackoffBase, BackoffMax: must be positive, BackoffMax >= BackoffBase"))
	}
	if c.HTTPClient == nil && c.ConnectTimeout <= 0 {
		errs = append(errs, errors.New("ConnectTimeout: must be positive"))
	}
	if c.HTTPClient != nil && c.CAFile != "" {
		errs = append(errs, errors.New("CAFile: set with HTTPClient (give that client its roots instead)"))
	}
	if c.PartSize < 2*DefaultLimits.MinPart || c.PartSize > DefaultLimits.MaxPart {
		errs = append(errs, fmt.Errorf("PartSize: %d is outside [%d, %d]", c.PartSize, 2*DefaultLimits.MinPart, DefaultLimits.MaxPart))
	}
	if c.CopyConcurrency < 1 {
		errs = append(errs, fmt.Errorf("CopyConcurrency: %d is below 1", c.CopyConcurrency))
	}
	switch c.Checksum {
	case ChecksumFullObject, ChecksumParts:
	case ChecksumBySource:
		if !c.VerifyReadback {
			errs = append(errs, errors.New("Checksum: by-source needs VerifyReadback (sources the server cannot check are read back)")) //nolint:staticcheck // ST1005: it starts with the field's name
		}
	default:
		errs = append(errs, fmt.Errorf("Checksum: unknown mode %q", c.Checksum)) //nolint:staticcheck // ST1005: it starts with the field's name
	}
	if !slices.Contains(PutAlgorithms, c.PutChecksum) {
		errs = append(errs, fmt.Errorf("PutChecksum: %q is not one of %v", c.PutChecksum, PutAlgorithms))
	}
	return errors.Join(errs...)
}

// Limits are the planner limits this configuration implies.
func (c S3Config) Limits() Limits {
	l := DefaultLimits
	l.MaxGathered = c.PartSize
	return l
}

// String describes the configuration without secrets.
func (c S3Config) String() string {
	creds := "default chain"
	if c.AccessKey != "" {
		creds = "static"
	}
	roots := "default" // the system's, or AWS_CA_BUNDLE's
	if c.CAFile != "" {
		roots = strconv.Quote(c.CAFile)
	}
	return fmt.Sprintf("s3{endpoint=%q region=%s path_style=%v prefix=%q credentials=%s ca=%s checksum=%s put_checksum=%s}",
		c.Endpoint, c.Region, c.PathStyle, c.KeyPrefix, creds, roots, c.Checksum, c.PutChecksum)
}

// FileConfig configures the file backend: bucket B is the directory
// <Root>/B and key K in it the file <Root>/B/<KeyPrefix>K.
type FileConfig struct {
	Root      string
	KeyPrefix string // "" or ending in "/"
	// TempMaxAge: leftover temporary files of create-once writes older
	// than this are removed at open (default 1h). Uploads are kept until
	// completed or aborted.
	TempMaxAge time.Duration
}

// Validate checks the configuration.
func (c FileConfig) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("Root: must be set")) //nolint:staticcheck // ST1005: it starts with the field's name
	}
	if err := validPrefix(c.KeyPrefix); err != nil {
		errs = append(errs, fmt.Errorf("KeyPrefix: %w", err))
	}
	if c.TempMaxAge < 0 {
		errs = append(errs, errors.New("TempMaxAge: negative"))
	}
	return errors.Join(errs...)
}

func validPrefix(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasSuffix(p, "/") {
		return fmt.Errorf("%q does not end in /", p)
	}
	return ValidKey(strings.TrimSuffix(p, "/"))
}
