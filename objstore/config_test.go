package objstore

import (
	"strings"
	"testing"
)

// TestS3ConfigIsComplete: DefaultS3Config is valid, and a zero
// configuration is refused field by field, not defaulted.
func TestS3ConfigIsComplete(t *testing.T) {
	if err := DefaultS3Config().Validate(); err != nil {
		t.Fatalf("DefaultS3Config: %v", err)
	}
	err := S3Config{}.Validate()
	if err == nil {
		t.Fatal("a zero configuration was accepted")
	}
	for _, field := range []string{"Region", "MaxAttempts", "AttemptTimeouts.read", "AttemptTimeouts.copy", "AttemptTimeouts.control", "ConnectTimeout", "PartSize", "CopyConcurrency", "Checksum"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("the zero configuration's error does not name %s: %v", field, err)
		}
	}
}

// TestReadsBackCopiesAndTailFloor: a rewrite moves the whole tail through
// the process below the copy floor, and at any size below the cap when
// the store reads back copies from the auditor's own (CRC-32C) objects.
func TestReadsBackCopiesAndTailFloor(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  S3Config
		want bool
	}{
		{"full object", S3Config{Checksum: ChecksumFullObject, VerifyReadback: true}, false},
		{"parts, read back", S3Config{Checksum: ChecksumParts, VerifyReadback: true}, true},
		{"parts, unverified copies", S3Config{Checksum: ChecksumParts}, false},
		{"by source, CRC-32C misreported", S3Config{Checksum: ChecksumBySource, VerifyReadback: true,
			ServerChecked: []ChecksumAlgorithm{AlgorithmCRC32, AlgorithmSHA256, AlgorithmNone}}, true},
		{"by source, CRC-32C checked", S3Config{Checksum: ChecksumBySource, VerifyReadback: true,
			ServerChecked: []ChecksumAlgorithm{AlgorithmCRC32C}}, false},
	} {
		if got := c.cfg.ReadsBackCopies(); got != c.want {
			t.Errorf("%s: ReadsBackCopies %v, want %v", c.name, got, c.want)
		}
	}
	l := DefaultLimits
	for _, c := range []struct {
		readsBack bool
		capBytes  int64
		want      int64
	}{{false, 256 << 20, l.CopyFloor()}, {false, 1 << 20, 1 << 20}, {true, 256 << 20, 256 << 20}, {true, 1 << 20, 1 << 20}} {
		if got := TailFloor(l, c.readsBack, c.capBytes); got != c.want {
			t.Errorf("TailFloor(read back %v, cap %d) = %d, want %d", c.readsBack, c.capBytes, got, c.want)
		}
	}
}
