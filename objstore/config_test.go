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
